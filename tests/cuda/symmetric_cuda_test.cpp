// The CUDA `symmetric` engine (DESIGN.md, "Symmetric engine"; expert-major interface) against the
// reference and against the CPU backend's symmetric engine, bit for bit: R ranks as threads of this
// process, each with its own stream, all on GPU 0. Also: CUDA graph capture and replay with new
// routing, back-to-back calls, timeouts naming the missing rank, bad input found on the device, the
// co-residency refusal, and sharing a Buffer with the `normal` engine. Skipped (reported as skipped)
// where no GPU is present. The `Small_R1` cases are small enough for compute-sanitizer.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "cuda/cuda_round_trip.hpp"
#include "cuda/device_tensors.hpp"
#include "cuda/symmetric_engine.hpp"
#include "cuda/symmetric_kernels.hpp"
#include "support/normal_round_trip.hpp"
#include "support/test_seed.hpp"
#include "switchyard/buffer.hpp"
#include "switchyard/errors.hpp"
#include "switchyard/group.hpp"
#include "switchyard/reference.hpp"
#include "workload/workload.hpp"

namespace switchyard::testing {
namespace {

using cuda::prepare_symmetric_kernels;
using cuda::symmetric_blocks_per_rank;
using cuda::symmetric_blocks_per_sm;

// NOTES: generous, so that compute-sanitizer (which slows the kernels by orders of magnitude) does
// not turn a slow barrier into a timeout; the timeout tests set their own.
constexpr double kTestTimeoutSeconds = 120.0;

#define SWITCHYARD_REQUIRE_GPU() \
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device: GPU tests are skipped, not passed"

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
          int hidden) {
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

Case with_routing(Case c, workload::Routing routing) {
  c.routing = routing;
  return c;
}

Case with_fp8(Case c, bool round_scale, bool use_ue8m0) {
  c.fp8 = {true, round_scale, use_ue8m0};
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

BufferOptions options_of(const Case& c, int rank, Backend backend, double timeout_seconds = kTestTimeoutSeconds) {
  BufferOptions options;
  options.topology = Topology::single_node(c.ranks);
  options.rank = rank;
  options.backend = backend;
  options.device = kDevice;
  options.config.timeout_seconds = timeout_seconds;
  options.sizing.max_tokens_per_rank = 1;
  options.sizing.hidden = c.hidden;
  options.sizing.topk = c.topk;
  options.sizing.num_experts = c.num_experts;
  options.sizing.symmetric_max_tokens_per_rank = c.max_tokens;
  return options;
}

// A view of `tensor` [a, b, c] as [a * b, c].
TensorView flat(const TensorView& tensor) {
  TensorView view = tensor;
  view.ndim = 2;
  view.shape = {tensor.shape[0] * tensor.shape[1], tensor.shape[2], 0, 0};
  return view;
}

// The synthetic expert on every row of the reference's recv_x (zeros past recv_count), so that the
// GPU, the CPU engine and the reference combine the very same y.
Tensor expert_outputs(const TensorView& recv_x, const TensorView& recv_x_scales, int rank) {
  Tensor y = workload::synthetic_expert(flat(recv_x), recv_x_scales.defined() ? flat(recv_x_scales) : TensorView(), rank);
  Tensor shaped = Tensor::empty(DType::bf16, {recv_x.shape[0], recv_x.shape[1], recv_x.shape[2]});
  std::memcpy(shaped.data(), y.data(), y.nbytes());
  return shaped;
}

struct Expected {
  std::vector<workload::RankData> data;
  std::vector<reference::LowLatencyDispatchOutput> dispatched;
  std::vector<Tensor> ys;        // per rank; empty with UE8M0 (no dequantisable scales)
  std::vector<Tensor> combined;  // per rank
};

Expected expected_for(const Case& c, uint64_t seed) {
  Expected expected;
  expected.data = workload::generate(shape_of(c), seed);
  std::vector<reference::RankInputs> inputs;
  for (const auto& data : expected.data) inputs.push_back(data.inputs());
  expected.dispatched = reference::low_latency_dispatch(inputs, c.num_experts, Topology::single_node(c.ranks),
                                                        c.max_tokens, c.fp8);
  if (!c.fp8.use_ue8m0) {
    std::vector<TensorView> views;
    for (int rank = 0; rank < c.ranks; ++rank) {
      expected.ys.push_back(expert_outputs(expected.dispatched[rank].recv_x, expected.dispatched[rank].recv_x_scales, rank));
    }
    for (const Tensor& y : expected.ys) views.push_back(y);
    expected.combined =
        reference::low_latency_combine(views, inputs, c.num_experts, Topology::single_node(c.ranks), c.max_tokens);
  }
  return expected;
}

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

void compare(const TensorView& actual, const TensorView& expected, const std::string& name, int rank, Failures& failures,
             int64_t rows = -1) {
  std::string why;
  if (!workload::bitwise_equal(actual, expected, &why, rows)) failures.add(rank, name + ": " + why);
}

// recv_x and its scales on received rows only (the rest is unspecified); the rest whole.
void check_outputs(const Outputs& got, const Outputs& want, int rank, Failures& failures, const std::string& against) {
  compare(got.recv_count, want.recv_count, "recv_count vs " + against, rank, failures);
  compare(got.layout_range, want.layout_range, "layout_range vs " + against, rank, failures);
  compare(got.src_info, want.src_info, "src_info vs " + against, rank, failures);
  if (!got.recv_x.defined() || got.recv_x.dtype() != want.recv_x.dtype() ||
      got.recv_x.view().shape != want.recv_x.view().shape) {
    failures.add(rank, "recv_x vs " + against + ": expected " + want.recv_x.view().describe() + ", got " +
                           (got.recv_x.defined() ? got.recv_x.view().describe() : std::string("none")));
    return;
  }
  const int64_t rows_per_expert = want.recv_x.size(1);
  for (int64_t local = 0; local < want.recv_x.size(0); ++local) {
    const int64_t count = want.recv_count.as<const int32_t>()[local];
    auto expert_rows = [&](const Tensor& tensor) {
      TensorView view = flat(tensor);
      view.data = static_cast<uint8_t*>(view.data) + local * rows_per_expert * view.shape[1] * dtype_size(view.dtype);
      view.shape[0] = rows_per_expert;
      return view;
    };
    const std::string which = " of local expert " + std::to_string(local) + " vs " + against;
    compare(expert_rows(got.recv_x), expert_rows(want.recv_x), "recv_x" + which, rank, failures, count);
    if (want.recv_x_scales.defined()) {
      if (!got.recv_x_scales.defined()) {
        failures.add(rank, "recv_x_scales: missing");
        return;
      }
      compare(expert_rows(got.recv_x_scales), expert_rows(want.recv_x_scales), "recv_x_scales" + which, rank, failures,
              count);
    }
  }
  if (want.combined_x.defined()) compare(got.combined_x, want.combined_x, "combined_x vs " + against, rank, failures);
}

Outputs reference_outputs(const Expected& expected, int rank) {
  const reference::LowLatencyDispatchOutput& want = expected.dispatched[rank];
  Outputs outputs{want.recv_x, want.recv_x_scales, want.recv_count, want.layout_range, want.src_info, Tensor()};
  if (!expected.combined.empty()) outputs.combined_x = expected.combined[rank];
  return outputs;
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

LowLatencyCombineArgs combine_args(const TensorView& y, const TensorView& topk_idx, const TensorView& topk_weights,
                                   const LowLatencyHandle& handle, Stream stream) {
  LowLatencyCombineArgs args;
  args.x = y;
  args.topk_idx = topk_idx;
  args.topk_weights = topk_weights;
  args.handle = &handle;
  args.stream = stream;
  return args;
}

// The CPU backend's symmetric engine on the same inputs and expert outputs.
std::vector<Outputs> cpu_engine_outputs(const Case& c, const Expected& expected) {
  std::vector<Outputs> outputs(c.ranks);
  run_ranks(c.ranks, [&](Group& group) {
    const int rank = group.rank();
    const workload::RankData& data = expected.data[rank];
    Buffer buffer(options_of(c, rank, Backend::cpu));
    buffer.connect(group.allgather(buffer.local_handle()));
    LowLatencyDispatchResult dispatched = buffer.symmetric_dispatch(dispatch_args(c, data.x, data.topk_idx, nullptr));
    Outputs& out = outputs[rank];
    out.recv_x = dispatched.recv_x;
    out.recv_x_scales = dispatched.recv_x_scales;
    out.recv_count = dispatched.recv_count;
    out.layout_range = dispatched.layout_range;
    out.src_info = dispatched.src_info;
    if (!expected.ys.empty()) {
      out.combined_x = buffer
                           .symmetric_combine(combine_args(expected.ys[rank], data.topk_idx, data.topk_weights,
                                                           dispatched.handle, nullptr))
                           .combined_x;
    }
    group.barrier();
  });
  return outputs;
}

// Per-rank GPU state: a non-blocking stream, and a buffer connected to the other ranks.
struct GpuRank {
  cudaStream_t stream = nullptr;
  std::unique_ptr<Buffer> buffer;

  GpuRank(const BufferOptions& options, Group& group) {
    cudaSetDevice(kDevice);
    check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
    buffer = std::make_unique<Buffer>(options);
    buffer->connect(group.allgather(buffer->local_handle()));
  }
  ~GpuRank() {
    buffer.reset();
    cudaStreamDestroy(stream);
  }
  static void check(cudaError_t status, const char* what) {
    if (status != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(status));
  }
};

// One symmetric round trip on the GPU. With `preallocate`, every output is a poisoned tensor passed
// in (anything the engine fails to write shows as 0xA5 bytes); else the library allocates.
Outputs gpu_round_trip(GpuRank& gpu, const Case& c, const Expected& expected, int rank, bool preallocate) {
  const workload::RankData& data = expected.data[rank];
  const cudaStream_t stream = gpu.stream;
  Tensor x = to_device(data.x, kDevice, stream), topk_idx = to_device(data.topk_idx, kDevice, stream);
  Tensor topk_weights = to_device(data.topk_weights, kDevice, stream);
  const int64_t local = c.num_experts / c.ranks;
  const int64_t rows = c.ranks * c.max_tokens;
  LowLatencyDispatchArgs args = dispatch_args(c, x, topk_idx, stream);
  Tensor out_recv_x, out_scales, out_count, out_range, out_src, out_combined;
  if (preallocate) {
    out_recv_x = poisoned_device(c.fp8.use_fp8 ? DType::fp8_e4m3 : DType::bf16, {local, rows, c.hidden}, kDevice, stream);
    if (c.fp8.use_ue8m0) {
      out_scales = poisoned_device(DType::i32, {local, rows, (c.hidden / 128 + 3) / 4}, kDevice, stream);
    } else if (c.fp8.use_fp8) {
      out_scales = poisoned_device(DType::f32, {local, rows, c.hidden / 128}, kDevice, stream);
    }
    out_count = poisoned_device(DType::i32, {local}, kDevice, stream);
    out_range = poisoned_device(DType::i32, {local, c.ranks, 2}, kDevice, stream);
    out_src = poisoned_device(DType::i32, {local, rows}, kDevice, stream);
    out_combined = poisoned_device(DType::bf16, {data.x.size(0), c.hidden}, kDevice, stream);
    args.out_recv_x = out_recv_x;
    args.out_recv_x_scales = out_scales;
    args.out_recv_count = out_count;
    args.out_layout_range = out_range;
    args.out_src_info = out_src;
  }
  LowLatencyDispatchResult dispatched = gpu.buffer->symmetric_dispatch(args);
  gpu.buffer->synchronize(stream);
  Outputs out;
  out.recv_x = to_host(dispatched.recv_x, stream);
  out.recv_x_scales = to_host(dispatched.recv_x_scales, stream);
  out.recv_count = to_host(dispatched.recv_count, stream);
  out.layout_range = to_host(dispatched.layout_range, stream);
  out.src_info = to_host(dispatched.src_info, stream);
  if (!expected.ys.empty()) {
    Tensor y = to_device(expected.ys[rank], kDevice, stream);
    LowLatencyCombineArgs cargs = combine_args(y, topk_idx, topk_weights, dispatched.handle, stream);
    cargs.out_combined_x = out_combined;
    LowLatencyCombineResult combined = gpu.buffer->symmetric_combine(cargs);
    gpu.buffer->synchronize(stream);
    out.combined_x = to_host(combined.combined_x, stream);
  }
  return out;
}

// ---- bitwise round trips ------------------------------------------------------------------------

class SymmetricCudaRoundTrip : public ::testing::TestWithParam<Case> {};

TEST_P(SymmetricCudaRoundTrip, MatchesTheReferenceAndTheCpuEngineBitwiseTwice) {
  SWITCHYARD_REQUIRE_GPU();
  const Case& c = GetParam();
  const uint64_t seed = seed_for("symmetric_cuda/" + c.name);
  SCOPED_TRACE("case " + c.name + " seed=" + std::to_string(seed));
  const Expected expected = expected_for(c, seed);
  const std::vector<Outputs> cpu = cpu_engine_outputs(c, expected);
  Failures failures;
  run_ranks(c.ranks, [&](Group& group) {
    const int rank = group.rank();
    GpuRank gpu(options_of(c, rank, Backend::cuda), group);
    // Twice on one buffer: the second call uses the other heap half and barrier phase, and must give
    // the same bits. Preallocated, poisoned outputs on even ranks; the library allocates on odd ones.
    for (int round = 0; round < 2; ++round) {
      const Outputs got = gpu_round_trip(gpu, c, expected, rank, rank % 2 == 0);
      check_outputs(got, reference_outputs(expected, rank), rank, failures, "reference (round " + std::to_string(round) + ")");
      check_outputs(got, cpu[rank], rank, failures, "cpu engine (round " + std::to_string(round) + ")");
    }
    group.barrier();
  });
  failures.expect_none(seed);
}

std::vector<Case> cases() {
  using workload::Routing;
  return {
      // Small enough for compute-sanitizer (scripts/gpu-check.sh runs the *Small_R1* cases under it).
      make("Small_R1_bf16", 1, {40}, 40, 4, 8, 256),
      with_fp8(make("Small_R1_fp8", 1, {33}, 40, 4, 8, 256), false, false),
      with_fp8(make("Small_R1_fp8_ue8m0_padded", 1, {20}, 24, 2, 4, 640), false, true),  // 5 scales: 2 words
      with_routing(make("Small_R1_one_expert_full", 1, {12}, 12, 2, 4, 128), Routing::one_expert),
      make("R2_k1_h128", 2, {50, 37}, 64, 1, 4, 128),
      make("R2_h8192", 2, {24, 17}, 24, 4, 8, 8192),
      make("R2_h20480_rows_in_two_pieces", 2, {6, 5}, 8, 2, 4, 20480),
      with_fp8(make("R2_fp8_h36864_pieces_and_scales", 2, {5, 4}, 8, 2, 4, 36864), false, false),
      make("R2_zero_tokens_on_rank1", 2, {40, 0}, 40, 4, 8, 512),
      make("R2_many_tokens_routing_waves", 2, {2048, 1999}, 2048, 8, 32, 128),
      make("R3_k6_h384", 3, {30, 17, 25}, 32, 6, 12, 384),
      make("R4_zero_tokens", 4, {0, 0, 0, 0}, 8, 2, 8, 256),
      make("R4_k9", 4, {48, 40, 48, 31}, 48, 9, 36, 1024),
      with_routing(make("R4_all_invalid", 4, {16, 16, 16, 16}, 16, 3, 8, 256), Routing::all_invalid),
      with_routing(make("R4_one_expert_full", 4, {32, 32, 32, 32}, 32, 2, 8, 256), Routing::one_expert),
      with_routing(make("R4_skewed", 4, {40, 40, 40, 40}, 40, 4, 16, 512), Routing::skewed),
      with_fp8(make("R4_fp8_round_scale", 4, {30, 24, 30, 11}, 32, 4, 16, 512), true, false),
      make("R8_deepseek_h7168_k8", 8, {48, 41, 48, 0, 33, 48, 12, 48}, 48, 8, 128, 7168),
      make("R8_k8_h2048", 8, {128, 128, 128, 128, 128, 128, 128, 128}, 128, 8, 64, 2048),
      with_fp8(make("R8_fp8_k9", 8, {20, 13, 24, 0, 24, 7, 24, 19}, 24, 9, 64, 512), false, false),
  };
}

INSTANTIATE_TEST_SUITE_P(EdgeCases, SymmetricCudaRoundTrip, ::testing::ValuesIn(cases()),
                         [](const auto& info) { return info.param.name; });

// ---- back to back, graphs -----------------------------------------------------------------------

// Two dispatches, then their combines in the other order, with no synchronisation between ranks:
// four barriers per round walk through both signal phases and both signs, and the halves alternate.
TEST(SymmetricCuda, BackToBackCallsReuseTheBarrierAndHalvesWithoutRacing) {
  SWITCHYARD_REQUIRE_GPU();
  const Case c = make("back_to_back", 4, {40, 23, 40, 17}, 40, 4, 16, 512);
  const uint64_t seed = seed_for("symmetric_cuda/back_to_back");
  const Expected first = expected_for(c, seed);
  const Expected second = expected_for(c, seed + 1);
  Failures failures;
  run_ranks(c.ranks, [&](Group& group) {
    const int rank = group.rank();
    GpuRank gpu(options_of(c, rank, Backend::cuda), group);
    const cudaStream_t stream = gpu.stream;
    const workload::RankData& a_data = first.data[rank];
    const workload::RankData& b_data = second.data[rank];
    Tensor a_x = to_device(a_data.x, kDevice, stream), a_idx = to_device(a_data.topk_idx, kDevice, stream);
    Tensor a_w = to_device(a_data.topk_weights, kDevice, stream);
    Tensor b_x = to_device(b_data.x, kDevice, stream), b_idx = to_device(b_data.topk_idx, kDevice, stream);
    Tensor b_w = to_device(b_data.topk_weights, kDevice, stream);
    Tensor a_y = to_device(first.ys[rank], kDevice, stream), b_y = to_device(second.ys[rank], kDevice, stream);
    for (int round = 0; round < 6; ++round) {
      LowLatencyDispatchResult a = gpu.buffer->symmetric_dispatch(dispatch_args(c, a_x, a_idx, stream));
      LowLatencyDispatchResult b = gpu.buffer->symmetric_dispatch(dispatch_args(c, b_x, b_idx, stream));
      LowLatencyCombineResult combined_b = gpu.buffer->symmetric_combine(combine_args(b_y, b_idx, b_w, b.handle, stream));
      LowLatencyCombineResult combined_a = gpu.buffer->symmetric_combine(combine_args(a_y, a_idx, a_w, a.handle, stream));
      gpu.buffer->synchronize(stream);
      Outputs got_a{to_host(a.recv_x, stream), Tensor(), to_host(a.recv_count, stream), to_host(a.layout_range, stream),
                    to_host(a.src_info, stream), to_host(combined_a.combined_x, stream)};
      Outputs got_b{to_host(b.recv_x, stream), Tensor(), to_host(b.recv_count, stream), to_host(b.layout_range, stream),
                    to_host(b.src_info, stream), to_host(combined_b.combined_x, stream)};
      check_outputs(got_a, reference_outputs(first, rank), rank, failures, "reference (first, round " + std::to_string(round) + ")");
      check_outputs(got_b, reference_outputs(second, rank), rank, failures, "reference (second, round " + std::to_string(round) + ")");
    }
    group.barrier();
  });
  failures.expect_none(seed);
}

// No host synchronisation: dispatch and combine are captured in CUDA graphs once and replayed with
// new inputs (new routing) uploaded into the same device tensors; every replay matches the
// reference (the heap half and barrier phase advance on the device, not in the captured arguments).
TEST(SymmetricCuda, DispatchAndCombineReplayFromCudaGraphsWithNewRouting) {
  SWITCHYARD_REQUIRE_GPU();
  const Case c = make("graph", 4, {48, 48, 48, 48}, 48, 8, 32, 1024);
  constexpr int kRounds = 3;
  std::vector<Expected> rounds;
  for (int round = 0; round < kRounds; ++round) rounds.push_back(expected_for(c, seed_for("symmetric_cuda/graph") + round));
  Failures failures;
  run_ranks(c.ranks, [&](Group& group) {
    const int rank = group.rank();
    GpuRank gpu(options_of(c, rank, Backend::cuda), group);
    const cudaStream_t stream = gpu.stream;
    const int64_t local = c.num_experts / c.ranks;
    const int64_t rows = c.ranks * c.max_tokens;
    const workload::RankData& data = rounds[0].data[rank];
    Tensor x = to_device(data.x, kDevice, stream), topk_idx = to_device(data.topk_idx, kDevice, stream);
    Tensor topk_weights = to_device(data.topk_weights, kDevice, stream);
    Tensor y = poisoned_device(DType::bf16, {local, rows, c.hidden}, kDevice, stream);
    Tensor recv_x = poisoned_device(DType::bf16, {local, rows, c.hidden}, kDevice, stream);
    Tensor recv_count = poisoned_device(DType::i32, {local}, kDevice, stream);
    Tensor layout_range = poisoned_device(DType::i32, {local, c.ranks, 2}, kDevice, stream);
    Tensor src_info = poisoned_device(DType::i32, {local, rows}, kDevice, stream);
    Tensor combined = poisoned_device(DType::bf16, {data.x.size(0), c.hidden}, kDevice, stream);
    LowLatencyDispatchArgs args = dispatch_args(c, x, topk_idx, stream);
    args.out_recv_x = recv_x;
    args.out_recv_count = recv_count;
    args.out_layout_range = layout_range;
    args.out_src_info = src_info;

    cudaGraph_t dispatch_graph, combine_graph;
    cudaGraphExec_t dispatch_exec, combine_exec;
    // No rank does other CUDA work while any rank captures.
    GpuRank::check(cudaStreamSynchronize(stream), "sync before capture");
    group.barrier();
    GpuRank::check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed), "begin dispatch capture");
    LowLatencyDispatchResult dispatched = gpu.buffer->symmetric_dispatch(args);
    GpuRank::check(cudaStreamEndCapture(stream, &dispatch_graph), "end dispatch capture");
    GpuRank::check(cudaGraphInstantiate(&dispatch_exec, dispatch_graph, 0), "instantiate dispatch graph");
    LowLatencyCombineArgs cargs = combine_args(y, topk_idx, topk_weights, dispatched.handle, stream);
    cargs.out_combined_x = combined;
    GpuRank::check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed), "begin combine capture");
    LowLatencyCombineResult combine_result = gpu.buffer->symmetric_combine(cargs);
    GpuRank::check(cudaStreamEndCapture(stream, &combine_graph), "end combine capture");
    GpuRank::check(cudaGraphInstantiate(&combine_exec, combine_graph, 0), "instantiate combine graph");
    group.barrier();

    for (int round = 0; round < kRounds; ++round) {
      const workload::RankData& inputs = rounds[round].data[rank];
      upload(x, inputs.x, stream);
      upload(topk_idx, inputs.topk_idx, stream);
      upload(topk_weights, inputs.topk_weights, stream);
      upload(y, rounds[round].ys[rank], stream);
      GpuRank::check(cudaGraphLaunch(dispatch_exec, stream), "launch dispatch graph");
      GpuRank::check(cudaGraphLaunch(combine_exec, stream), "launch combine graph");
      gpu.buffer->synchronize(stream);
      Outputs got{to_host(recv_x, stream), Tensor(), to_host(recv_count, stream), to_host(layout_range, stream),
                  to_host(src_info, stream), to_host(combined, stream)};
      check_outputs(got, reference_outputs(rounds[round], rank), rank, failures, "reference (replay " + std::to_string(round) + ")");
    }
    group.barrier();
    cudaGraphExecDestroy(dispatch_exec);
    cudaGraphExecDestroy(combine_exec);
    cudaGraphDestroy(dispatch_graph);
    cudaGraphDestroy(combine_graph);
  });
  failures.expect_none(seed_for("symmetric_cuda/graph"));
}

