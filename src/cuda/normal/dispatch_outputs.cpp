#include "cuda/normal/dispatch_outputs.hpp"

#include <string>
#include <vector>

#include "common/normal_protocol.hpp"
#include "core/caller_dispatch_outputs.hpp"
#include "core/carved_allocation.hpp"
#include "device/cuda_check.hpp"
#include "switchyard/errors.hpp"

namespace switchyard::cuda {

void copy_dispatch_counts(const detail::NormalHandleData& handle, int local_experts, int32_t* pinned,
                          cudaStream_t stream) {
  SY_CUDA_CHECK(cudaMemcpyAsync(pinned, handle.recv_token_count.data(), sizeof(int32_t),
                                cudaMemcpyDeviceToHost, stream));
  SY_CUDA_CHECK(cudaMemcpyAsync(pinned + 1, handle.recv_expert_counts.data(), sizeof(int32_t) * local_experts,
                                cudaMemcpyDeviceToHost, stream));
}

void take_copied_counts(detail::NormalHandleData& handle, int local_experts, const int32_t* pinned,
                        cudaStream_t stream, const CallEnv& env) {
  SY_CUDA_CHECK(cudaStreamSynchronize(stream));
  // Into the handle first, also when an error is raised below: a rank that stands in for its failed call
  // sizes its own outputs by them (-1 rows: the notify's exchange did not pass, and nobody stands in).
  handle.num_recv_tokens = pinned[0];
  handle.num_recv_tokens_per_expert.assign(pinned + 1, pinned + 1 + local_experts);
  env.throw_pending_device_error();
}

void receive_dispatch_counts(detail::NormalHandleData& handle, int local_experts, int32_t* pinned,
                             cudaStream_t stream, const CallEnv& env) {
  copy_dispatch_counts(handle, local_experts, pinned, stream);
  take_copied_counts(handle, local_experts, pinned, stream, env);
}

void refuse_host_synchronising_capture(cudaStream_t stream) {
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  SY_CUDA_CHECK(cudaStreamIsCapturing(stream, &capture));
  if (capture != cudaStreamCaptureStatusNone) {
    throw Unsupported(
        "num_worst_tokens: a dispatch captured in a CUDA graph must not wait for its output sizes "
        "on the host; expected num_worst_tokens > 0 (or a cached handle), got 0");
  }
}

DispatchResult dispatch_outputs(const detail::DispatchPlan& plan, const detail::NormalHandleData& handle,
                                int device, cudaStream_t allocation_stream) {
  const bool worst_case = plan.num_worst_tokens > 0;
  if (!worst_case && handle.num_recv_tokens < 0) {
    throw InvalidArgument(
        "cached_handle: expected a handle whose counts reached the host (a dispatch without "
        "num_worst_tokens), got a worst-case one; pass num_worst_tokens again");
  }
  const int64_t rows = worst_case ? plan.num_worst_tokens : handle.num_recv_tokens;
  // The outputs the call makes: the caller's (out_recv_*, or its allocator's: checked there), else parts of
  // one allocation (detail::CarvedAllocation), made while the stream waits for the host after the counts.
  const DispatchOutputs given = detail::caller_dispatch_outputs(plan, rows, Device::cuda, device);
  struct Output {
    const TensorView& given;
    Tensor* result;
    DType dtype;
    int64_t cols;
    size_t offset = 0;
  };
  DispatchResult result;
  std::vector<Output> outputs;
  outputs.push_back({given.recv_x, &result.recv_x, plan.dtype, plan.hidden});
  if (plan.has_scales) {
    outputs.push_back(
        {given.recv_x_scales, &result.recv_x_scales, DType::f32, plan.hidden / common::kScaleBlock});
  }
  if (plan.topk > 0) outputs.push_back({given.recv_topk_idx, &result.recv_topk_idx, DType::i64, plan.topk});
  if (plan.has_weights) {
    outputs.push_back({given.recv_topk_weights, &result.recv_topk_weights, DType::f32, plan.topk});
  }
  detail::CarvedAllocation carving;
  bool carved = false;
  for (Output& output : outputs) {
    if (output.given.defined()) {
      *output.result = Tensor::borrow(output.given);
    } else {
      output.offset = carving.reserve(output.dtype, rows * output.cols);
      carved = true;
    }
  }
  if (!carved) return result;
  const Tensor storage = carving.allocate(Device::cuda, device, allocation_stream);
  for (const Output& output : outputs) {
    if (!output.given.defined()) {
      *output.result = Tensor::part_of(storage, output.offset, output.dtype, {rows, output.cols});
    }
  }
  return result;
}

StandInDispatch stand_in_dispatch(const detail::DispatchPlan& plan, const detail::NormalHandleData& handle,
                                  int device, cudaStream_t allocation_stream) {
  StandInDispatch stand_in{plan, {}};
  stand_in.plan.args.out_recv_x = {};
  stand_in.plan.args.out_recv_x_scales = {};
  stand_in.plan.args.out_recv_topk_idx = {};
  stand_in.plan.args.out_recv_topk_weights = {};
  stand_in.plan.args.allocate_outputs = nullptr;
  stand_in.outputs = dispatch_outputs(stand_in.plan, handle, device, allocation_stream);
  return stand_in;
}

}  // namespace switchyard::cuda
