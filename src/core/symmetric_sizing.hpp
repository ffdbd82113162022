#pragma once
// The `symmetric` engine's heap region for a buffer's sizing: one place for the arithmetic, shared
// by Buffer::Impl, the backends and symmetric_heap_bytes().
#include "common/symmetric_protocol.hpp"
#include "switchyard/config.hpp"

namespace switchyard::detail {

common::SymmetricToken symmetric_token(int hidden, bool use_fp8, int topk);

// The region's layout at `region_offset`; capacities from `sizing` (max_tokens 0: an empty layout).
common::SymmetricLayout symmetric_layout(const Topology& topology, const BufferSizing& sizing,
                                         size_t region_offset);

}  // namespace switchyard::detail