// One Buffer serves the symmetric and normal engines in turn: a whole normal round trip between a
// symmetric dispatch and its combine (their grids are sized independently; see the report).
TEST(SymmetricCuda, InterleavesWithTheNormalEngineOnOneBuffer) {
  SWITCHYARD_REQUIRE_GPU();
  workload::Shape shape;
  shape.topology = Topology::single_node(2);
  shape.tokens_per_rank = 48;
  shape.hidden = 512;
  shape.topk = 4;
  shape.num_experts = 8;
  const uint64_t seed = seed_for("symmetric_cuda/interleaved");
  const std::vector<workload::RankData> normal_data = workload::generate(shape, seed);
  const testing::Expected normal_expected = compute_expected(shape, normal_data, 1);
  const Case c = make("interleaved", 2, {48, 48}, 48, 4, 8, 512);
  const Expected expected = expected_for(c, seed);
  std::mutex mutex;
  std::vector<std::string> normal_failures;
  Failures failures;
  run_ranks(2, [&](Group& group) {
    const int rank = group.rank();
    BufferOptions options = options_of(c, rank, Backend::cuda);
    options.sizing = sizing_for(shape);
    options.sizing.symmetric_max_tokens_per_rank = c.max_tokens;
    GpuRank gpu(options, group);
    const cudaStream_t stream = gpu.stream;
    const workload::RankData& data = expected.data[rank];
    Tensor x = to_device(data.x, kDevice, stream), topk_idx = to_device(data.topk_idx, kDevice, stream);
    Tensor topk_weights = to_device(data.topk_weights, kDevice, stream);
    Tensor y = to_device(expected.ys[rank], kDevice, stream);
    for (int round = 0; round < 2; ++round) {
      LowLatencyDispatchResult dispatched = gpu.buffer->symmetric_dispatch(dispatch_args(c, x, topk_idx, stream));
      DeviceRun run = run_on_device(*gpu.buffer, shape, normal_data[rank], normal_expected, 1, stream);
      std::vector<std::string> mine;
      compare_with_reference(run, shape, normal_expected, rank, &mine);
      LowLatencyCombineResult combined =
          gpu.buffer->symmetric_combine(combine_args(y, topk_idx, topk_weights, dispatched.handle, stream));
      gpu.buffer->synchronize(stream);
      Outputs got{to_host(dispatched.recv_x, stream), Tensor(), to_host(dispatched.recv_count, stream),
                  to_host(dispatched.layout_range, stream), to_host(dispatched.src_info, stream),
                  to_host(combined.combined_x, stream)};
      check_outputs(got, reference_outputs(expected, rank), rank, failures, "reference (round " + std::to_string(round) + ")");
      std::lock_guard<std::mutex> lock(mutex);
      normal_failures.insert(normal_failures.end(), mine.begin(), mine.end());
    }
    group.barrier();
  });
  for (const auto& line : normal_failures) ADD_FAILURE() << "normal: " << line;
  failures.expect_none(seed);
}

