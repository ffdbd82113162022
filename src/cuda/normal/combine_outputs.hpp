#pragma once
// A `normal` combine's outputs, the same on one node (cuda/normal/) and across nodes (cuda/internode/): the
// caller's out_combined_x and out_combined_topk_weights, else parts of one allocation.
#include <cuda_runtime.h>

#include <cstdint>

#include "core/engine_plans.hpp"
#include "switchyard/buffer.hpp"

namespace switchyard::cuda {

// combined_x (bf16 [num_tokens, hidden]) and, with weights, combined_topk_weights (f32 [num_tokens, K]):
// the caller's where given, else carved from one allocation on `allocation_stream`
// (detail::CarvedAllocation).
CombineResult combine_outputs(const detail::CombinePlan& plan, int64_t num_tokens, int device,
                              cudaStream_t allocation_stream);

}  // namespace switchyard::cuda
