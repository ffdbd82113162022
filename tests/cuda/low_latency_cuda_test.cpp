// The CUDA `low_latency` engine, bit for bit against the reference and against the CPU engine: R
// ranks as threads of this process, each with its own non-blocking stream, all on GPU 0.
// Expert-major dispatch (bf16, fp8, round_scale, ue8m0), the weighted FMA combine, hooks, the
// double buffer, CUDA graph replay with new routing, zero-copy combine, bad input and timeouts.
// Skipped (reported as skipped) where no GPU is present. The cases named Small_R1 are the ones
// compute-sanitizer runs (one rank: the sanitizer serialises kernels, so ranks could not meet).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <future>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "cuda/device_tensors.hpp"
#include "cuda/low_latency_fp8_cast_check.hpp"
#include "support/test_seed.hpp"
#include "switchyard/buffer.hpp"
#include "switchyard/errors.hpp"
#include "switchyard/group.hpp"
#include "switchyard/reference.hpp"
#include "workload/workload.hpp"

namespace switchyard::testing {
namespace {

constexpr int kGpu = 0;

// A macro, since GTEST_SKIP returns from the function it is written in.
#define SWITCHYARD_REQUIRE_GPU() \
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device: GPU tests are skipped, not passed"

// Inside rank threads: an exception (not an ASSERT, which would only leave this rank's lambda)
// makes run_ranks abort the group, so the other ranks stop instead of waiting at a barrier.
void check_cuda(cudaError_t status, const char* what) {
  if (status != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(status));
}

struct Case {
  std::string name;
  int ranks = 2;
  std::vector<int64_t> tokens;  // per rank
  int64_t max_tokens = 8;
  int hidden = 256;
  int topk = 2;
  int num_experts = 8;
  workload::Routing routing = workload::Routing::random;
  reference::LowLatencyOptions fp8;
};

void PrintTo(const Case& c, std::ostream* out) { *out << c.name; }

Case make(std::string name, int ranks, std::vector<int64_t> tokens, int64_t max_tokens, int topk, int num_experts,
          int hidden = 256) {
  Case c;
  c.name = std::move(name);
  c.ranks = ranks;
  c.tokens = std::move(tokens);
  c.max_tokens = max_tokens;
  c.topk = topk;
  c.num_experts = num_experts;
  c.hidden = hidden;
  return c;
}

Case with_fp8(Case c, bool round_scale, bool ue8m0) {
  c.fp8 = {true, round_scale || ue8m0, ue8m0};
  return c;
}

Case with_routing(Case c, workload::Routing routing) {
  c.routing = routing;
  return c;
}

workload::Shape shape_of(const Case& c) {
  workload::Shape shape;
  shape.topology = Topology::single_node(c.ranks);
  shape.tokens_per_rank_list = c.tokens;
  shape.hidden = c.hidden;
  shape.topk = c.topk;
  shape.num_experts = c.num_experts;
  shape.routing = c.routing;
  return shape;
}

BufferOptions options_of(const Case& c, int rank, Backend backend, double timeout_seconds = 10.0) {
  BufferOptions options;
  options.topology = Topology::single_node(c.ranks);
  options.rank = rank;
  options.backend = backend;
  options.device = kGpu;
  options.config.timeout_seconds = timeout_seconds;
  options.sizing.max_tokens_per_rank = 1;  // the normal engine is not used here
  options.sizing.hidden = c.hidden;
  options.sizing.topk = c.topk;
  options.sizing.num_experts = c.num_experts;
  options.sizing.low_latency_max_tokens_per_rank = c.max_tokens;
  return options;
}

// A view of `tensor` [a, b, c] as [a * b, c].
TensorView flat(const TensorView& tensor) {
  TensorView view = tensor;
  view.ndim = 2;
  view.shape = {tensor.shape[0] * tensor.shape[1], tensor.shape[2], 0, 0};
  return view;
}

// The experts (host): the workload's synthetic expert on every row (rows past recv_count too; combine
// never reads them). Needs bf16, or fp8 with f32 scales.
Tensor expert_outputs(const TensorView& recv_x, const TensorView& recv_x_scales, int rank) {
  Tensor y = workload::synthetic_expert(flat(recv_x), recv_x_scales.defined() ? flat(recv_x_scales) : TensorView(), rank);
  Tensor shaped = Tensor::empty(DType::bf16, {recv_x.shape[0], recv_x.shape[1], recv_x.shape[2]});
  std::memcpy(shaped.data(), y.data(), y.nbytes());
  return shaped;
}

struct Expected {
  std::vector<workload::RankData> data;
  std::vector<reference::LowLatencyDispatchOutput> dispatched;
  std::vector<Tensor> combined;  // empty with ue8m0 (the synthetic expert needs f32 scales)
};

Expected expected_for(const Case& c, uint64_t seed) {
  Expected expected;
  expected.data = workload::generate(shape_of(c), seed);
  std::vector<reference::RankInputs> inputs;
  for (const auto& data : expected.data) inputs.push_back(data.inputs());
  const Topology topology = Topology::single_node(c.ranks);
  expected.dispatched = reference::low_latency_dispatch(inputs, c.num_experts, topology, c.max_tokens, c.fp8);
  if (!c.fp8.use_ue8m0) {
    std::vector<Tensor> ys;
    std::vector<TensorView> views;
    for (int rank = 0; rank < c.ranks; ++rank) {
      ys.push_back(expert_outputs(expected.dispatched[rank].recv_x, expected.dispatched[rank].recv_x_scales, rank));
      views.push_back(ys.back());
    }
    expected.combined = reference::low_latency_combine(views, inputs, c.num_experts, topology, c.max_tokens);
  }
  return expected;
}

// Collects failures from rank threads.
struct Failures {
  std::mutex mutex;
  std::vector<std::string> lines;
  void add(int rank, const std::string& what) {
    std::lock_guard<std::mutex> lock(mutex);
    lines.push_back("rank " + std::to_string(rank) + ": " + what);
  }
  void expect_none(uint64_t seed) {
    for (const auto& line : lines) ADD_FAILURE() << line;
    if (!lines.empty()) ADD_FAILURE() << "seed " << seed << " (set SWITCHYARD_TEST_SEED to reproduce)";
  }
};

// One rank's outputs, on the host.
struct Outputs {
  Tensor recv_x, recv_x_scales, recv_count, layout_range, src_info, combined_x;
};

Outputs download(const LowLatencyDispatchResult& result, cudaStream_t stream) {
  Outputs out;
  out.recv_x = to_host(result.recv_x, stream);
  out.recv_x_scales = to_host(result.recv_x_scales, stream);
  out.recv_count = to_host(result.recv_count, stream);
  out.layout_range = to_host(result.layout_range, stream);
  out.src_info = to_host(result.src_info, stream);
  return out;
}

// A copy of host outputs (the CPU engine's tensors may alias the caller's).
Tensor host_copy(const TensorView& tensor) {
  if (!tensor.defined()) return Tensor();
  Tensor copy = Tensor::empty_like_shape(tensor.dtype, tensor.shape, tensor.ndim, Device::cpu, 0);
  std::memcpy(copy.data(), tensor.data, tensor.nbytes());
  return copy;
}

// What a dispatch is compared with: the reference's outputs or another engine's.
struct DispatchView {
  TensorView recv_x, recv_x_scales, recv_count, layout_range, src_info;
};
DispatchView view_of(const reference::LowLatencyDispatchOutput& out) {
  return {out.recv_x, out.recv_x_scales, out.recv_count, out.layout_range, out.src_info};
}
DispatchView view_of(const Outputs& out) {
  return {out.recv_x, out.recv_x_scales, out.recv_count, out.layout_range, out.src_info};
}

void compare(const TensorView& actual, const TensorView& expected, const std::string& name, int rank,
             Failures& failures, int64_t rows = -1) {
  std::string why;
  if (!workload::bitwise_equal(actual, expected, &why, rows)) failures.add(rank, name + ": " + why);
}

// recv_x and its scales are compared on received rows only; the rest is unspecified.
void check_dispatch(const Outputs& got, const DispatchView& want, const std::string& against, int rank,
                    Failures& failures) {
  compare(got.recv_count, want.recv_count, "recv_count vs " + against, rank, failures);
  compare(got.layout_range, want.layout_range, "layout_range vs " + against, rank, failures);
  compare(got.src_info, want.src_info, "src_info vs " + against, rank, failures);
  if (got.recv_x.dtype() != want.recv_x.dtype || got.recv_x.view().shape != want.recv_x.shape) {
    failures.add(rank, "recv_x: expected " + want.recv_x.describe() + ", got " + got.recv_x.view().describe());
    return;
  }
  if (want.recv_x_scales.defined() != got.recv_x_scales.defined()) {
    failures.add(rank, "recv_x_scales: expected " + want.recv_x_scales.describe() + ", got " +
                           got.recv_x_scales.view().describe());
    return;
  }
  const int64_t rows_per_expert = want.recv_x.shape[1];
  for (int64_t local = 0; local < want.recv_x.shape[0]; ++local) {
    const int64_t count = want.recv_count.as<const int32_t>()[local];
    auto expert_rows = [&](const TensorView& tensor) {
      TensorView view = flat(tensor);
      view.data = static_cast<uint8_t*>(view.data) + local * rows_per_expert * view.shape[1] * dtype_size(view.dtype);
      view.shape[0] = rows_per_expert;
      return view;
    };
    const std::string which = " of local expert " + std::to_string(local) + " vs " + against;
    compare(expert_rows(got.recv_x), expert_rows(want.recv_x), "recv_x" + which, rank, failures, count);
    if (want.recv_x_scales.defined()) {
      compare(expert_rows(got.recv_x_scales), expert_rows(want.recv_x_scales), "recv_x_scales" + which, rank,
              failures, count);
    }
  }
}

// One rank's inputs on the device.
struct DeviceInputs {
  Tensor x, topk_idx, topk_weights;
};

DeviceInputs upload_inputs(const workload::RankData& data, cudaStream_t stream) {
  return {to_device(data.x, kGpu, stream), to_device(data.topk_idx, kGpu, stream),
          to_device(data.topk_weights, kGpu, stream)};
}

LowLatencyDispatchArgs dispatch_args(const Case& c, const TensorView& x, const TensorView& topk_idx, Stream stream) {
  LowLatencyDispatchArgs args;
  args.x = x;
  args.topk_idx = topk_idx;
  args.max_tokens_per_rank = c.max_tokens;
  args.num_experts = c.num_experts;
  args.use_fp8 = c.fp8.use_fp8;
  args.round_scale = c.fp8.round_scale;
  args.use_ue8m0 = c.fp8.use_ue8m0;
  args.stream = stream;
  return args;
}

LowLatencyCombineArgs combine_args(const TensorView& topk_idx, const TensorView& topk_weights,
                                   const LowLatencyHandle& handle, const TensorView& y, Stream stream) {
  LowLatencyCombineArgs args;
  args.x = y;
  args.topk_idx = topk_idx;
  args.topk_weights = topk_weights;
  args.handle = &handle;
  args.stream = stream;
  return args;
}

// Poisoned device outputs of a dispatch of `c` (0xA5 bytes show anything left unwritten).
struct DeviceOutputs {
  Tensor recv_x, recv_x_scales, recv_count, layout_range, src_info;
  void attach(LowLatencyDispatchArgs& args) const {
    args.out_recv_x = recv_x;
    args.out_recv_x_scales = recv_x_scales;
    args.out_recv_count = recv_count;
    args.out_layout_range = layout_range;
    args.out_src_info = src_info;
  }
};

DeviceOutputs poisoned_outputs(const Case& c, cudaStream_t stream) {
  const int64_t local = c.num_experts / c.ranks;
  const int64_t rows = c.ranks * c.max_tokens;
  DeviceOutputs out;
  out.recv_x = poisoned_device(c.fp8.use_fp8 ? DType::fp8_e4m3 : DType::bf16, {local, rows, c.hidden}, kGpu, stream);
  if (c.fp8.use_ue8m0) {
    out.recv_x_scales = poisoned_device(DType::i32, {local, rows, (c.hidden / 128 + 3) / 4}, kGpu, stream);
  } else if (c.fp8.use_fp8) {
    out.recv_x_scales = poisoned_device(DType::f32, {local, rows, c.hidden / 128}, kGpu, stream);
  }
  out.recv_count = poisoned_device(DType::i32, {local}, kGpu, stream);
  out.layout_range = poisoned_device(DType::i32, {local, c.ranks, 2}, kGpu, stream);
  out.src_info = poisoned_device(DType::i32, {local, rows}, kGpu, stream);
  return out;
}

bool all_poison(const TensorView& device_tensor, cudaStream_t stream) {
  Tensor host = to_host(device_tensor, stream);
  const uint8_t* bytes = host.as<const uint8_t>();
  for (size_t i = 0; i < host.nbytes(); ++i) {
    if (bytes[i] != 0xA5) return false;
  }
  return true;
}

// Runs `body(group, buffer, stream)` on every rank with a connected CUDA buffer and its own
// non-blocking stream; the body synchronises its stream before returning, and buffers stay alive
// until every rank is done.
void with_cuda_buffers(const Case& c, const std::function<void(Group&, Buffer&, cudaStream_t)>& body,
                       double timeout_seconds = 10.0) {
  run_ranks(c.ranks, [&](Group& group) {
    check_cuda(cudaSetDevice(kGpu), "cudaSetDevice");
    cudaStream_t stream = nullptr;
    check_cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
    {
      Buffer buffer(options_of(c, group.rank(), Backend::cuda, timeout_seconds));
      buffer.connect(group.allgather(buffer.local_handle()));
      body(group, buffer, stream);
      group.barrier();
    }
    cudaStreamDestroy(stream);
  });
}

// ---- bitwise round trips ------------------------------------------------------------------------

// The CPU engine on the same inputs: its outputs (host copies) per rank.
std::vector<Outputs> run_on_cpu(const Case& c, const Expected& expected) {
  std::vector<Outputs> outputs(c.ranks);
  run_ranks(c.ranks, [&](Group& group) {
    const int rank = group.rank();
    Buffer buffer(options_of(c, rank, Backend::cpu));
    buffer.connect(group.allgather(buffer.local_handle()));
    const workload::RankData& data = expected.data[rank];
    LowLatencyDispatchResult dispatched = buffer.low_latency_dispatch(dispatch_args(c, data.x, data.topk_idx, nullptr));
    Outputs& out = outputs[rank];
    out.recv_x = host_copy(dispatched.recv_x);
    out.recv_x_scales = host_copy(dispatched.recv_x_scales);
    out.recv_count = host_copy(dispatched.recv_count);
    out.layout_range = host_copy(dispatched.layout_range);
    out.src_info = host_copy(dispatched.src_info);
    if (!c.fp8.use_ue8m0) {
      Tensor y = expert_outputs(dispatched.recv_x, dispatched.recv_x_scales, rank);
      auto combined = buffer.low_latency_combine(combine_args(data.topk_idx, data.topk_weights, dispatched.handle, y, nullptr));
      out.combined_x = host_copy(combined.combined_x);
    }
    group.barrier();
  });
  return outputs;
}

class CudaLowLatencyRoundTrip : public ::testing::TestWithParam<Case> {};

TEST_P(CudaLowLatencyRoundTrip, MatchesTheReferenceAndTheCpuEngineBitwise) {
  SWITCHYARD_REQUIRE_GPU();
  const Case& c = GetParam();
  const uint64_t seed = seed_for("cuda_low_latency/" + c.name);
  SCOPED_TRACE("case " + c.name + " seed=" + std::to_string(seed));
  const Expected expected = expected_for(c, seed);
  const std::vector<Outputs> cpu = run_on_cpu(c, expected);
  Failures failures;
  with_cuda_buffers(c, [&](Group& group, Buffer& buffer, cudaStream_t stream) {
    const int rank = group.rank();
    const DeviceInputs in = upload_inputs(expected.data[rank], stream);
    LowLatencyDispatchArgs args = dispatch_args(c, in.x, in.topk_idx, stream);
    // Preallocated, poisoned outputs on even ranks; the library allocates on odd ones.
    DeviceOutputs preallocated;
    if (rank % 2 == 0) {
      preallocated = poisoned_outputs(c, stream);
      preallocated.attach(args);
    }
    LowLatencyDispatchResult dispatched = buffer.low_latency_dispatch(args);
    buffer.synchronize(stream);
    Outputs out = download(dispatched, stream);
    check_dispatch(out, view_of(expected.dispatched[rank]), "the reference", rank, failures);
    check_dispatch(out, view_of(cpu[rank]), "the cpu engine", rank, failures);
    if (rank % 2 == 0 && dispatched.recv_x.data() != preallocated.recv_x.data()) {
      failures.add(rank, "out_recv_x was not used");
    }
    if (c.fp8.use_ue8m0) return;

    const Tensor y = to_device(expert_outputs(out.recv_x, out.recv_x_scales, rank), kGpu, stream);
    LowLatencyCombineArgs cargs = combine_args(in.topk_idx, in.topk_weights, dispatched.handle, y, stream);
    Tensor out_combined;
    if (rank % 2 == 0) {
      out_combined = poisoned_device(DType::bf16, {in.x.size(0), c.hidden}, kGpu, stream);
      cargs.out_combined_x = out_combined;
    }
    LowLatencyCombineResult combined = buffer.low_latency_combine(cargs);
    buffer.synchronize(stream);
    const Tensor combined_x = to_host(combined.combined_x, stream);
    compare(combined_x, expected.combined[rank], "combined_x vs the reference", rank, failures);
    compare(combined_x, cpu[rank].combined_x, "combined_x vs the cpu engine", rank, failures);
  });
  failures.expect_none(seed);
}

std::vector<Case> round_trip_cases() {
  using workload::Routing;
  std::vector<Case> all = {
      // Small enough for compute-sanitizer.
      make("Small_R1_k1", 1, {5}, 8, 1, 4),
      make("Small_R1_k9", 1, {6}, 6, 9, 12, 128),
      with_fp8(make("Small_R1_fp8", 1, {7}, 8, 3, 4, 384), false, false),
      with_fp8(make("Small_R1_fp8_ue8m0", 1, {6}, 6, 2, 4, 640), false, true),  // 5 scales: 2 words
      with_routing(make("Small_R1_one_expert_full", 1, {6}, 6, 2, 4), Routing::one_expert),
      make("Small_R1_zero_tokens", 1, {0}, 4, 2, 4),
      // Every rank count, k from 1 to 9.
      make("R2_k2", 2, {7, 3}, 8, 2, 8),
      make("R2_k1_hidden_not_a_multiple_of_128", 2, {5, 4}, 5, 1, 4, 72),
      make("R3_k9", 3, {6, 0, 4}, 6, 9, 18, 128),
      make("R4_k4", 4, {8, 5, 8, 1}, 8, 4, 16),
      make("R4_k5_h2048", 4, {16, 9, 12, 16}, 16, 5, 32, 2048),
      make("R8_k8", 8, {4, 3, 0, 4, 2, 4, 1, 4}, 4, 8, 16, 128),
      make("R8_k6_h7168", 8, {24, 17, 24, 3, 24, 20, 11, 24}, 24, 6, 64, 7168),
      make("R8_k7", 8, {9, 9, 9, 9, 9, 9, 9, 9}, 9, 7, 32, 256),
      make("R4_k3_zero_tokens", 4, {0, 0, 0, 0}, 4, 3, 8),
      make("R2_tokens_on_rank0_only", 2, {6, 0}, 6, 2, 8),
      // More tokens than send blocks: each block sends a chunk of consecutive tokens.
      make("R2_chunked_send_blocks", 2, {1100, 700}, 1100, 2, 8, 128),
      with_routing(make("R2_all_invalid", 2, {4, 4}, 4, 3, 4), Routing::all_invalid),
      // Every token of every rank on one expert: its rows fill R * max exactly.
      with_routing(make("R4_one_expert_full", 4, {6, 6, 6, 6}, 6, 2, 8), Routing::one_expert),
      with_routing(make("R4_skewed", 4, {12, 12, 12, 12}, 12, 4, 16, 512), Routing::skewed),
      with_fp8(make("R2_fp8", 2, {6, 5}, 6, 4, 8, 384), false, false),
      with_fp8(make("R3_fp8_round_scale", 3, {5, 6, 2}, 6, 3, 6, 256), true, false),
      with_fp8(make("R2_fp8_ue8m0_padded", 2, {6, 4}, 6, 2, 4, 640), false, true),
      with_fp8(make("R8_fp8_h7168", 8, {16, 16, 16, 16, 16, 16, 16, 16}, 16, 8, 64, 7168), false, false),
      with_fp8(make("R4_fp8_ue8m0_h7168", 4, {8, 8, 8, 8}, 8, 8, 32, 7168), false, true),
  };
  return all;
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaLowLatencyRoundTrip, ::testing::ValuesIn(round_trip_cases()),
                         [](const auto& info) { return info.param.name; });

// ---- hooks, double buffer, graphs, zero copy ------------------------------------------------------

class CudaLowLatencyModes : public ::testing::TestWithParam<Case> {};

std::vector<Case> mode_cases() {
  return {make("Small_R1", 1, {6}, 8, 3, 4), make("R4", 4, {8, 5, 8, 1}, 8, 4, 16, 512),
          with_fp8(make("R8_fp8", 8, {12, 7, 12, 12, 0, 12, 3, 12}, 12, 8, 64, 1024), false, false)};
}

// The send half returns; the hook runs the receive half later, and gives the same bits. The combine
// hook reduces with the routing of the call, even if the caller's tensors change meanwhile.
TEST_P(CudaLowLatencyModes, HookSplitGivesTheSameBits) {
  SWITCHYARD_REQUIRE_GPU();
  const Case& c = GetParam();
  const uint64_t seed = seed_for("cuda_low_latency/hooks/" + c.name);
  const Expected expected = expected_for(c, seed);
  Failures failures;
  with_cuda_buffers(c, [&](Group& group, Buffer& buffer, cudaStream_t stream) {
    const int rank = group.rank();
    const DeviceInputs in = upload_inputs(expected.data[rank], stream);
    LowLatencyDispatchArgs args = dispatch_args(c, in.x, in.topk_idx, stream);
    args.return_recv_hook = true;
    LowLatencyDispatchResult dispatched = buffer.low_latency_dispatch(args);
    if (!dispatched.hook) {
      failures.add(rank, "no dispatch hook");
      return;
    }
    // Something else meanwhile: the peers' sends land while this rank is busy.
    std::this_thread::sleep_for(std::chrono::milliseconds(5 * rank));
    dispatched.hook();
    EXPECT_THROW(dispatched.hook(), InvalidArgument) << "a hook runs once";
    buffer.synchronize(stream);
    Outputs out = download(dispatched, stream);
    check_dispatch(out, view_of(expected.dispatched[rank]), "the reference", rank, failures);

    const Tensor y = to_device(expert_outputs(out.recv_x, out.recv_x_scales, rank), kGpu, stream);
    Tensor weights = to_device(expected.data[rank].topk_weights, kGpu, stream);
    LowLatencyCombineArgs cargs = combine_args(in.topk_idx, weights, dispatched.handle, y, stream);
    cargs.return_recv_hook = true;
    LowLatencyCombineResult combined = buffer.low_latency_combine(cargs);
    if (!combined.hook) {
      failures.add(rank, "no combine hook");
      return;
    }
    // Until the hook runs, no further low-latency call may start.
    EXPECT_THROW(buffer.low_latency_dispatch(dispatch_args(c, in.x, in.topk_idx, stream)), InvalidArgument);
    // The caller reuses its weights tensor before the hook: the hook must not see it.
    if (weights.nbytes() > 0) check_cuda(cudaMemsetAsync(weights.data(), 0x7f, weights.nbytes(), stream), "memset");
    std::this_thread::sleep_for(std::chrono::milliseconds(5 * (c.ranks - 1 - rank)));
    combined.hook();
    buffer.synchronize(stream);
    compare(to_host(combined.combined_x, stream), expected.combined[rank], "combined_x", rank, failures);
  });
  failures.expect_none(seed);
}

// Two dispatches, then their combines in the other order, with no synchronisation between ranks:
// consecutive calls alternate the buffer's halves and must not race.
TEST_P(CudaLowLatencyModes, BackToBackCallsUseAlternateHalvesWithoutRacing) {
  SWITCHYARD_REQUIRE_GPU();
  const Case& c = GetParam();
  const uint64_t seed = seed_for("cuda_low_latency/back_to_back/" + c.name);
  const Expected first = expected_for(c, seed);
  const Expected second = expected_for(c, seed + 1);
  Failures failures;
  with_cuda_buffers(c, [&](Group& group, Buffer& buffer, cudaStream_t stream) {
    const int rank = group.rank();
    const DeviceInputs in_a = upload_inputs(first.data[rank], stream);
    const DeviceInputs in_b = upload_inputs(second.data[rank], stream);
    for (int round = 0; round < 3; ++round) {
      auto a = buffer.low_latency_dispatch(dispatch_args(c, in_a.x, in_a.topk_idx, stream));
      auto b = buffer.low_latency_dispatch(dispatch_args(c, in_b.x, in_b.topk_idx, stream));
      buffer.synchronize(stream);
      const Outputs out_a = download(a, stream);
      const Outputs out_b = download(b, stream);
      check_dispatch(out_a, view_of(first.dispatched[rank]), "the reference (first)", rank, failures);
      check_dispatch(out_b, view_of(second.dispatched[rank]), "the reference (second)", rank, failures);
      const Tensor ya = to_device(expert_outputs(out_a.recv_x, out_a.recv_x_scales, rank), kGpu, stream);
      const Tensor yb = to_device(expert_outputs(out_b.recv_x, out_b.recv_x_scales, rank), kGpu, stream);
      auto combined_b = buffer.low_latency_combine(combine_args(in_b.topk_idx, in_b.topk_weights, b.handle, yb, stream));
      auto combined_a = buffer.low_latency_combine(combine_args(in_a.topk_idx, in_a.topk_weights, a.handle, ya, stream));
      buffer.synchronize(stream);
      compare(to_host(combined_a.combined_x, stream), first.combined[rank], "combined_x (first)", rank, failures);
      compare(to_host(combined_b.combined_x, stream), second.combined[rank], "combined_x (second)", rank, failures);
    }
  });
  failures.expect_none(seed);
}

// Dispatch and combine captured once in CUDA graphs; replays with new inputs (new routing too) must
// match the reference. The dispatch graph is replayed once or twice per round, so the halves each
// graph uses change between replays: the call sequence must advance on the device.
TEST_P(CudaLowLatencyModes, GraphReplaysWithNewRoutingMatchTheReference) {
  SWITCHYARD_REQUIRE_GPU();
  const Case& c = GetParam();
  constexpr int kRounds = 4;
  std::vector<Expected> rounds;
  for (int round = 0; round < kRounds; ++round) {
    rounds.push_back(expected_for(c, seed_for("cuda_low_latency/graph/" + c.name) + round));
  }
  Failures failures;
  with_cuda_buffers(c, [&](Group& group, Buffer& buffer, cudaStream_t stream) {
    const int rank = group.rank();
    const DeviceInputs in = upload_inputs(rounds[0].data[rank], stream);
    const DeviceOutputs out = poisoned_outputs(c, stream);
    const int64_t local = c.num_experts / c.ranks;
    const Tensor y = poisoned_device(DType::bf16, {local, c.ranks * c.max_tokens, c.hidden}, kGpu, stream);
    const Tensor combined = poisoned_device(DType::bf16, {in.x.size(0), c.hidden}, kGpu, stream);
    LowLatencyDispatchArgs args = dispatch_args(c, in.x, in.topk_idx, stream);
    out.attach(args);

    cudaGraph_t dispatch_graph = nullptr, combine_graph = nullptr;
    cudaGraphExec_t dispatch_exec = nullptr, combine_exec = nullptr;
    // No rank does other CUDA work while any rank captures (a device-wide sync elsewhere would
    // invalidate a capture).
    group.barrier();
    check_cuda(cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed), "begin dispatch capture");
    LowLatencyDispatchResult dispatched = buffer.low_latency_dispatch(args);
    check_cuda(cudaStreamEndCapture(stream, &dispatch_graph), "end dispatch capture");
    check_cuda(cudaGraphInstantiate(&dispatch_exec, dispatch_graph, 0), "instantiate dispatch graph");
    LowLatencyCombineArgs cargs = combine_args(in.topk_idx, in.topk_weights, dispatched.handle, y, stream);
    cargs.out_combined_x = combined;
    check_cuda(cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed), "begin combine capture");
    buffer.low_latency_combine(cargs);
    check_cuda(cudaStreamEndCapture(stream, &combine_graph), "end combine capture");
    check_cuda(cudaGraphInstantiate(&combine_exec, combine_graph, 0), "instantiate combine graph");
    group.barrier();

    for (int round = 0; round < kRounds; ++round) {
      const Expected& expected = rounds[round];
      upload(in.x, expected.data[rank].x, stream);
      upload(in.topk_idx, expected.data[rank].topk_idx, stream);
      upload(in.topk_weights, expected.data[rank].topk_weights, stream);
      for (int replay = 0; replay < 1 + round % 2; ++replay) {
        check_cuda(cudaGraphLaunch(dispatch_exec, stream), "launch dispatch graph");
      }
      buffer.synchronize(stream);
      Outputs host = download(dispatched, stream);
      const std::string which = "the reference (round " + std::to_string(round) + ")";
      check_dispatch(host, view_of(expected.dispatched[rank]), which, rank, failures);
      upload(y, expert_outputs(host.recv_x, host.recv_x_scales, rank), stream);
      check_cuda(cudaGraphLaunch(combine_exec, stream), "launch combine graph");
      buffer.synchronize(stream);
      compare(to_host(combined, stream), expected.combined[rank], "combined_x vs " + which, rank, failures);
    }
    cudaGraphExecDestroy(dispatch_exec);
    cudaGraphExecDestroy(combine_exec);
    cudaGraphDestroy(dispatch_graph);
    cudaGraphDestroy(combine_graph);
  });
  failures.expect_none(seed_for("cuda_low_latency/graph/" + c.name));
}

