#include "cuda/released_layout_round_trip.hpp"

#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "cuda/device_tensors.hpp"
#include "cuda/rank_device.hpp"

namespace switchyard::testing {

namespace {

void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(status));
}

// The caller's own device copy of a layout tensor, allocated stream-ordered as a framework would.
Tensor caller_copy(const Tensor& source, int device, cudaStream_t stream) {
  Tensor copy = Tensor::empty_like_shape(source.dtype(), source.view().shape, source.view().ndim,
                                         Device::cuda, device, stream);
  if (source.nbytes() > 0) {
    check(cudaMemcpyAsync(copy.data(), source.data(), source.nbytes(), cudaMemcpyDeviceToDevice, stream),
          "layout copy");
  }
  check(cudaStreamSynchronize(stream), "layout copy sync");
  return copy;
}

// Dispatch with `args` (inputs set) into poisoned outputs, `between` once the dispatch has run, then the
// synthetic expert and the combine; every output back on the host.
DeviceRun dispatch_then_combine(Buffer& buffer, const workload::Shape& shape, const workload::RankData& data,
                                const Expected& expected, cudaStream_t stream, DispatchArgs args,
                                bool with_topk, DispatchHandle* handle_out,
                                const std::function<void()>& between) {
  const int rank = buffer.rank();
  const int device = device_of(buffer);
  const int64_t rows = static_cast<int64_t>(expected.dispatched[rank].recv_src_rank.size());
  const bool with_weights = with_topk && shape.with_weights;
  args.stream = stream;
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
  if (with_weights) {
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
  between();

  Tensor y = to_device(workload::synthetic_expert(run.recv_x, run.recv_x_scales, rank), device, stream);
  CombineArgs combine_args;
  combine_args.x = y;
  if (with_weights) combine_args.topk_weights = dispatched.recv_topk_weights;
  combine_args.handle = &dispatched.handle;
  combine_args.stream = stream;
  Tensor out_combined = poisoned_device(DType::bf16, {data.x.size(0), shape.hidden}, device, stream);
  combine_args.out_combined_x = out_combined;
  CombineResult combined = buffer.combine(combine_args);
  buffer.synchronize(stream);
  run.combined_x = to_host(combined.combined_x, stream);
  run.combined_topk_weights = to_host(combined.combined_topk_weights, stream);
  if (handle_out) *handle_out = dispatched.handle;
  return run;
}

}  // namespace

ReleasedLayoutDeviceRuns run_on_device_releasing_layout(Buffer& buffer, const workload::Shape& shape,
                                                        const workload::RankData& data,
                                                        const Expected& expected, int expert_alignment,
                                                        cudaStream_t stream, bool with_topk) {
  const int rank = buffer.rank();
  const int device = device_of(buffer);
  Tensor x = to_device(data.x, device, stream), scales = to_device(data.x_scales, device, stream);
  Tensor topk_idx = to_device(data.topk_idx, device, stream);
  Tensor topk_weights = to_device(data.topk_weights, device, stream);
  const DispatchLayout computed = buffer.get_dispatch_layout(topk_idx, shape.num_experts, stream);
  DispatchLayout caller;
  caller.num_tokens_per_rank = caller_copy(computed.num_tokens_per_rank, device, stream);
  caller.num_tokens_per_node = caller_copy(computed.num_tokens_per_node, device, stream);
  caller.num_tokens_per_expert = caller_copy(computed.num_tokens_per_expert, device, stream);
  caller.is_token_in_rank = caller_copy(computed.is_token_in_rank, device, stream);

  // Every token routed to the ranks it did not go to: a handle still reading the caller's memory, or
  // memory the pool handed on, would route its combine and a cached dispatch differently.
  std::vector<uint8_t> other_routing = expected.layouts[rank].is_token_in_rank;
  for (uint8_t& routed : other_routing) routed ^= 1;
  const Tensor other_routing_host =
      bool_tensor(other_routing, data.x.size(0), static_cast<int64_t>(shape.topology.num_ranks));
  std::vector<Tensor> scribbles;
  auto release_layout = [&] {
    upload(caller.is_token_in_rank, other_routing_host, stream);
    for (const Tensor* count :
         {&caller.num_tokens_per_rank, &caller.num_tokens_per_node, &caller.num_tokens_per_expert}) {
      if (count->nbytes() > 0)
        check(cudaMemsetAsync(count->data(), 0x5a, count->nbytes(), stream), "scribble");
    }
    caller = DispatchLayout{};  // freed on `stream`: the pool may hand the memory to the next allocations
    constexpr int kScribbles = 8;
    for (int i = 0; i < kScribbles; ++i) scribbles.push_back(to_device(other_routing_host, device, stream));
  };

  DispatchArgs args;
  args.x = x;
  args.x_scales = scales;
  if (with_topk) {
    args.topk_idx = topk_idx;
    args.topk_weights = topk_weights;
  }
  args.num_experts = shape.num_experts;
  args.expert_alignment = expert_alignment;
  args.layout = &caller;
  ReleasedLayoutDeviceRuns runs;
  DispatchHandle handle;
  runs.first =
      dispatch_then_combine(buffer, shape, data, expected, stream, args, with_topk, &handle, release_layout);

  DispatchArgs cached_args;
  cached_args.x = x;
  cached_args.x_scales = scales;
  if (with_topk) {
    cached_args.topk_idx = topk_idx;
    cached_args.topk_weights = topk_weights;
  }
  cached_args.cached_handle = &handle;
  runs.cached =
      dispatch_then_combine(buffer, shape, data, expected, stream, cached_args, with_topk, nullptr, [] {});
  return runs;
}

}  // namespace switchyard::testing
