#pragma once
// The CUDA hierarchical `normal` engine, host side: used by the backend when ranks_per_node <
// num_ranks. It sizes the call (heap layouts, co-residency), allocates outputs and the handle, and
// launches notify, dispatch and combine over the loopback device transport.
#include <cuda_runtime.h>

#include <functional>

#include "core/engine.hpp"
#include "cuda/backend/call_services.hpp"
#include "cuda/internode/kernels.hpp"
#include "transport/loopback_device.hpp"

namespace switchyard::cuda {

class InternodeEngine final : public detail::NormalUnit {
 public:
  // Prepares the kernels (once per device) and the pinned counts. The current device must be the
  // buffer's; `heap_bytes` is the whole heap's size (the normal region is its front). `services`: the
  // backend's, which outlives the engine.
  InternodeEngine(const BufferOptions& options, size_t heap_bytes, int sm_count, detail::BufferId owner,
                  CallServices& services);
  ~InternodeEngine() override;
  InternodeEngine(const InternodeEngine&) = delete;
  InternodeEngine& operator=(const InternodeEngine&) = delete;

  DispatchResult dispatch(const detail::DispatchPlan& plan) override;
  CombineResult combine(const detail::CombinePlan& plan) override;

 private:
  // `context`: the backend's for a new call (any layout; the engine sets its own).
  DispatchResult run_dispatch(const detail::DispatchPlan& plan, KernelContext context, const CallEnv& env);
  CombineResult run_combine(const detail::CombinePlan& plan, KernelContext context, const CallEnv& env);
  void check_call(const Topology& topology, int num_channels, int sharing_ranks) const;
  InternodeTransports<transport::LoopbackDevice> transports(const common::NormalHeapLayout& layout,
                                                            const common::InternodeHeapLayout& rdma);
  Tensor allocate(cudaStream_t allocation_stream, DType dtype, std::initializer_list<int64_t> dims) const;

  BufferOptions options_;
  int device_;
  int sm_count_;
  detail::BufferId owner_;
  CallServices& services_;
  size_t normal_region_bytes_ = 0;
  int blocks_per_sm_ = 0;
  int32_t* pinned_counts_ = nullptr;
  bool have_loopback_options_ = false;
  transport::LoopbackOptions loopback_options_;
};

}  // namespace switchyard::cuda
