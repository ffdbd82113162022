#include "cuda/low_latency_modes.hpp"

#include <string>
#include <vector>

#include "cuda/captured_round_trip.hpp"
#include "cuda/device_tensors.hpp"
#include "cuda/expert_major_round_trip.hpp"
#include "cuda/rank_device.hpp"

namespace switchyard::testing::expert_major {

void check_back_to_back_calls(const Case& c, const Expected& first, const Expected& second, int rounds,
                              int rank, Buffer& buffer, cudaStream_t stream, Failures& failures,
                              const std::function<void()>& after_each_round) {
  const int device = device_of(buffer);
  const DeviceInputs in_a = upload_inputs(first.data[rank], device, stream);
  const DeviceInputs in_b = upload_inputs(second.data[rank], device, stream);
  for (int round = 0; round < rounds; ++round) {
    auto a = buffer.low_latency_dispatch(dispatch_args(c, in_a.x, in_a.topk_idx, stream));
    auto b = buffer.low_latency_dispatch(dispatch_args(c, in_b.x, in_b.topk_idx, stream));
    buffer.synchronize(stream);
    const Outputs out_a = download(a, stream);
    const Outputs out_b = download(b, stream);
    check_dispatch(out_a, first.dispatched[rank], "the reference (first)", rank, failures);
    check_dispatch(out_b, second.dispatched[rank], "the reference (second)", rank, failures);
    const Tensor ya = to_device(expert_outputs(out_a.recv_x, out_a.recv_x_scales, rank), device, stream);
    const Tensor yb = to_device(expert_outputs(out_b.recv_x, out_b.recv_x_scales, rank), device, stream);
    auto combined_b =
        buffer.low_latency_combine(combine_args(in_b.topk_idx, in_b.topk_weights, b.handle, yb, stream));
    auto combined_a =
        buffer.low_latency_combine(combine_args(in_a.topk_idx, in_a.topk_weights, a.handle, ya, stream));
    buffer.synchronize(stream);
    compare(to_host(combined_a.combined_x, stream), first.combined[rank], "combined_x (first)", rank,
            failures);
    compare(to_host(combined_b.combined_x, stream), second.combined[rank], "combined_x (second)", rank,
            failures);
    if (after_each_round) after_each_round();
  }
}

namespace {

// Plain (not stream-ordered) device blocks of every power-of-two size from 256 B to 4 MiB, four of
// each, filled with 0xFF: a freed cudaMalloc block of a similar size is likely handed back to one.
std::vector<Tensor> occupy_freed_memory(int device, cudaStream_t stream) {
  std::vector<Tensor> blocks;
  for (int64_t bytes = 256; bytes <= (int64_t{4} << 20); bytes *= 2) {
    for (int copy = 0; copy < 4; ++copy) {
      blocks.push_back(Tensor::empty(DType::boolean, {bytes}, Device::cuda, device, nullptr));
      check_cuda(cudaMemsetAsync(blocks.back().data(), 0xFF, static_cast<size_t>(bytes), stream),
                 "fill a block that may reuse freed memory");
    }
  }
  check_cuda(cudaStreamSynchronize(stream), "sync after filling blocks");
  return blocks;
}

}  // namespace

void check_graph_replays(const Case& c, const std::vector<Expected>& rounds, Group& group, Buffer& buffer,
                         cudaStream_t stream, Failures& failures, HandleAfterCapture handle_after_capture) {
  const int rank = group.rank();
  const int device = device_of(buffer);
  const DeviceInputs in = upload_inputs(rounds[0].data[rank], device, stream);
  const PoisonedOutputs out = poisoned_device_outputs(c, in.x.size(0), device, stream);
  const int64_t local = c.num_experts / c.ranks;
  const Tensor y = poisoned_device(DType::bf16, {local, c.ranks * c.max_tokens, c.hidden}, device, stream);
  CapturedRoundTrip captured(Engine::low_latency, c, group, buffer, in, y, out, stream);
  std::vector<Tensor> occupied;
  if (handle_after_capture == HandleAfterCapture::dropped) {
    captured.drop_handle();
    occupied = occupy_freed_memory(device, stream);
    group.barrier();
  }
  for (size_t round = 0; round < rounds.size(); ++round) {
    const Expected& expected = rounds[round];
    upload(in.x, expected.data[rank].x, stream);
    upload(in.topk_idx, expected.data[rank].topk_idx, stream);
    upload(in.topk_weights, expected.data[rank].topk_weights, stream);
    for (size_t replay = 0; replay < 1 + round % 2; ++replay) captured.launch_dispatch();
    buffer.synchronize(stream);
    const Outputs host = download(captured.dispatched(), stream);
    const std::string which = "the reference (round " + std::to_string(round) + ")";
    check_dispatch(host, expected.dispatched[rank], which, rank, failures);
    upload(y, expert_outputs(host.recv_x, host.recv_x_scales, rank), stream);
    captured.launch_combine();
    buffer.synchronize(stream);
    compare(to_host(out.combined_x, stream), expected.combined[rank], "combined_x vs " + which, rank,
            failures);
  }
}

}  // namespace switchyard::testing::expert_major