// ---- timeouts -----------------------------------------------------------------------------------

// Rank 0 dispatches (and with `combine`, combines) while rank 1 makes only the dispatch (with
// `combine`) or no call at all; returns what rank 0 caught, and whether its buffer refused work
// afterwards.
std::string timeout_message(bool combine, bool* refused_after) {
  constexpr double kTimeout = 1.0;
  const Case c = make("timeout", 2, {16, 16}, 16, 2, 4, 256);
  const Expected expected = expected_for(c, seed_for("symmetric_cuda/timeout"));
  std::promise<void> rank0_returned;
  std::shared_future<void> release = rank0_returned.get_future().share();
  std::string message;
  double seconds = 0;
  run_ranks(2, [&](Group& group) {
    const int rank = group.rank();
    GpuRank gpu(options_of(c, rank, Backend::cuda, kTimeout), group);
    const cudaStream_t stream = gpu.stream;
    const workload::RankData& data = expected.data[rank];
    Tensor x = to_device(data.x, kDevice, stream), topk_idx = to_device(data.topk_idx, kDevice, stream);
    Tensor topk_weights = to_device(data.topk_weights, kDevice, stream);
    Tensor y = to_device(expected.ys[rank], kDevice, stream);
    if (rank == 1) {
      if (combine) {
        gpu.buffer->symmetric_dispatch(dispatch_args(c, x, topk_idx, stream));
        gpu.buffer->synchronize(stream);
      }
      release.wait_for(std::chrono::seconds(60));  // makes no (further) call
      return;
    }
    struct Release {
      std::promise<void>& promise;
      ~Release() { promise.set_value(); }
    } release_rank1{rank0_returned};
    const auto start = std::chrono::steady_clock::now();
    try {
      LowLatencyDispatchResult dispatched = gpu.buffer->symmetric_dispatch(dispatch_args(c, x, topk_idx, stream));
      if (combine) {
        gpu.buffer->synchronize(stream);
        gpu.buffer->symmetric_combine(combine_args(y, topk_idx, topk_weights, dispatched.handle, stream));
      }
      gpu.buffer->synchronize(stream);
      message = "no exception";
    } catch (const TimeoutError& error) {
      message = error.what();
    } catch (const std::exception& error) {
      message = std::string("not a TimeoutError: ") + error.what();
    }
    seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    try {
      gpu.buffer->symmetric_dispatch(dispatch_args(c, x, topk_idx, stream));
    } catch (const TimeoutError&) {
    } catch (const Error&) {
      *refused_after = true;  // the buffer is unusable after a timeout
    }
  });
  EXPECT_GE(seconds, kTimeout * 0.5) << message;
  EXPECT_LT(seconds, 20.0) << message;
  return message;
}

