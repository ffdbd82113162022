#include "cuda/normal/dispatch_outputs.hpp"

#include <string>

#include "common/normal_protocol.hpp"
#include "device/cuda_check.hpp"
#include "switchyard/errors.hpp"

namespace switchyard::cuda {

namespace {

// A caller's output of `rows` rows, or a new one on the call's allocation stream.
Tensor device_output(const TensorView& given, DType dtype, int64_t rows, int64_t cols, int device,
                     cudaStream_t allocation_stream, const char* name) {
  if (!given.defined()) return Tensor::empty(dtype, {rows, cols}, Device::cuda, device, allocation_stream);
  if (given.shape[0] != rows) {
    throw InvalidArgument(std::string(name) + ": expected " + std::to_string(rows) +
                          " rows (tokens received), got " + given.describe());
  }
  return Tensor::borrow(given);
}

}  // namespace

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
  env.throw_pending_device_error();
  handle.num_recv_tokens = pinned[0];
  handle.num_recv_tokens_per_expert.assign(pinned + 1, pinned + 1 + local_experts);
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
  const DispatchArgs& args = plan.args;
  const bool worst_case = plan.num_worst_tokens > 0;
  if (!worst_case && handle.num_recv_tokens < 0) {
    throw InvalidArgument(
        "cached_handle: expected a handle whose counts reached the host (a dispatch without "
        "num_worst_tokens), got a worst-case one; pass num_worst_tokens again");
  }
  const int64_t rows = worst_case ? plan.num_worst_tokens : handle.num_recv_tokens;
  DispatchResult result;
  result.recv_x =
      device_output(args.out_recv_x, plan.dtype, rows, plan.hidden, device, allocation_stream, "out_recv_x");
  if (plan.has_scales) {
    result.recv_x_scales =
        device_output(args.out_recv_x_scales, DType::f32, rows, plan.hidden / common::kScaleBlock, device,
                      allocation_stream, "out_recv_x_scales");
  }
  if (plan.topk > 0) {
    result.recv_topk_idx = device_output(args.out_recv_topk_idx, DType::i64, rows, plan.topk, device,
                                         allocation_stream, "out_recv_topk_idx");
  }
  if (plan.has_weights) {
    result.recv_topk_weights = device_output(args.out_recv_topk_weights, DType::f32, rows, plan.topk, device,
                                             allocation_stream, "out_recv_topk_weights");
  }
  return result;
}

}  // namespace switchyard::cuda
