#pragma once
// The `symmetric` engine's heap region for a buffer's sizing: one place for the arithmetic, shared
// by Buffer::Impl, the backends and symmetric_heap_bytes().
#include "common/symmetric_protocol.hpp"
#include "switchyard/config.hpp"

namespace switchyard::detail {

common::SymmetricToken symmetric_token(int hidden, bool use_fp8, int topk);

// The region's layout at `region_offset`; capacities from `sizing` (max_tokens 0: an empty layout).
// The heap-resident tensors' fields of `sizing` (symmetric_heap_input,
// symmetric_heap_output_rows_per_expert): only with a symmetric region, and no more output rows than an
// expert can receive. InvalidArgument names the field.
void check_symmetric_heap_tensors(const Topology& topology, const BufferSizing& sizing);

common::SymmetricLayout symmetric_layout(const Topology& topology, const BufferSizing& sizing,
                                         size_t region_offset);

}  // namespace switchyard::detail
