#pragma once
// The `low_latency` engine's heap region for a buffer's sizing: one place for the arithmetic,
// shared by Buffer::Impl, the backends and low_latency_heap_bytes().
#include "common/fp8_cast.hpp"
#include "common/low_latency_protocol.hpp"
#include "switchyard/config.hpp"

namespace switchyard::detail {

common::LowLatencyDispatchMessage low_latency_dispatch_message(int hidden, bool use_fp8);

// The region's layout at `region_offset`; capacities from `sizing` (max_tokens 0: an empty layout).
common::LowLatencyLayout low_latency_layout(const Topology& topology, const BufferSizing& sizing,
                                            size_t region_offset);

}  // namespace switchyard::detail