// Expert outputs written straight into the buffer (low_latency_combine_buffer): combine with
// zero_copy reads them there.
TEST_P(CudaLowLatencyModes, ZeroCopyCombineReadsTheOutputsWrittenIntoTheBuffer) {
  SWITCHYARD_REQUIRE_GPU();
  const Case& c = GetParam();
  const uint64_t seed = seed_for("cuda_low_latency/zero_copy/" + c.name);
  const Expected expected = expected_for(c, seed);
  Failures failures;
  with_cuda_buffers(c, [&](Group& group, Buffer& buffer, cudaStream_t stream) {
    const int rank = group.rank();
    const DeviceInputs in = upload_inputs(expected.data[rank], stream);
    LowLatencyDispatchResult dispatched = buffer.low_latency_dispatch(dispatch_args(c, in.x, in.topk_idx, stream));
    buffer.synchronize(stream);
    const Outputs out = download(dispatched, stream);
    const TensorView in_buffer = buffer.low_latency_combine_buffer(dispatched.handle);
    const int64_t local = c.num_experts / c.ranks;
    if (in_buffer.dtype != DType::bf16 || in_buffer.ndim != 3 || in_buffer.shape[0] != local ||
        in_buffer.shape[1] != c.ranks * c.max_tokens || in_buffer.shape[2] != c.hidden ||
        in_buffer.device != Device::cuda) {
      failures.add(rank, "combine buffer: unexpected " + in_buffer.describe());
      return;
    }
    upload(in_buffer, expert_outputs(out.recv_x, out.recv_x_scales, rank), stream);
    LowLatencyCombineArgs args = combine_args(in.topk_idx, in.topk_weights, dispatched.handle, TensorView(), stream);
    args.zero_copy = true;
    LowLatencyCombineResult combined = buffer.low_latency_combine(args);
    buffer.synchronize(stream);
    compare(to_host(combined.combined_x, stream), expected.combined[rank], "combined_x", rank, failures);
  });
  failures.expect_none(seed);
}