TEST(SymmetricCudaTimeouts, DispatchWithoutItsPeerTimesOutNamingRankRoleAndTheMissingRank) {
  SWITCHYARD_REQUIRE_GPU();
  bool refused_after = false;
  const std::string message = timeout_message(false, &refused_after);
  SCOPED_TRACE("message: " + message);
  EXPECT_NE(message.find("rank 0 (cuda symmetric, dispatch)"), std::string::npos);
  EXPECT_NE(message.find("timed out"), std::string::npos);
  EXPECT_NE(message.find("barrier from rank 1"), std::string::npos);
  EXPECT_TRUE(refused_after);
}

TEST(SymmetricCudaTimeouts, CombineWithoutItsPeerTimesOutNamingRankRoleAndTheMissingRank) {
  SWITCHYARD_REQUIRE_GPU();
  bool refused_after = false;
  const std::string message = timeout_message(true, &refused_after);
  SCOPED_TRACE("message: " + message);
  EXPECT_NE(message.find("rank 0 (cuda symmetric, combine)"), std::string::npos);
  EXPECT_NE(message.find("barrier from rank 1"), std::string::npos);
  EXPECT_TRUE(refused_after);
}

// ---- bad input found on the device, and the co-residency refusal --------------------------------

// Runs a dispatch whose topk_idx rank `bad_rank` spoils with `spoil`; every rank's outputs stay
// poisoned, `bad_rank` gets InvalidArgument naming topk_idx, and the buffers stay usable.
void expect_refused_on_device(const Case& c, int bad_rank, void (*spoil)(int64_t* ids)) {
  const uint64_t seed = seed_for("symmetric_cuda/" + c.name);
  const Expected expected = expected_for(c, seed);
  Failures failures;
  run_ranks(c.ranks, [&](Group& group) {
    const int rank = group.rank();
    GpuRank gpu(options_of(c, rank, Backend::cuda), group);
    const cudaStream_t stream = gpu.stream;
    Tensor ids = Tensor::empty(DType::i64, {expected.data[rank].topk_idx.size(0), c.topk});
    std::memcpy(ids.data(), expected.data[rank].topk_idx.data(), ids.nbytes());
    if (rank == bad_rank) spoil(ids.as<int64_t>());
    Tensor x = to_device(expected.data[rank].x, kDevice, stream), topk_idx = to_device(ids, kDevice, stream);
    const int64_t local = c.num_experts / c.ranks;
    const int64_t rows = c.ranks * c.max_tokens;
    Tensor out_recv_x = poisoned_device(DType::bf16, {local, rows, c.hidden}, kDevice, stream);
    Tensor out_count = poisoned_device(DType::i32, {local}, kDevice, stream);
    Tensor out_range = poisoned_device(DType::i32, {local, c.ranks, 2}, kDevice, stream);
    Tensor out_src = poisoned_device(DType::i32, {local, rows}, kDevice, stream);
    LowLatencyDispatchArgs args = dispatch_args(c, x, topk_idx, stream);
    args.out_recv_x = out_recv_x;
    args.out_recv_count = out_count;
    args.out_layout_range = out_range;
    args.out_src_info = out_src;
    std::string caught = "no exception";
    try {
      gpu.buffer->symmetric_dispatch(args);
      gpu.buffer->synchronize(stream);
    } catch (const InvalidArgument& error) {
      caught = error.what();
    }
    if (rank == bad_rank) {
      if (caught.rfind("topk_idx:", 0) != 0) {
        failures.add(rank, "expected InvalidArgument naming topk_idx, got: " + caught);
      }
    } else if (caught != "no exception") {
      failures.add(rank, "expected no error on a rank with good input, got: " + caught);
    }
    for (const Tensor* output : {&out_recv_x, &out_count, &out_range, &out_src}) {
      Tensor host = to_host(*output, stream);
      for (size_t i = 0; i < host.nbytes(); ++i) {
        if (host.as<uint8_t>()[i] != 0xA5) {
          failures.add(rank, "an output was written at byte " + std::to_string(i) + " of a refused call");
          break;
        }
      }
    }
    group.barrier();
    // Still usable: a good call matches the reference.
    Tensor good_idx = to_device(expected.data[rank].topk_idx, kDevice, stream);
    LowLatencyDispatchResult again = gpu.buffer->symmetric_dispatch(dispatch_args(c, x, good_idx, stream));
    gpu.buffer->synchronize(stream);
    Outputs got{to_host(again.recv_x, stream), Tensor(), to_host(again.recv_count, stream),
                to_host(again.layout_range, stream), to_host(again.src_info, stream), Tensor()};
    Outputs want = reference_outputs(expected, rank);
    want.combined_x = Tensor();
    check_outputs(got, want, rank, failures, "reference (after the refused call)");
    group.barrier();
  });
  failures.expect_none(seed);
}

