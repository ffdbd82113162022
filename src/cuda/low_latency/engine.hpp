#pragma once
// The CUDA `low_latency` engine, host side: outputs and handle, launches, hooks. Each call launches
// a send kernel and (now, or from the hook) a receive kernel on the caller's stream, and never
// waits for the device, so calls can be captured in CUDA graphs. The call sequence that numbers
// signals and picks the buffer half is counted on the device (LowLatencyDeviceState), so a graph
// replay advances it as a direct call would.
//
// All of a buffer's low-latency calls and hooks must be issued on one stream (or ordered by the
// caller): the device state is stream-ordered.
//
// Across nodes (ranks_per_node < num_ranks) the kernels reach peers of other nodes through the
// loopback device transport (puts with signal adds; cuda/low_latency/link.cuh) and peers of their
// node by stores, as on one node. Nothing there is host state either, so such calls can be captured
// in CUDA graphs as well.
// NOTES: a put reads its source from the heap, so across nodes a combine without zero_copy stages
// the rows it sends to other nodes in the combine buffer (low_latency_combine_buffer), at their own
// rows, as DeepEP stages them in its send buffer: what a caller wrote there for a later zero-copy
// combine does not survive such a call.
#include <cuda_runtime.h>

#include "core/engine.hpp"
#include "cuda/backend/call_services.hpp"
#include "cuda/backend/device_heap.hpp"
#include "cuda/low_latency/kernels.hpp"
#include "device/kernel_context.hpp"
#include "transport/loopback_device.hpp"

namespace switchyard::cuda {

class LowLatencyEngine final : public detail::LowLatencyUnit {
 public:
  // Allocates the device state; prepares the kernels (once per device). The current device must be
  // the buffer's. `services`: the backend's, which outlives the engine.
  LowLatencyEngine(const BufferOptions& options, const DeviceHeap& heap, int sm_count, detail::BufferId owner,
                   CallServices& services);
  ~LowLatencyEngine() override;
  LowLatencyEngine(const LowLatencyEngine&) = delete;
  LowLatencyEngine& operator=(const LowLatencyEngine&) = delete;

  LowLatencyDispatchResult dispatch(const detail::LowLatencyDispatchPlan& plan) override;
  LowLatencyCombineResult combine(const detail::LowLatencyCombinePlan& plan) override;

 private:
  // `context`: a new call's (KernelContext of the backend); `allocation_stream`: where outputs the
  // library allocates are stream-ordered (nullptr: plain allocations).
  LowLatencyDispatchResult run_dispatch(const detail::LowLatencyDispatchPlan& plan,
                                        const KernelContext& context, cudaStream_t stream,
                                        cudaStream_t allocation_stream);
  LowLatencyCombineResult run_combine(const detail::LowLatencyCombinePlan& plan, const KernelContext& context,
                                      cudaStream_t stream, cudaStream_t allocation_stream);
  LowLatencyGrid grid() const;
  // The transport to other nodes (its delays read from the environment at the first call, as the
  // other engines read theirs).
  const transport::LoopbackDevice& loopback(const common::LowLatencyLayout& layout);

  int device_;
  TransportOptions transport_;  // the Buffer's (BufferOptions::transport): the loopback delays across nodes
  const DeviceHeap& heap_;
  int sm_count_;
  detail::BufferId owner_;
  CallServices& services_;
  LowLatencyDeviceState* state_ = nullptr;
  // A combine hook reduces with a copy of topk_idx and topk_weights taken at the call (the caller
  // may reuse its tensors meanwhile). One pending hook at a time (core enforces it), so one copy.
  int64_t* hook_topk_idx_ = nullptr;
  float* hook_topk_weights_ = nullptr;
  int64_t hook_routing_capacity_ = 0;  // entries: max_tokens_per_rank * topk of the sizing
  bool have_loopback_ = false;
  transport::LoopbackDevice loopback_{};
};

}  // namespace switchyard::cuda
