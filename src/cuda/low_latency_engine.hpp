#pragma once
// The CUDA `low_latency` engine, host side: outputs and handle, launches, hooks. Each call launches
// a send kernel and (now, or from the hook) a receive kernel on the caller's stream, and never
// waits for the device, so calls can be captured in CUDA graphs. The call sequence that numbers
// signals and picks the buffer half is counted on the device (LowLatencyDeviceState), so a graph
// replay advances it as a direct call would.
//
// All of a buffer's low-latency calls and hooks must be issued on one stream (or ordered by the
// caller): the device state is stream-ordered.
#include <cuda_runtime.h>

#include "core/backend.hpp"
#include "cuda/device_heap.hpp"
#include "cuda/kernel_context.hpp"
#include "cuda/low_latency_kernels.hpp"

namespace switchyard::cuda {

class LowLatencyEngine {
 public:
  // Allocates the device state; prepares the kernels (once per device). The current device must be
  // the buffer's.
  LowLatencyEngine(const BufferOptions& options, const DeviceHeap& heap, int sm_count, const void* owner);
  ~LowLatencyEngine();
  LowLatencyEngine(const LowLatencyEngine&) = delete;
  LowLatencyEngine& operator=(const LowLatencyEngine&) = delete;

  // `context`: a new call's (KernelContext of the backend); `allocation_stream`: where outputs the
  // library allocates are stream-ordered (nullptr: plain allocations).
  LowLatencyDispatchResult dispatch(const detail::LowLatencyDispatchPlan& plan, const KernelContext& context,
                                    cudaStream_t stream, cudaStream_t allocation_stream);
  LowLatencyCombineResult combine(const detail::LowLatencyCombinePlan& plan, const KernelContext& context,
                                  cudaStream_t stream, cudaStream_t allocation_stream);

 private:
  LowLatencyGrid grid() const;

  int device_;
  const DeviceHeap& heap_;
  int sm_count_;
  const void* owner_;
  LowLatencyDeviceState* state_ = nullptr;
  // A combine hook reduces with a copy of topk_idx and topk_weights taken at the call (the caller
  // may reuse its tensors meanwhile). One pending hook at a time (core enforces it), so one copy.
  int64_t* hook_topk_idx_ = nullptr;
  float* hook_topk_weights_ = nullptr;
  int64_t hook_routing_capacity_ = 0;  // entries: max_tokens_per_rank * topk of the sizing
};

}  // namespace switchyard::cuda