TEST(SymmetricCudaErrors, Small_R1_ExpertIdOutOfRangeIsInvalidArgumentAndWritesNothing) {
  SWITCHYARD_REQUIRE_GPU();
  expect_refused_on_device(make("Small_R1_bad_expert", 1, {16}, 16, 2, 4, 256), 0,
                           [](int64_t* ids) { ids[5] = 4; });  // == num_experts
}

TEST(SymmetricCudaErrors, ExpertIdOutOfRangeOnOneRankLeavesEveryRanksOutputsUntouched) {
  SWITCHYARD_REQUIRE_GPU();
  expect_refused_on_device(make("R2_bad_expert", 2, {16, 16}, 16, 2, 4, 256), 0, [](int64_t* ids) { ids[3] = -2; });
}

TEST(SymmetricCudaErrors, MoreRowsForOneExpertThanMaxTokensIsRefused) {
  SWITCHYARD_REQUIRE_GPU();
  // Five rows of expert 1 from one rank; max_tokens_per_rank is 4.
  expect_refused_on_device(make("R1_over_capacity", 1, {4}, 4, 2, 4, 256), 0,
                           [](int64_t* ids) { for (int i = 0; i < 5; ++i) ids[i] = 1; });
}

TEST(SymmetricCudaCoResidency, RefusesMoreRanksOnAGpuThanItsSmsHoldBlocks) {
  // Pure arithmetic: no GPU needed.
  EXPECT_EQ(symmetric_blocks_per_rank(132, 1, 8, 0), 16);
  EXPECT_EQ(symmetric_blocks_per_rank(132, 1, 1, 0), 132);
  EXPECT_EQ(symmetric_blocks_per_rank(132, 2, 3, 0), 88);
  try {
    symmetric_blocks_per_rank(132, 1, 133, 3);
    ADD_FAILURE() << "expected Unsupported";
  } catch (const Unsupported& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("133 ranks share GPU 3"), std::string::npos) << message;
    EXPECT_NE(message.find("at most 132 ranks"), std::string::npos) << message;
  }
  try {
    symmetric_blocks_per_rank(132, 0, 1, 0);
    ADD_FAILURE() << "expected Unsupported";
  } catch (const Unsupported& error) {
    EXPECT_NE(std::string(error.what()).find("does not fit on an SM"), std::string::npos) << error.what();
  }
}

