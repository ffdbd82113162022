#pragma once
// One expert-major dispatch and its combine (low_latency or symmetric), each captured once in a CUDA
// graph for the replay tests: the replays read new inputs uploaded into the same device tensors.
#include <cuda_runtime.h>

#include "cuda/expert_major_round_trip.hpp"
#include "support/expert_major_cases.hpp"
#include "switchyard/buffer.hpp"
#include "switchyard/group.hpp"

namespace switchyard::testing::expert_major {

class CapturedRoundTrip {
 public:
  // Captures `engine`'s dispatch of `in` into `out` on `stream`, then its combine of `y` (the
  // experts' outputs [L, C, H], on the device) into out.combined_x. Every rank of `group` does the
  // same: no rank does other CUDA work while any rank captures (a device-wide sync elsewhere would
  // invalidate a capture).
  CapturedRoundTrip(Engine engine, const Case& c, Group& group, Buffer& buffer, const DeviceInputs& in,
                    const TensorView& y, const PoisonedOutputs& out, cudaStream_t stream);
  CapturedRoundTrip(const CapturedRoundTrip&) = delete;
  CapturedRoundTrip& operator=(const CapturedRoundTrip&) = delete;
  ~CapturedRoundTrip();

  void launch_dispatch() const;
  void launch_combine() const;
  // The captured dispatch's result: its tensors are the ones every replay writes.
  const LowLatencyDispatchResult& dispatched() const { return dispatched_; }
  // Lets the captured dispatch's handle go, as a caller does once its graphs are made: the tables it
  // owns must stay valid for the replays, which the graphs' kernels keep reading.
  void drop_handle() { dispatched_.handle = LowLatencyHandle(); }

 private:
  cudaStream_t stream_;
  LowLatencyDispatchResult dispatched_;
  cudaGraph_t dispatch_graph_ = nullptr, combine_graph_ = nullptr;
  cudaGraphExec_t dispatch_exec_ = nullptr, combine_exec_ = nullptr;
};

}  // namespace switchyard::testing::expert_major
