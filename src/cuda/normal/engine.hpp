#pragma once
// The CUDA `normal` engine on one node, host side: the layout kernel, then notify (counts and the
// receive plan), dispatch and combine over the normal region of the heap (cuda/normal/kernels.hpp).
// Across nodes the backend uses the hierarchical engine (cuda/internode/) instead.
#include <cuda_runtime.h>

#include "core/engine.hpp"
#include "cuda/backend/call_services.hpp"
#include "cuda/normal/dispatch_counts.hpp"
#include "cuda/normal/dispatch_phases.hpp"
#include "cuda/normal/kernels.hpp"

namespace switchyard::cuda {

class NormalEngine final : public detail::NormalUnit {
 public:
  // Prepares the kernels (once per device) and the counts' page-locked memory. The current device must be the
  // buffer's. `services`: the backend's, which outlives the engine.
  NormalEngine(const BufferOptions& options, detail::BufferId owner, CallServices& services);
  ~NormalEngine() override;
  NormalEngine(const NormalEngine&) = delete;
  NormalEngine& operator=(const NormalEngine&) = delete;

  // `context`: the backend's for a new call (any heap layout; the engine sets the call's).
  DispatchLayout layout(const TensorView& topk_idx, int num_experts, KernelContext context,
                        const CallEnv& env, const DispatchLayoutOutputs* out = nullptr);
  DispatchResult dispatch(const detail::DispatchPlan& plan) override;
  CombineResult combine(const detail::CombinePlan& plan) override;

 private:
  DispatchResult run_dispatch(const detail::DispatchPlan& plan, KernelContext context, const CallEnv& env);
  CombineResult run_combine(const detail::CombinePlan& plan, KernelContext context, const CallEnv& env);
  void stand_in_after_the_counts(const detail::DispatchPlan& plan, const detail::NormalHandleData& handle,
                                 const common::DispatchMessage& message, const KernelContext& context,
                                 const CallEnv& env) noexcept;
  Tensor allocate(const CallEnv& env, DType dtype, std::initializer_list<int64_t> dims) const;

  BufferOptions options_;
  int device_;
  detail::BufferId owner_;
  CallServices& services_;
  DispatchCounts counts_;  // how a fresh dispatch's host reads its output sizes
  DispatchPhases phases_;  // SWITCHYARD_NORMAL_PHASES: where a fresh dispatch's time goes
  // Device memory, 0 between calls: the blocks of the in-place gather ([0]) and combine ([1]) that finished
  // the call (close_call_by_last_block, device/device_barrier.cuh).
  uint64_t* blocks_done_ = nullptr;
};

}  // namespace switchyard::cuda