TEST(SymmetricCudaGrid, DeepSeekRowsGetManyStagesAndHugeExpertCountsAreRefusedByName) {
  // Pure arithmetic: no GPU needed. DeepSeek-V3 on 8 ranks: 14 KiB bf16 rows, 256 experts.
  const cuda::SymmetricGrid dispatch = cuda::symmetric_grid(16, 8, 32, 7168 * 2, 0, true);
  EXPECT_EQ(dispatch.piece_bytes, 7168u * 2);
  EXPECT_GE(dispatch.stages, 12);
  EXPECT_EQ(dispatch.routing_warps, cuda::kHelperWarps);
  EXPECT_LE(dispatch.table_bytes + dispatch.stages * dispatch.stage_bytes, cuda::kSymmetricSharedBytes);
  // fp8: the scales travel in the row's stage.
  const cuda::SymmetricGrid fp8 = cuda::symmetric_grid(16, 8, 32, 7168, 56 * 4, true);
  EXPECT_GE(fp8.stage_bytes, 7168u + 56 * 4);
  // Rows longer than a piece travel in pieces.
  EXPECT_EQ(cuda::symmetric_grid(16, 2, 2, 40960, 0, false).piece_bytes, cuda::kMaxPieceBytes);
  try {
    cuda::symmetric_grid(1, 1, 100000, 256, 0, true);
    ADD_FAILURE() << "expected Unsupported";
  } catch (const Unsupported& error) {
    EXPECT_EQ(std::string(error.what()).rfind("num_experts:", 0), 0u) << error.what();
  }
}

TEST(SymmetricCudaCoResidency, EveryBlockOfEightRanksFitsOnThisGpu) {
  SWITCHYARD_REQUIRE_GPU();
  cudaSetDevice(kDevice);
  int sm_count = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, kDevice), cudaSuccess);
  prepare_symmetric_kernels(kDevice);
  const int per_sm = symmetric_blocks_per_sm();
  ASSERT_GE(per_sm, 1) << "a symmetric block does not fit on an SM";
  const int blocks = symmetric_blocks_per_rank(sm_count, per_sm, 8, kDevice);
  EXPECT_EQ(blocks, sm_count * per_sm / 8);
  EXPECT_LE(8 * blocks, sm_count * per_sm);
}

}  // namespace
}  // namespace switchyard::testing
