#include "cuda/expert_major_round_trip.hpp"

#include <chrono>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <thread>

#include "cuda/cuda_round_trip.hpp"
#include "cuda/device_tensors.hpp"
#include "switchyard/errors.hpp"

namespace switchyard::testing {

namespace {

// Rows of local expert `local` in a [L, rows, C] tensor, as a [rows, C] view.
TensorView expert_rows(const TensorView& tensor, int64_t local) {
  TensorView view = tensor;
  view.ndim = 2;
  view.shape = {tensor.shape[1], tensor.shape[2], 0, 0};
  view.data =
      static_cast<uint8_t*>(view.data) + local * tensor.shape[1] * tensor.shape[2] * dtype_size(tensor.dtype);
  return view;
}

// `tensor` [a, b, c] as [a * b, c].
TensorView flat(const TensorView& tensor) {
  TensorView view = tensor;
  view.ndim = 2;
  view.shape = {tensor.shape[0] * tensor.shape[1], tensor.shape[2], 0, 0};
  return view;
}

// With hooks: runs the receive half. The delay differs per rank, so peers' sends land while this
// rank is still busy elsewhere, which is what the split is for.
void run_hook(const std::function<void()>& hook, const char* call, int rank) {
  if (!hook) {
    throw std::runtime_error(std::string(call) + ": expected a hook with return_recv_hook, got none");
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(2 * rank));
  hook();
}

// One call's device tensors: inputs, expert outputs, and poisoned outputs (anything the engine fails
// to write shows up as 0xA5 bytes).
struct CallOnDevice {
  Tensor x, topk_idx, topk_weights, y;
  Tensor recv_x, recv_x_scales, recv_count, layout_range, src_info, combined_x;
  LowLatencyDispatchResult dispatched;
};

CallOnDevice upload_call(const ExpertMajorCall& call, int ranks, const workload::RankData& data,
                         const TensorView& y, cudaStream_t stream) {
  const int64_t local = call.num_experts / ranks, rows = ranks * call.max_tokens_per_rank;
  const int64_t hidden = data.x.size(1);
  CallOnDevice on_device;
  on_device.x = to_device(data.x, kDevice, stream);
  on_device.topk_idx = to_device(data.topk_idx, kDevice, stream);
  on_device.topk_weights = to_device(data.topk_weights, kDevice, stream);
  on_device.y = to_device(y, kDevice, stream);
  const DType recv_dtype = call.fp8.use_fp8 ? DType::fp8_e4m3 : DType::bf16;
  on_device.recv_x = poisoned_device(recv_dtype, {local, rows, hidden}, kDevice, stream);
  if (call.fp8.use_fp8)
    on_device.recv_x_scales = poisoned_device(DType::f32, {local, rows, hidden / 128}, kDevice, stream);
  on_device.recv_count = poisoned_device(DType::i32, {local}, kDevice, stream);
  on_device.layout_range = poisoned_device(DType::i32, {local, ranks, 2}, kDevice, stream);
  on_device.src_info = poisoned_device(DType::i32, {local, rows}, kDevice, stream);
  on_device.combined_x = poisoned_device(DType::bf16, {data.x.size(0), hidden}, kDevice, stream);
  return on_device;
}

void dispatch_call(Buffer& buffer, const ExpertMajorCall& call, CallOnDevice& on_device,
                   cudaStream_t stream) {
  LowLatencyDispatchArgs args;
  args.x = on_device.x;
  args.topk_idx = on_device.topk_idx;
  args.max_tokens_per_rank = call.max_tokens_per_rank;
  args.num_experts = call.num_experts;
  args.use_fp8 = call.fp8.use_fp8;
  args.round_scale = call.fp8.round_scale;
  args.return_recv_hook = call.hooks;
  args.out_recv_x = on_device.recv_x;
  args.out_recv_x_scales = on_device.recv_x_scales;
  args.out_recv_count = on_device.recv_count;
  args.out_layout_range = on_device.layout_range;
  args.out_src_info = on_device.src_info;
  args.stream = stream;
  on_device.dispatched =
      call.engine == Engine::symmetric ? buffer.symmetric_dispatch(args) : buffer.low_latency_dispatch(args);
  if (call.hooks) run_hook(on_device.dispatched.hook, "dispatch", buffer.rank());
}

Tensor combine_call(Buffer& buffer, const ExpertMajorCall& call, const CallOnDevice& on_device,
                    cudaStream_t stream) {
  LowLatencyCombineArgs args;
  args.x = on_device.y;
  args.topk_idx = on_device.topk_idx;
  args.topk_weights = on_device.topk_weights;
  args.handle = &on_device.dispatched.handle;
  args.return_recv_hook = call.hooks;
  args.out_combined_x = on_device.combined_x;
  args.stream = stream;
  LowLatencyCombineResult combined =
      call.engine == Engine::symmetric ? buffer.symmetric_combine(args) : buffer.low_latency_combine(args);
  if (call.hooks) run_hook(combined.hook, "combine", buffer.rank());
  return combined.combined_x;
}

}  // namespace

ExpertMajorExpected expert_major_expected(const ExpertMajorCall& call, const Topology& topology,
                                          const std::vector<workload::RankData>& data) {
  if (call.fp8.use_ue8m0) {
    throw InvalidArgument("fp8.use_ue8m0: expected false (the synthetic expert needs f32 scales), got true");
  }
  std::vector<reference::RankInputs> inputs;
  for (const auto& rank_data : data) inputs.push_back(rank_data.inputs());
  ExpertMajorExpected expected;
  expected.dispatched =
      reference::low_latency_dispatch(inputs, call.num_experts, topology, call.max_tokens_per_rank, call.fp8);
  std::vector<TensorView> views;
  for (int rank = 0; rank < topology.num_ranks; ++rank) {
    const auto& received = expected.dispatched[rank];
    const TensorView scales = received.recv_x_scales.defined() ? flat(received.recv_x_scales) : TensorView();
    Tensor rows = workload::synthetic_expert(flat(received.recv_x), scales, rank);
    Tensor y = Tensor::empty(DType::bf16,
                             {received.recv_x.size(0), received.recv_x.size(1), received.recv_x.size(2)});
    std::memcpy(y.data(), rows.data(), rows.nbytes());
    expected.ys.push_back(std::move(y));
  }
  for (const Tensor& y : expected.ys) views.push_back(y);
  expected.combined =
      reference::low_latency_combine(views, inputs, call.num_experts, topology, call.max_tokens_per_rank);
  return expected;
}

std::vector<ExpertMajorRun> run_expert_major_on_device(Buffer& buffer, const ExpertMajorCall& call,
                                                       const std::vector<const workload::RankData*>& data,
                                                       const std::vector<TensorView>& ys,
                                                       cudaStream_t stream) {
  if (ys.size() != data.size()) {
    throw InvalidArgument("ys: expected one per call (" + std::to_string(data.size()) + "), got " +
                          std::to_string(ys.size()));
  }
  const int ranks = buffer.topology().num_ranks;
  std::vector<CallOnDevice> calls;
  for (size_t i = 0; i < data.size(); ++i) calls.push_back(upload_call(call, ranks, *data[i], ys[i], stream));
  for (CallOnDevice& on_device : calls) dispatch_call(buffer, call, on_device, stream);
  buffer.synchronize(stream);
  std::vector<ExpertMajorRun> runs(calls.size());
  for (size_t i = 0; i < calls.size(); ++i) {
    const LowLatencyDispatchResult& dispatched = calls[i].dispatched;
    runs[i].recv_x = to_host(dispatched.recv_x, stream);
    runs[i].recv_x_scales = to_host(dispatched.recv_x_scales, stream);
    runs[i].recv_count = to_host(dispatched.recv_count, stream);
    runs[i].layout_range = to_host(dispatched.layout_range, stream);
    runs[i].src_info = to_host(dispatched.src_info, stream);
  }
  // NOTES: combines in the reverse order of their dispatches, as the thread suites do: the first
  // dispatch's handle must still hold its routing after the later calls.
  std::vector<Tensor> combined(calls.size());
  for (size_t i = calls.size(); i-- > 0;) combined[i] = combine_call(buffer, call, calls[i], stream);
  buffer.synchronize(stream);
  for (size_t i = 0; i < calls.size(); ++i) runs[i].combined_x = to_host(combined[i], stream);
  return runs;
}

void compare_expert_major(const ExpertMajorRun& run, const ExpertMajorExpected& expected, int rank,
                          const std::string& label, std::vector<std::string>* failures) {
  const std::string prefix = "rank " + std::to_string(rank) + " " + label + " ";
  auto compare = [&](const TensorView& actual, const TensorView& wanted, const std::string& what,
                     int64_t rows = -1) {
    std::string why;
    if (!workload::bitwise_equal(actual, wanted, &why, rows)) failures->push_back(prefix + what + ": " + why);
  };
  const reference::LowLatencyDispatchOutput& want = expected.dispatched[rank];
  compare(run.recv_count, want.recv_count, "recv_count");
  compare(run.layout_range, want.layout_range, "layout_range");
  compare(run.src_info, want.src_info, "src_info");
  compare(run.combined_x, expected.combined[rank], "combined_x");
  // Shapes first: the per-expert row views below assume them.
  auto same_shape = [&](const Tensor& got, const Tensor& wanted, const char* name) {
    if (got.defined() == wanted.defined() &&
        (!wanted.defined() || (got.dtype() == wanted.dtype() && got.view().shape == wanted.view().shape))) {
      return true;
    }
    failures->push_back(prefix + name + ": expected " +
                        (wanted.defined() ? wanted.view().describe() : "none") + ", got " +
                        (got.defined() ? got.view().describe() : "none"));
    return false;
  };
  if (!same_shape(run.recv_x, want.recv_x, "recv_x") ||
      !same_shape(run.recv_x_scales, want.recv_x_scales, "recv_x_scales")) {
    return;
  }
  for (int64_t local = 0; local < want.recv_x.size(0); ++local) {
    const int64_t count = want.recv_count.as<const int32_t>()[local];
    const std::string which = " of local expert " + std::to_string(local);
    compare(expert_rows(run.recv_x, local), expert_rows(want.recv_x, local), "recv_x" + which, count);
    if (want.recv_x_scales.defined()) {
      compare(expert_rows(run.recv_x_scales, local), expert_rows(want.recv_x_scales, local),
              "recv_x_scales" + which, count);
    }
  }
}

}  // namespace switchyard::testing