INSTANTIATE_TEST_SUITE_P(Modes, CudaLowLatencyModes, ::testing::ValuesIn(mode_cases()),
                         [](const auto& info) { return info.param.name; });

// ---- bad input and timeouts ---------------------------------------------------------------------

// One rank with poisoned, preallocated outputs on its stream.
struct SingleRank {
  Case c = make("single", 1, {4}, 4, 2, 4);
  cudaStream_t stream = nullptr;
  std::unique_ptr<Buffer> buffer;
  workload::RankData data;
  DeviceInputs in;
  DeviceOutputs out;

  SingleRank() {
    check_cuda(cudaSetDevice(kGpu), "cudaSetDevice");
    check_cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
    buffer = std::make_unique<Buffer>(options_of(c, 0, Backend::cuda));
    buffer->connect({buffer->local_handle()});
    data = workload::generate(shape_of(c), seed_for("cuda_low_latency/single"))[0];
    in = upload_inputs(data, stream);
    out = poisoned_outputs(c, stream);
  }
  ~SingleRank() {
    in = DeviceInputs();
    out = DeviceOutputs();
    buffer.reset();
    cudaStreamDestroy(stream);
  }
  LowLatencyDispatchArgs args() const {
    LowLatencyDispatchArgs args = dispatch_args(c, in.x, in.topk_idx, stream);
    out.attach(args);
    return args;
  }
  bool untouched() const {
    for (const Tensor* tensor : {&out.recv_x, &out.recv_count, &out.layout_range, &out.src_info}) {
      if (!all_poison(*tensor, stream)) return false;
    }
    return true;
  }
  // A valid dispatch still matches the reference.
  void expect_usable() {
    Expected expected;
    expected.data = {data};
    expected.dispatched = reference::low_latency_dispatch({data.inputs()}, c.num_experts, Topology::single_node(1),
                                                          c.max_tokens);
    upload(in.topk_idx, data.topk_idx, stream);
    LowLatencyDispatchResult dispatched = buffer->low_latency_dispatch(args());
    buffer->synchronize(stream);
    Failures failures;
    check_dispatch(download(dispatched, stream), view_of(expected.dispatched[0]), "the reference", 0, failures);
    failures.expect_none(0);
  }
};

