#pragma once
// The CUDA `normal` engine on one node, host side: the layout kernel, then notify (counts and the
// receive plan), dispatch and combine over the normal region of the heap (cuda/normal/kernels.hpp).
// Across nodes the backend uses the hierarchical engine (cuda/internode/) instead.
#include <cuda_runtime.h>

#include "core/backend.hpp"
#include "cuda/backend/call_env.hpp"
#include "cuda/normal/kernels.hpp"

namespace switchyard::cuda {

class NormalEngine {
 public:
  // Prepares the kernels (once per device) and the pinned counts. The current device must be the
  // buffer's.
  NormalEngine(const BufferOptions& options, detail::BufferId owner);
  ~NormalEngine();
  NormalEngine(const NormalEngine&) = delete;
  NormalEngine& operator=(const NormalEngine&) = delete;

  // `context`: the backend's for a new call (any heap layout; the engine sets the call's).
  DispatchLayout layout(const TensorView& topk_idx, int num_experts, KernelContext context,
                        const CallEnv& env, const DispatchLayoutOutputs* out = nullptr);
  DispatchResult dispatch(const detail::DispatchPlan& plan, KernelContext context, const CallEnv& env);
  CombineResult combine(const detail::CombinePlan& plan, KernelContext context, const CallEnv& env);

 private:
  Tensor allocate(const CallEnv& env, DType dtype, std::initializer_list<int64_t> dims) const;
  // Page-locked room for `count` counts, grown only when a call needs more.
  int32_t* pinned_counts(int count);

  BufferOptions options_;
  int device_;
  detail::BufferId owner_;
  int32_t* pinned_counts_ = nullptr;
  int pinned_capacity_ = 0;
};

}  // namespace switchyard::cuda
