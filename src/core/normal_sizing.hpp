#pragma once
// The `normal` engine's heap layout and message formats for a given call: one place for the
// arithmetic that sizes buffers, shared by the backends and by normal_heap_bytes().
#include "common/normal_protocol.hpp"
#include "core/backend.hpp"

namespace switchyard::detail {

common::DispatchMessage dispatch_message(int hidden, DType dtype, int topk, bool has_weights);
common::CombineMessage combine_message(int hidden, int topk, bool has_weights);

common::NormalHeapLayout dispatch_heap_layout(const DispatchPlan& plan);
common::NormalHeapLayout combine_heap_layout(const CombinePlan& plan);

}  // namespace switchyard::detail