TEST(CudaLowLatencyErrors, Small_R1_MoreTokensThanMaxTokensPerRankIsInvalidArgumentAndWritesNothing) {
  SWITCHYARD_REQUIRE_GPU();
  SingleRank single;
  Tensor x5 = to_device(Tensor::empty(DType::bf16, {5, single.c.hidden}), kGpu, single.stream);
  Tensor idx5 = Tensor::empty(DType::i64, {5, 2});
  std::fill(idx5.as<int64_t>(), idx5.as<int64_t>() + 10, 0);
  Tensor idx5_device = to_device(idx5, kGpu, single.stream);
  LowLatencyDispatchArgs args = single.args();
  args.x = x5;
  args.topk_idx = idx5_device;
  try {
    single.buffer->low_latency_dispatch(args);
    ADD_FAILURE() << "expected InvalidArgument";
  } catch (const InvalidArgument& error) {
    EXPECT_EQ(std::string(error.what()).rfind("x:", 0), 0u) << error.what();
    EXPECT_NE(std::string(error.what()).find("max_tokens_per_rank"), std::string::npos) << error.what();
  }
  single.buffer->synchronize(single.stream);
  EXPECT_TRUE(single.untouched()) << "outputs were written";
  single.expect_usable();
}

// topk_idx on the device is checked by the send kernel before anything is written: the call writes
// nothing, and the next call on the buffer (or synchronize) raises InvalidArgument.
TEST(CudaLowLatencyErrors, Small_R1_ExpertIdOutOfRangeOnTheDeviceIsInvalidArgumentAndWritesNothing) {
  SWITCHYARD_REQUIRE_GPU();
  SingleRank single;
  Tensor bad = Tensor::empty(DType::i64, {4, 2});
  std::memcpy(bad.data(), single.data.topk_idx.data(), bad.nbytes());
  bad.as<int64_t>()[5] = single.c.num_experts;
  upload(single.in.topk_idx, bad, single.stream);
  single.buffer->low_latency_dispatch(single.args());
  try {
    single.buffer->synchronize(single.stream);
    ADD_FAILURE() << "expected InvalidArgument";
  } catch (const InvalidArgument& error) {
    EXPECT_NE(std::string(error.what()).find("topk_idx"), std::string::npos) << error.what();
    EXPECT_NE(std::string(error.what()).find("low_latency"), std::string::npos) << error.what();
  }
  EXPECT_TRUE(single.untouched()) << "outputs were written";
  single.expect_usable();
}

