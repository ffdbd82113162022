#pragma once
// get_dispatch_layout on the host: which ranks and experts each token goes to.
#include "switchyard/buffer.hpp"

namespace switchyard::cpu {

DispatchLayout compute_dispatch_layout(const TensorView& topk_idx, int num_experts, const Topology& topology);

// `layout` copied into the caller's (checked) outputs; the result borrows them.
DispatchLayout copy_into(const DispatchLayout& layout, const DispatchLayoutOutputs& out);

}  // namespace switchyard::cpu
