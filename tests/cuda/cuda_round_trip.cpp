#include "cuda/cuda_round_trip.hpp"

#include "cuda/device_tensors.hpp"
#include "cuda/rank_device.hpp"
#include "switchyard/errors.hpp"

namespace switchyard::testing {

// One rank's round trip on the GPU; every output comes back to the host for comparison.

namespace {

// `from` (on the device) into `view` (a Buffer's heap-resident view, the same bytes), ordered on `stream`.
void copy_to_view(const TensorView& view, const Tensor& from, cudaStream_t stream) {
  if (from.nbytes() == 0) return;
  if (cudaMemcpyAsync(view.data, from.data(), from.nbytes(), cudaMemcpyDeviceToDevice, stream) !=
      cudaSuccess) {
    throw SystemError("copy_to_view: cudaMemcpyAsync failed");
  }
}

}  // namespace

DeviceRun run_on_device(Buffer& buffer, const workload::Shape& shape, const workload::RankData& data,
                        const Expected& expected, int expert_alignment, cudaStream_t stream,
                        const DispatchHandle* cached, DispatchHandle* handle_out,
                        const CallTuning& dispatch_tuning, const CallTuning& combine_tuning,
                        bool scales_column_major, bool heap_inputs, bool with_topk, bool staged_inputs) {
  const int rank = buffer.rank();
  const int device = device_of(buffer);
  const int64_t rows = static_cast<int64_t>(expected.dispatched[rank].recv_src_rank.size());
  // The heap views are row-major; column-major scales are staged (transposed) into them.
  const bool column_major = scales_column_major && data.x_scales.defined() && (!heap_inputs || staged_inputs);
  Tensor x = to_device(data.x, device, stream);
  const Tensor host_scales = column_major ? transpose_scales(data.x_scales) : data.x_scales;
  Tensor scales = to_device(host_scales, device, stream);
  Tensor topk_idx = to_device(data.topk_idx, device, stream);
  Tensor topk_weights = to_device(data.topk_weights, device, stream);
  DispatchArgs args;
  args.x = x;
  args.x_scales = scales;
  args.x_scales_column_major = column_major;
  if (heap_inputs && !staged_inputs) {
    const NormalInputViews views = buffer.normal_input(data.x.size(0), shape.hidden, shape.dtype);
    copy_to_view(views.x, x, stream);
    args.x = views.x;
    if (scales.defined()) {
      copy_to_view(views.x_scales, scales, stream);
      args.x_scales = views.x_scales;
    }
  }
  if (with_topk) {
    args.topk_idx = topk_idx;
    args.topk_weights = topk_weights;
  }
  args.num_experts = shape.num_experts;
  args.expert_alignment = expert_alignment;
  args.cached_handle = cached;
  args.tuning = dispatch_tuning;
  args.stream = stream;
  // Poisoned outputs: anything the engine fails to write shows up as 0xA5 bytes.
  Tensor out_x = poisoned_device(shape.dtype, {rows, shape.hidden}, device, stream);
  args.out_recv_x = out_x;
  Tensor out_scales, out_idx, out_weights;
  if (shape.dtype == DType::fp8_e4m3) {
    out_scales = poisoned_device(DType::f32, {rows, shape.hidden / 128}, device, stream);
    args.out_recv_x_scales = out_scales;
  }
  if (with_topk) {
    out_idx = poisoned_device(DType::i64, {rows, shape.topk}, device, stream);
    args.out_recv_topk_idx = out_idx;
  }
  if (with_topk && shape.with_weights) {
    out_weights = poisoned_device(DType::f32, {rows, shape.topk}, device, stream);
    args.out_recv_topk_weights = out_weights;
  }
  DispatchResult dispatched = buffer.dispatch(args);
  buffer.synchronize(stream);
  DeviceRun run;
  run.num_recv_tokens = dispatched.num_recv_tokens;
  run.num_recv_tokens_per_expert = dispatched.num_recv_tokens_per_expert;
  run.recv_x = to_host(dispatched.recv_x, stream);
  run.recv_x_scales = to_host(dispatched.recv_x_scales, stream);
  run.recv_topk_idx = to_host(dispatched.recv_topk_idx, stream);
  run.recv_topk_weights = to_host(dispatched.recv_topk_weights, stream);

  Tensor y = to_device(workload::synthetic_expert(run.recv_x, run.recv_x_scales, rank), device, stream);
  CombineArgs combine_args;
  combine_args.x = y;
  combine_args.tuning = combine_tuning;
  const bool with_weights = with_topk && shape.with_weights;
  if (with_weights) combine_args.topk_weights = dispatched.recv_topk_weights;
  if (heap_inputs && !staged_inputs) {
    const NormalCombineInputViews views = buffer.normal_combine_input(dispatched.handle, shape.hidden);
    copy_to_view(views.x, y, stream);
    combine_args.x = views.x;
    if (with_weights) {
      copy_to_view(views.topk_weights, dispatched.recv_topk_weights, stream);
      combine_args.topk_weights = views.topk_weights;
    }
  }
  combine_args.handle = &dispatched.handle;
  combine_args.stream = stream;
  // The combine biases that `expected` was computed with, if any.
  Tensor bias0, bias1;
  if (!expected.biases.empty()) {
    if (expected.biases[rank].bias0.defined()) bias0 = to_device(expected.biases[rank].bias0, device, stream);
    if (expected.biases[rank].bias1.defined()) bias1 = to_device(expected.biases[rank].bias1, device, stream);
    combine_args.bias0 = bias0;
    combine_args.bias1 = bias1;
  }
  Tensor out_combined = poisoned_device(DType::bf16, {data.x.size(0), shape.hidden}, device, stream);
  combine_args.out_combined_x = out_combined;
  CombineResult combined = buffer.combine(combine_args);
  buffer.synchronize(stream);
  run.combined_x = to_host(combined.combined_x, stream);
  run.combined_topk_weights = to_host(combined.combined_topk_weights, stream);
  if (handle_out) *handle_out = dispatched.handle;
  return run;
}

DeviceRun run_on_device_without_topk(Buffer& buffer, const workload::Shape& shape,
                                     const workload::RankData& data, const Expected& expected,
                                     int expert_alignment, cudaStream_t stream) {
  const int rank = buffer.rank();
  const int device = device_of(buffer);
  const int64_t rows = static_cast<int64_t>(expected.dispatched[rank].recv_src_rank.size());
  Tensor x = to_device(data.x, device, stream), scales = to_device(data.x_scales, device, stream);
  Tensor topk_idx = to_device(data.topk_idx, device, stream);
  DispatchLayout layout = buffer.get_dispatch_layout(topk_idx, shape.num_experts, stream);
  DispatchArgs args;
  args.x = x;
  args.x_scales = scales;
  args.num_experts = shape.num_experts;
  args.expert_alignment = expert_alignment;
  args.layout = &layout;  // the routing: no topk_idx
  args.stream = stream;
  Tensor out_x = poisoned_device(shape.dtype, {rows, shape.hidden}, device, stream);
  args.out_recv_x = out_x;
  Tensor out_scales;
  if (shape.dtype == DType::fp8_e4m3) {
    out_scales = poisoned_device(DType::f32, {rows, shape.hidden / 128}, device, stream);
    args.out_recv_x_scales = out_scales;
  }
  DispatchResult dispatched = buffer.dispatch(args);
  buffer.synchronize(stream);
  DeviceRun run;
  run.num_recv_tokens = dispatched.num_recv_tokens;
  run.num_recv_tokens_per_expert = dispatched.num_recv_tokens_per_expert;
  run.recv_x = to_host(dispatched.recv_x, stream);
  run.recv_x_scales = to_host(dispatched.recv_x_scales, stream);
  run.recv_topk_idx = to_host(dispatched.recv_topk_idx, stream);
  run.recv_topk_weights = to_host(dispatched.recv_topk_weights, stream);

  Tensor y = to_device(workload::synthetic_expert(run.recv_x, run.recv_x_scales, rank), device, stream);
  CombineArgs combine_args;
  combine_args.x = y;
  combine_args.handle = &dispatched.handle;
  combine_args.stream = stream;
  Tensor out_combined = poisoned_device(DType::bf16, {data.x.size(0), shape.hidden}, device, stream);
  combine_args.out_combined_x = out_combined;
  CombineResult combined = buffer.combine(combine_args);
  buffer.synchronize(stream);
  run.combined_x = to_host(combined.combined_x, stream);
  run.combined_topk_weights = to_host(combined.combined_topk_weights, stream);
  return run;
}

void compare_with_reference(const DeviceRun& run, const workload::Shape& shape, const Expected& expected,
                            int rank, std::vector<std::string>* failures, bool with_topk) {
  const auto& want = expected.dispatched[rank];
  auto compare = [&](const Tensor& actual, const Tensor& wanted, const char* what) {
    std::string why;
    if (!workload::bitwise_equal(actual, wanted, &why)) {
      failures->push_back("rank " + std::to_string(rank) + " " + what + ": " + why);
    }
  };
  if (run.num_recv_tokens != static_cast<int64_t>(want.recv_src_rank.size())) {
    failures->push_back("rank " + std::to_string(rank) + " num_recv_tokens: expected " +
                        std::to_string(want.recv_src_rank.size()) + ", got " +
                        std::to_string(run.num_recv_tokens));
    return;
  }
  if (run.num_recv_tokens_per_expert != want.num_recv_tokens_per_expert) {
    failures->push_back("rank " + std::to_string(rank) + " num_recv_tokens_per_expert differs");
  }
  compare(run.recv_x, want.recv_x, "recv_x");
  if (shape.dtype == DType::fp8_e4m3) compare(run.recv_x_scales, want.recv_x_scales, "recv_x_scales");
  compare(run.combined_x, expected.combined[rank].combined_x, "combined_x");
  if (!with_topk) {
    if (run.recv_topk_idx.defined() || run.recv_topk_weights.defined() ||
        run.combined_topk_weights.defined()) {
      failures->push_back(
          "rank " + std::to_string(rank) +
          ": expected no recv_topk_idx, recv_topk_weights or combined_topk_weights without topk_idx");
    }
    return;
  }
  compare(run.recv_topk_idx, want.recv_topk_idx, "recv_topk_idx");
  if (shape.with_weights) compare(run.recv_topk_weights, want.recv_topk_weights, "recv_topk_weights");
  if (shape.with_weights) {
    compare(run.combined_topk_weights, expected.combined[rank].combined_topk_weights,
            "combined_topk_weights");
  }
}

}  // namespace switchyard::testing