// A token that names one expert in several slots sends one row per slot; more than max_tokens_per_rank
// rows for one expert would overflow its receive area, so the call is refused on the device.
TEST(CudaLowLatencyErrors, Small_R1_TooManyRowsForOneExpertOnTheDeviceIsRefusedAndWritesNothing) {
  SWITCHYARD_REQUIRE_GPU();
  SingleRank single;
  Tensor duplicates = Tensor::empty(DType::i64, {4, 2});
  std::fill(duplicates.as<int64_t>(), duplicates.as<int64_t>() + 8, 1);  // 8 rows for expert 1, room for 4
  upload(single.in.topk_idx, duplicates, single.stream);
  single.buffer->low_latency_dispatch(single.args());
  EXPECT_THROW(single.buffer->synchronize(single.stream), InvalidArgument);
  EXPECT_TRUE(single.untouched()) << "outputs were written";
  single.expect_usable();
}

// One rank never calls dispatch: the other gets a TimeoutError naming itself, its role and the
// missing rank, within about the configured timeout, and nothing hangs.
TEST(CudaLowLatencyErrors, MissingRankTimesOutNamingRankRoleAndPeer) {
  SWITCHYARD_REQUIRE_GPU();
  constexpr double kTimeout = 1.0;
  const Case c = make("timeout", 2, {4, 4}, 4, 2, 4);
  const Expected expected = expected_for(c, seed_for("cuda_low_latency/timeout"));
  std::promise<void> rank0_done;
  std::shared_future<void> released = rank0_done.get_future().share();
  std::string message;
  bool timed_out = false;
  double seconds = 0;
  with_cuda_buffers(
      c,
      [&](Group& group, Buffer& buffer, cudaStream_t stream) {
        if (group.rank() == 1) {
          released.wait_for(std::chrono::seconds(60));  // never calls
          return;
        }
        struct Release {
          std::promise<void>& promise;
          ~Release() { promise.set_value(); }
        } release_rank1{rank0_done};
        const DeviceInputs in = upload_inputs(expected.data[0], stream);
        const auto start = std::chrono::steady_clock::now();
        try {
          buffer.low_latency_dispatch(dispatch_args(c, in.x, in.topk_idx, stream));
          buffer.synchronize(stream);
        } catch (const TimeoutError& error) {
          timed_out = true;
          message = error.what();
        } catch (const std::exception& error) {
          message = std::string("not a TimeoutError: ") + error.what();
        }
        seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      },
      kTimeout);
  SCOPED_TRACE("message: " + message);
  EXPECT_TRUE(timed_out);
  EXPECT_GE(seconds, kTimeout * 0.5);
  EXPECT_LT(seconds, 15.0);
  EXPECT_NE(message.find("rank 0"), std::string::npos);
  EXPECT_NE(message.find("low_latency"), std::string::npos);
  EXPECT_NE(message.find("dispatch receiver"), std::string::npos);
  EXPECT_NE(message.find("from rank 1"), std::string::npos);
}

// ---- the fp8 cast -------------------------------------------------------------------------------

TEST(CudaLowLatencyFp8Cast, HardwareCastEqualsTheSharedCastOnEveryFloat) {
  SWITCHYARD_REQUIRE_GPU();
  check_cuda(cudaSetDevice(kGpu), "cudaSetDevice");
  const Fp8CastMismatches mismatches = count_device_fp8_cast_mismatches();
  EXPECT_EQ(mismatches.count, 0u) << "first mismatching float bits: 0x" << std::hex << mismatches.first_bits;
}

}  // namespace
}  // namespace switchyard::testing
