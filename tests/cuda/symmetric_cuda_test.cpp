// The CUDA `symmetric` engine (DESIGN.md, "Symmetric engine"; expert-major interface) against the
// reference and against the CPU backend's symmetric engine, bit for bit: R ranks as threads of this
// process, each with its own stream, on the GPUs SWITCHYARD_TEST_DEVICES picks (cuda/rank_device.hpp;
// default: all on GPU 0). Both combine paths (push; pull, where every home reads the experts' y in
// place: ranks as threads on one GPU; Config::symmetric_combine), each after both dispatch sources
// (publish; zero_copy, where receivers read the callers' x in place: Config::symmetric_dispatch), run
// every round trip. Also: CUDA graph capture and replay with new routing (x rewritten in place), back-
// to-back calls, x (y) overwritten on the caller's stream right after dispatch (combine), timeouts naming the
// missing rank, bad input found on the device, the co-residency refusal, and sharing a Buffer with the
// `normal` engine. Skipped (reported as skipped) where no GPU is present. The `Small_R1` cases are small
// enough for compute-sanitizer.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <ostream>
#include <string>
#include <vector>

#include "cuda/backend/dependent_launch.hpp"
#include "cuda/backend/signal_scope.hpp"
#include "cuda/captured_round_trip.hpp"
#include "cuda/cuda_round_trip.hpp"
#include "cuda/device_tensors.hpp"
#include "cuda/expert_major_round_trip.hpp"
#include "cuda/freed_outputs_round_trip.hpp"
#include "cuda/late_writer.hpp"
#include "cuda/rank_device.hpp"
#include "cuda/symmetric/engine.hpp"
#include "cuda/symmetric/kernels.hpp"
#include "support/expert_major_gtest.hpp"
#include "support/normal_round_trip.hpp"
#include "support/refused_environment.hpp"
#include "support/scoped_environment.hpp"
#include "support/test_seed.hpp"
#include "switchyard/buffer.hpp"
#include "switchyard/errors.hpp"
#include "switchyard/group.hpp"
#include "switchyard/reference.hpp"
#include "workload/workload.hpp"

namespace switchyard {
// GoogleTest names a path parameter by its knob value.
inline void PrintTo(SymmetricCombine path, std::ostream* out) {
  *out << symmetric_combine_name(path);
}
inline void PrintTo(SymmetricDispatch path, std::ostream* out) {
  *out << symmetric_dispatch_name(path);
}
}  // namespace switchyard

namespace switchyard::testing::expert_major {
namespace {

using cuda::prepare_symmetric_kernels;
using cuda::symmetric_blocks_per_rank;
using cuda::symmetric_blocks_per_sm;

// NOTES: generous, so that compute-sanitizer (which slows the kernels by orders of magnitude) does
// not turn a slow barrier into a timeout; the timeout tests set their own.
constexpr double kTestTimeoutSeconds = 120.0;

#define SWITCHYARD_REQUIRE_GPU() \
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device: GPU tests are skipped, not passed"

// Whether c's ranks all land on one GPU (SWITCHYARD_TEST_DEVICES), which the pull combine needs.
bool on_one_device(const Case& c) {
  for (int rank = 1; rank < c.ranks; ++rank) {
    if (testing::device_for_rank(rank, c.ranks) != testing::device_for_rank(0, c.ranks)) return false;
  }
  return true;
}

// The pull combine (zero-copy dispatch) follows plain y (x) pointers: ranks spread over GPUs cannot use
// it (connect refuses).
#define SWITCHYARD_REQUIRE_PATH(c)                                                           \
  if (((c).symmetric_combine == SymmetricCombine::pull ||                                    \
       (c).symmetric_dispatch == SymmetricDispatch::zero_copy) &&                            \
      !on_one_device(c))                                                                     \
  GTEST_SKIP() << "the pull combine and the zero-copy dispatch need every rank on one GPU; " \
                  "SWITCHYARD_TEST_DEVICES spreads them"

// Both combine paths, named after the path.
constexpr SymmetricCombine kPaths[] = {SymmetricCombine::push, SymmetricCombine::pull};

class SymmetricCudaPaths : public ::testing::TestWithParam<SymmetricCombine> {};

INSTANTIATE_TEST_SUITE_P(Paths, SymmetricCudaPaths, ::testing::ValuesIn(kPaths),
                         [](const auto& info) { return std::string(symmetric_combine_name(info.param)); });

// Both dispatch sources, named after the knob: "publish", "zero_copy".
constexpr SymmetricDispatch kSources[] = {SymmetricDispatch::publish, SymmetricDispatch::zero_copy};

class SymmetricCudaSources : public ::testing::TestWithParam<SymmetricDispatch> {};

INSTANTIATE_TEST_SUITE_P(Sources, SymmetricCudaSources, ::testing::ValuesIn(kSources),
                         [](const auto& info) { return std::string(symmetric_dispatch_name(info.param)); });

// Every buffer here has the symmetric region only.
BufferOptions options_of(const Case& c, int rank, double timeout_seconds = kTestTimeoutSeconds) {
  return cuda_buffer_options(c, rank, Regions::symmetric, timeout_seconds);
}

// One symmetric round trip on the GPU. With `preallocate`, every output is a poisoned tensor passed
// in (anything the engine fails to write shows as 0xA5 bytes); else the library allocates.
Outputs gpu_round_trip(GpuRank& gpu, const Case& c, const Expected& expected, int rank, bool preallocate) {
  const workload::RankData& data = expected.data[rank];
  const cudaStream_t stream = gpu.stream;
  const DeviceInputs in = upload_inputs(data, gpu.device, stream);
  LowLatencyDispatchArgs args = dispatch_args(c, in.x, in.topk_idx, stream);
  const PoisonedOutputs out =
      preallocate ? poisoned_device_outputs(c, data.x.size(0), gpu.device, stream) : PoisonedOutputs();
  out.attach(args);
  LowLatencyDispatchResult dispatched = gpu.buffer->symmetric_dispatch(args);
  gpu.buffer->synchronize(stream);
  Outputs got = download(dispatched, stream);
  if (!expected.ys.empty()) {
    Tensor y = to_device(expected.ys[rank], gpu.device, stream);
    LowLatencyCombineArgs cargs = combine_args(in.topk_idx, in.topk_weights, dispatched.handle, y, stream);
    out.attach(cargs);
    // The combine biases `expected` was computed with, if any, on the device.
    Tensor bias0, bias1;
    if (!expected.bias0.empty()) bias0 = to_device(expected.bias0[rank], gpu.device, stream);
    if (!expected.bias1.empty()) bias1 = to_device(expected.bias1[rank], gpu.device, stream);
    cargs.bias0 = bias0;
    cargs.bias1 = bias1;
    LowLatencyCombineResult combined = gpu.buffer->symmetric_combine(cargs);
    gpu.buffer->synchronize(stream);
    got.combined_x = to_host(combined.combined_x, stream);
  }
  return got;
}

// Dispatch and combine captured once in CUDA graphs (on `in`, `y` and `out`), then replayed with the
// inputs and the reference's expert outputs of every one of `rounds`, uploaded into the same device
// tensors: every replay matches the reference. With `poison_x`, x is overwritten on the stream right
// behind every replayed dispatch (the combine does not read it).
void check_replays(const Case& c, const std::vector<Expected>& rounds, Group& group, GpuRank& gpu,
                   const DeviceInputs& in, const Tensor& y, const PoisonedOutputs& out, Failures& failures,
                   bool poison_x = false) {
  const int rank = group.rank();
  const cudaStream_t stream = gpu.stream;
  const CapturedRoundTrip captured(Engine::symmetric, c, group, *gpu.buffer, in, y, out, stream);
  for (size_t round = 0; round < rounds.size(); ++round) {
    const workload::RankData& inputs = rounds[round].data[rank];
    upload(in.x, inputs.x, stream);
    upload(in.topk_idx, inputs.topk_idx, stream);
    upload(in.topk_weights, inputs.topk_weights, stream);
    upload(y, rounds[round].ys[rank], stream);
    captured.launch_dispatch();
    if (poison_x && cudaMemsetAsync(in.x.data(), kPoison, in.x.nbytes(), stream) != cudaSuccess) {
      failures.add(rank, "poisoning x failed");
    }
    captured.launch_combine();
    gpu.buffer->synchronize(stream);
    Outputs got = download(out, stream);
    got.combined_x = to_host(out.combined_x, stream);
    check_outputs(got, reference_outputs(rounds[round], rank),
                  "reference (replay " + std::to_string(round) + ")", rank, failures);
  }
  group.barrier();
}

// ---- bitwise round trips ------------------------------------------------------------------------

class SymmetricCudaRoundTrip : public ::testing::TestWithParam<Case> {};

TEST_P(SymmetricCudaRoundTrip, MatchesTheReferenceAndTheCpuEngineBitwiseTwice) {
  SWITCHYARD_REQUIRE_GPU();
  const Case& c = GetParam();
  SWITCHYARD_REQUIRE_PATH(c);
  const uint64_t seed = seed_for("symmetric_cuda/" + c.name);
  SCOPED_TRACE("case " + c.name + " seed=" + std::to_string(seed));
  const Expected expected = expected_for(c, seed);
  const std::vector<Outputs> cpu = run_cpu_engine(Engine::symmetric, c, expected);
  Failures failures;
  run_ranks(c.ranks, [&](Group& group) {
    const int rank = group.rank();
    GpuRank gpu(options_of(c, rank), group);
    if (gpu.buffer->symmetric_combine_path() != c.symmetric_combine) {
      failures.add(rank, std::string("symmetric_combine_path: expected ") +
                             symmetric_combine_name(c.symmetric_combine) + ", got " +
                             symmetric_combine_name(gpu.buffer->symmetric_combine_path()));
    }
    if (gpu.buffer->symmetric_dispatch_path() != c.symmetric_dispatch) {
      failures.add(rank, std::string("symmetric_dispatch_path: expected ") +
                             symmetric_dispatch_name(c.symmetric_dispatch) + ", got " +
                             symmetric_dispatch_name(gpu.buffer->symmetric_dispatch_path()));
    }
    // Twice on one buffer: the second call uses the other heap half and barrier phase, and must give
    // the same bits. Preallocated, poisoned outputs on even ranks; the library allocates on odd ones.
    for (int round = 0; round < 2; ++round) {
      const Outputs got = gpu_round_trip(gpu, c, expected, rank, rank % 2 == 0);
      check_outputs(got, reference_outputs(expected, rank), "reference (round " + std::to_string(round) + ")",
                    rank, failures);
      check_outputs(got, cpu[rank], "cpu engine (round " + std::to_string(round) + ")", rank, failures);
    }
    group.barrier();
  });
  expect_none(failures, seed);
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

INSTANTIATE_TEST_SUITE_P(EdgeCases, SymmetricCudaRoundTrip,
                         ::testing::ValuesIn(on_both_combine_paths(cases())),
                         [](const auto& info) { return info.param.name; });

// The heap-resident tensors (Buffer::symmetric_input, symmetric_expert_output): x copied into the heap
// input and y into the heap output on the stream, the calls given those views, three rounds on one buffer
// (both halves, one reused), every output against the reference and the CPU engine. The records then carry
// heap offsets, which peers follow through their mappings, as across processes (the process test's
// --heap-tensors on runs that).
class SymmetricCudaHeapTensors : public ::testing::TestWithParam<Case> {};

TEST_P(SymmetricCudaHeapTensors, RoundTripsThroughTheHeapTensorsMatchTheReferenceBitwise) {
  SWITCHYARD_REQUIRE_GPU();
  const Case& c = GetParam();
  SWITCHYARD_REQUIRE_PATH(c);
  const uint64_t seed = seed_for("symmetric_cuda_heap/" + c.name);
  SCOPED_TRACE("case " + c.name + " seed=" + std::to_string(seed));
  const Expected expected = expected_for(c, seed);
  const std::vector<Outputs> cpu = run_cpu_engine(Engine::symmetric, c, expected);
  Failures failures;
  run_ranks(c.ranks, [&](Group& group) {
    const int rank = group.rank();
    BufferOptions options = options_of(c, rank);
    options.sizing.symmetric_heap_input = true;
    options.sizing.symmetric_heap_output_rows_per_expert = rows_per_expert(c);
    GpuRank gpu(options, group);
    const cudaStream_t stream = gpu.stream;
    const workload::RankData& data = expected.data[rank];
    const DeviceInputs in = upload_inputs(data, gpu.device, stream);
    const Tensor y = to_device(expected.ys[rank], gpu.device, stream);
    for (int round = 0; round < 3; ++round) {
      const TensorView x = gpu.buffer->symmetric_input(data.x.size(0), c.hidden);
      check_cuda(cudaMemcpyAsync(x.data, in.x.data(), x.nbytes(), cudaMemcpyDeviceToDevice, stream),
                 "copy x");
      LowLatencyDispatchArgs args = dispatch_args(c, x, in.topk_idx, stream);
      LowLatencyDispatchResult dispatched = gpu.buffer->symmetric_dispatch(args);
      const TensorView heap_y = gpu.buffer->symmetric_expert_output(dispatched.handle);
      check_cuda(cudaMemcpyAsync(heap_y.data, y.data(), heap_y.nbytes(), cudaMemcpyDeviceToDevice, stream),
                 "copy y");
      LowLatencyCombineResult combined = gpu.buffer->symmetric_combine(
          combine_args(in.topk_idx, in.topk_weights, dispatched.handle, heap_y, stream));
      gpu.buffer->synchronize(stream);
      Outputs got = download(dispatched, stream);
      got.combined_x = to_host(combined.combined_x, stream);
      const std::string label = " (round " + std::to_string(round) + ")";
      check_outputs(got, reference_outputs(expected, rank), "reference" + label, rank, failures);
      check_outputs(got, cpu[rank], "cpu engine" + label, rank, failures);
    }
    group.barrier();
  });
  expect_none(failures, seed);
}

INSTANTIATE_TEST_SUITE_P(Shapes, SymmetricCudaHeapTensors,
                         ::testing::ValuesIn(on_both_combine_paths({
                             make("Small_R1_heap", 1, {40}, 40, 4, 8, 256),
                             make("R4_heap_zero_tokens_on_rank2", 4, {48, 40, 0, 31}, 48, 4, 16, 1024),
                             with_fp8(make("R4_heap_fp8", 4, {30, 24, 30, 11}, 32, 4, 16, 512), false, false),
                             make("R8_heap_deepseek_h7168_k8", 8, {48, 41, 48, 0, 33, 48, 12, 48}, 48, 8, 128,
                                  7168),
                         })),
                         [](const auto& info) { return info.param.name; });

// The heap receive area (Buffer::symmetric_receive): every rank's fp8 dispatch (f32 scales), or bf16 dispatch
// into a bf16 area (BufferSizing::symmetric_heap_receive_dtype), writes into its receive views, poisoned on
// the stream before each call, so that every source pushes its rows straight into them through the heap
// mappings (the push each dispatch's source record must announce, as across processes: the process test's
// --heap-tensors on runs that). Three rounds on one buffer, each dispatch rewriting the area after the
// previous one's outputs came down; every output against the reference and the CPU engine, and each round's
// combine.
class SymmetricCudaHeapReceive : public ::testing::TestWithParam<Case> {};

TEST_P(SymmetricCudaHeapReceive, DispatchesIntoTheReceiveViewsMatchTheReferenceBitwise) {
  SWITCHYARD_REQUIRE_GPU();
  const Case& c = GetParam();
  const uint64_t seed = seed_for("symmetric_cuda_heap_receive/" + c.name);
  SCOPED_TRACE("case " + c.name + " seed=" + std::to_string(seed));
  const Expected expected = expected_for(c, seed);
  const std::vector<Outputs> cpu = run_cpu_engine(Engine::symmetric, c, expected);
  Failures failures;
  run_ranks(c.ranks, [&](Group& group) {
    const int rank = group.rank();
    BufferOptions options = options_of(c, rank);
    options.sizing.symmetric_heap_receive_rows_per_expert = rows_per_expert(c);
    options.sizing.symmetric_heap_receive_dtype = c.fp8.use_fp8 ? DType::fp8_e4m3 : DType::bf16;
    GpuRank gpu(options, group);
    const cudaStream_t stream = gpu.stream;
    const workload::RankData& data = expected.data[rank];
    const DeviceInputs in = upload_inputs(data, gpu.device, stream);
    const Tensor y = to_device(expected.ys[rank], gpu.device, stream);
    for (int round = 0; round < 3; ++round) {
      const PoisonedOutputs out = poisoned_device_outputs(c, data.x.size(0), gpu.device, stream);
      const SymmetricReceiveViews views = gpu.buffer->symmetric_receive(c.capacity, c.hidden);
      for (const TensorView* view : {&views.recv_x, &views.recv_x_scales}) {
        if (view->defined())
          check_cuda(cudaMemsetAsync(view->data, kPoison, view->nbytes(), stream),
                     "poison the receive views");
      }
      LowLatencyDispatchArgs args = dispatch_args(c, in.x, in.topk_idx, stream);
      out.attach(args);
      args.out_recv_x = views.recv_x;
      if (views.recv_x_scales.defined()) args.out_recv_x_scales = views.recv_x_scales;
      LowLatencyDispatchResult dispatched = gpu.buffer->symmetric_dispatch(args);
      gpu.buffer->synchronize(stream);
      Outputs got = download(dispatched, stream);
      const std::string label = " (round " + std::to_string(round) + ")";
      const std::string announced = check_push_announced(*gpu.buffer, views, rows_per_expert(c), stream);
      if (!announced.empty()) failures.add(rank, announced + label);
      LowLatencyCombineArgs cargs = combine_args(in.topk_idx, in.topk_weights, dispatched.handle, y, stream);
      out.attach(cargs);
      LowLatencyCombineResult combined = gpu.buffer->symmetric_combine(cargs);
      gpu.buffer->synchronize(stream);
      got.combined_x = to_host(combined.combined_x, stream);
      check_outputs(got, reference_outputs(expected, rank), "reference" + label, rank, failures);
      check_outputs(got, cpu[rank], "cpu engine" + label, rank, failures);
    }
    group.barrier();
  });
  expect_none(failures, seed);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, SymmetricCudaHeapReceive,
    ::testing::Values(with_fp8(make("R2_heap_receive_fp8", 2, {40, 33}, 40, 4, 8, 512), false, false),
                      with_fp8(make("R4_heap_receive_fp8_round_scale", 4, {30, 24, 0, 11}, 32, 4, 16, 1024),
                               true, false),
                      make("R2_heap_receive_bf16", 2, {40, 33}, 40, 4, 8, 520),
                      make("R4_heap_receive_bf16", 4, {30, 24, 0, 11}, 32, 4, 16, 1024)),
    [](const auto& info) { return info.param.name; });

// Combine biases (docs/deep_ep.md, "Combine bias"): the accumulator starts at bias0 + bias1, then the
// weighted slots; bias0, bias1 alone and both, against the reference and the CPU engine.
class SymmetricCudaBiasedCombine : public ::testing::TestWithParam<Case> {};

TEST_P(SymmetricCudaBiasedCombine, CombineWithBiasesMatchesTheReferenceAndTheCpuEngineBitwise) {
  SWITCHYARD_REQUIRE_GPU();
  const Case& c = GetParam();
  SWITCHYARD_REQUIRE_PATH(c);
  const uint64_t seed = seed_for("symmetric_cuda/bias/" + c.name);
  SCOPED_TRACE("case " + c.name + " seed=" + std::to_string(seed));
  const Expected plain = expected_for(c, seed);
  std::vector<Expected> expected;
  std::vector<std::vector<Outputs>> cpu;
  for (auto [first, second] : {std::pair{true, false}, {false, true}, {true, true}}) {
    expected.push_back(with_biases(c, plain, seed, first, second));
    cpu.push_back(run_cpu_engine(Engine::symmetric, c, expected.back()));
  }
  Failures failures;
  run_ranks(c.ranks, [&](Group& group) {
    const int rank = group.rank();
    GpuRank gpu(options_of(c, rank), group);
    for (size_t i = 0; i < expected.size(); ++i) {
      const Outputs got = gpu_round_trip(gpu, c, expected[i], rank, true);
      const std::string which = "biases " + std::to_string(i);
      compare(got.combined_x, expected[i].combined[rank], "combined_x vs the reference, " + which, rank,
              failures);
      compare(got.combined_x, cpu[i][rank].combined_x, "combined_x vs the cpu engine, " + which, rank,
              failures);
    }
    group.barrier();
  });
  expect_none(failures, seed);
}

INSTANTIATE_TEST_SUITE_P(Shapes, SymmetricCudaBiasedCombine,
                         ::testing::ValuesIn(on_both_combine_paths(
                             {make("Small_R1_bf16", 1, {40}, 40, 4, 8, 256),
                              make("R2_zero_tokens_on_rank1", 2, {40, 0}, 40, 4, 8, 512),
                              make("R3_k6_h384", 3, {30, 17, 25}, 32, 6, 12, 384),
                              with_routing(make("R4_all_invalid", 4, {16, 16, 16, 16}, 16, 3, 8, 256),
                                           workload::Routing::all_invalid),
                              make("R8_deepseek_h7168_k8", 8, {48, 41, 48, 0, 33, 48, 12, 48}, 48, 8, 128,
                                   7168)})),
                         [](const auto& info) { return info.param.name; });

// ---- expert_capacity ----------------------------------------------------------------------------

// guarded_outputs on the rank's device, ordered on its stream.
GuardedOutputs guarded_device_outputs(const Case& c, int64_t num_tokens, const GpuRank& gpu) {
  return guarded_outputs(c, num_tokens, [&](DType dtype, std::initializer_list<int64_t> dims) {
    return poisoned_device(dtype, dims, gpu.device, gpu.stream);
  });
}

// Nothing lies in the guard rows past the last expert's capacity.
void check_guards(const GuardedOutputs& guarded, int rank, cudaStream_t stream, Failures& failures) {
  for (const TensorView& guard : guarded.guards()) {
    if (!all_poison_on_device(guard, stream))
      failures.add(rank, "a guard row past the last expert's capacity was written");
  }
}

// One symmetric round trip of `c` (with its capacity) on the GPU into guarded, poisoned outputs: the
// dispatch (then, without an overflow, the combine) against the reference, and the guard rows past
// the last expert's capacity untouched.
void expect_capacity_round_trip(GpuRank& gpu, const Case& c, const Expected& expected, int rank,
                                Failures& failures) {
  const workload::RankData& data = expected.data[rank];
  const cudaStream_t stream = gpu.stream;
  const DeviceInputs in = upload_inputs(data, gpu.device, stream);
  const GuardedOutputs guarded = guarded_device_outputs(c, data.x.size(0), gpu);
  LowLatencyDispatchArgs args = dispatch_args(c, in.x, in.topk_idx, stream);
  guarded.out.attach(args);
  LowLatencyDispatchResult dispatched = gpu.buffer->symmetric_dispatch(args);
  gpu.buffer->synchronize(stream);
  check_dispatch(download(dispatched, stream), expected.dispatched[rank], "reference", rank, failures);
  check_guards(guarded, rank, stream, failures);
  if (expected.ys.empty()) return;
  Tensor y = to_device(expected.ys[rank], gpu.device, stream);
  LowLatencyCombineArgs cargs = combine_args(in.topk_idx, in.topk_weights, dispatched.handle, y, stream);
  guarded.out.attach(cargs);
  gpu.buffer->symmetric_combine(cargs);
  gpu.buffer->synchronize(stream);
  compare(to_host(guarded.out.combined_x, stream), expected.combined[rank], "combined_x vs reference", rank,
          failures);
}

class SymmetricCudaCapacity : public ::testing::TestWithParam<Case> {};

// Outputs [L, C, ...] with C exactly the largest expert's rows, larger, and 1: bitwise the reference's
// with that capacity, and the CPU engine's.
TEST_P(SymmetricCudaCapacity, ExactlyFullLargerAndOneRowMatchTheReferenceAndTheCpuEngineBitwise) {
  SWITCHYARD_REQUIRE_GPU();
  SWITCHYARD_REQUIRE_PATH(GetParam());
  const uint64_t seed = seed_for("symmetric_cuda/capacity/" + GetParam().name);
  for (const CapacityRun& run : capacity_runs(GetParam(), seed)) {
    const Case& c = run.c;
    SCOPED_TRACE(c.name + " capacity " + std::to_string(c.capacity) + " seed=" + std::to_string(seed));
    const Expected expected = expected_from(c, run.data);
    ASSERT_FALSE(expected.overflows);
    const std::vector<Outputs> cpu = run_cpu_engine(Engine::symmetric, c, expected);
    Failures failures;
    run_ranks(c.ranks, [&](Group& group) {
      const int rank = group.rank();
      GpuRank gpu(options_of(c, rank), group);
      // Twice: the second call uses the other heap half.
      for (int round = 0; round < 2; ++round) expect_capacity_round_trip(gpu, c, expected, rank, failures);
      const cudaStream_t stream = gpu.stream;
      const DeviceInputs in = upload_inputs(expected.data[rank], gpu.device, stream);
      LowLatencyDispatchResult dispatched =
          gpu.buffer->symmetric_dispatch(dispatch_args(c, in.x, in.topk_idx, stream));
      gpu.buffer->synchronize(stream);
      check_dispatch(download(dispatched, stream), cpu[rank], "cpu engine", rank, failures);
      group.barrier();
    });
    expect_none(failures, seed);
  }
}

std::vector<Case> capacity_cases() {
  using workload::Routing;
  return {
      // Small enough for compute-sanitizer (the *Small_R1* filter of scripts/gpu-check.sh).
      make("Small_R1_capacity", 1, {24}, 24, 4, 8, 256),
      with_fp8(make("R2_fp8_capacity", 2, {40, 33}, 40, 4, 16, 512), false, false),
      with_routing(make("R4_skewed_capacity", 4, {40, 40, 40, 40}, 40, 4, 16, 512), Routing::skewed),
      make("R8_deepseek_h7168_capacity", 8, {48, 41, 48, 0, 33, 48, 12, 48}, 48, 8, 128, 7168),
  };
}

INSTANTIATE_TEST_SUITE_P(Shapes, SymmetricCudaCapacity,
                         ::testing::ValuesIn(on_both_combine_paths(capacity_cases())),
                         [](const auto& info) { return info.param.name; });

// An expert past its capacity: every rank's synchronize() raises the same CapacityError naming the
// expert, its rank, the rows and the capacity (recorded on the device, no host sync in the call);
// the rows that fit are the reference's and nothing lies past any expert's capacity. A combine with
// that dispatch's handle is refused on every rank alike (nothing pushed or written, CapacityError at
// synchronize), nothing hangs, and the buffer stays usable.
void expect_overflow_refused(const Case& base) {
  const uint64_t seed = seed_for("symmetric_cuda/overflow/" + base.name);
  const std::vector<workload::RankData> data = workload::generate(shape_of(base), seed);
  const int64_t full = max_expert_rows(data, base.num_experts);
  ASSERT_GE(full, 2) << base.name;
  const Case c = with_capacity(base, full - 1);
  SCOPED_TRACE(c.name + " capacity " + std::to_string(c.capacity) + " seed=" + std::to_string(seed));
  const Expected expected = expected_from(c, data);
  ASSERT_TRUE(expected.overflows);
  const Expected unlimited = expected_from(with_capacity(c, 0), data);
  std::vector<std::string> dispatch_messages(c.ranks), combine_messages(c.ranks);
  Failures failures;
  run_ranks(c.ranks, [&](Group& group) {
    const int rank = group.rank();
    GpuRank gpu(options_of(c, rank), group);
    const cudaStream_t stream = gpu.stream;
    const DeviceInputs in = upload_inputs(data[rank], gpu.device, stream);
    const GuardedOutputs guarded = guarded_device_outputs(c, data[rank].x.size(0), gpu);
    LowLatencyDispatchArgs args = dispatch_args(c, in.x, in.topk_idx, stream);
    guarded.out.attach(args);
    LowLatencyDispatchResult dispatched;
    dispatch_messages[rank] = refused<CapacityError>([&] {
      dispatched = gpu.buffer->symmetric_dispatch(args);
      gpu.buffer->synchronize(stream);
    });
    check_dispatch(download(guarded.out, stream), expected.dispatched[rank], "reference", rank, failures);
    check_guards(guarded, rank, stream, failures);
    // The combine of the overflowed dispatch: refused on every rank, combined_x untouched.
    Tensor y =
        poisoned_device(DType::bf16, {c.num_experts / c.ranks, c.capacity, c.hidden}, gpu.device, stream);
    LowLatencyCombineArgs cargs = combine_args(in.topk_idx, in.topk_weights, dispatched.handle, y, stream);
    guarded.out.attach(cargs);
    combine_messages[rank] = refused<CapacityError>([&] {
      gpu.buffer->symmetric_combine(cargs);
      gpu.buffer->synchronize(stream);
    });
    if (!all_poison_on_device(guarded.out.combined_x, stream))
      failures.add(rank, "a refused combine wrote combined_x");
    group.barrier();
    // Still usable: the same inputs without a capacity match the reference.
    LowLatencyDispatchResult again =
        gpu.buffer->symmetric_dispatch(dispatch_args(with_capacity(c, 0), in.x, in.topk_idx, stream));
    gpu.buffer->synchronize(stream);
    check_dispatch(download(again, stream), unlimited.dispatched[rank], "reference (after the overflow)",
                   rank, failures);
    if (!unlimited.ys.empty()) {
      Tensor good_y = to_device(unlimited.ys[rank], gpu.device, stream);
      LowLatencyCombineResult combined = gpu.buffer->symmetric_combine(
          combine_args(in.topk_idx, in.topk_weights, again.handle, good_y, stream));
      gpu.buffer->synchronize(stream);
      compare(to_host(combined.combined_x, stream), unlimited.combined[rank],
              "combined_x (after the overflow)", rank, failures);
    }
    group.barrier();
  });
  expect_none(failures, seed);
  for (int rank = 0; rank < c.ranks; ++rank) {
    const std::string& message = dispatch_messages[rank];
    expect_capacity_error(message, c, data, rank);
    EXPECT_NE(message.find("rank " + std::to_string(rank) + " (cuda symmetric, dispatch)"), std::string::npos)
        << message;
    EXPECT_EQ(combine_messages[rank].rfind("symmetric_combine: refused", 0), 0u) << combine_messages[rank];
    EXPECT_NE(combine_messages[rank].find(overflow_names(c, data)), std::string::npos)
        << combine_messages[rank];
  }
}

TEST_P(SymmetricCudaPaths, Small_R1_OverflowIsCapacityErrorAndWritesNothingPastTheCapacity) {
  SWITCHYARD_REQUIRE_GPU();
  expect_overflow_refused(with_symmetric_combine(
      with_routing(make("Small_R1_overflow", 1, {16}, 16, 2, 4, 256), workload::Routing::skewed),
      GetParam()));
}

TEST_P(SymmetricCudaPaths, EveryRankRaisesTheSameCapacityErrorAndTheCombineIsRefusedOnAll) {
  SWITCHYARD_REQUIRE_GPU();
  const Case r4 = with_symmetric_combine(
      with_routing(make("R4_overflow", 4, {40, 40, 33, 40}, 40, 4, 16, 512), workload::Routing::skewed),
      GetParam());
  SWITCHYARD_REQUIRE_PATH(r4);
  expect_overflow_refused(r4);
  expect_overflow_refused(with_symmetric_combine(
      with_fp8(make("R8_fp8_overflow", 8, {24, 24, 13, 24, 0, 24, 24, 7}, 24, 8, 64, 512), false, false),
      GetParam()));
}

// Graph replay with a capacity: the overflow record is cleared and set on the device on every replay.
TEST_P(SymmetricCudaPaths, ReplaysFromCudaGraphsWithACapacity) {
  SWITCHYARD_REQUIRE_GPU();
  Case c = with_symmetric_combine(make("graph_capacity", 4, {48, 48, 48, 48}, 48, 8, 32, 1024), GetParam());
  SWITCHYARD_REQUIRE_PATH(c);
  constexpr int kRounds = 3;
  std::vector<std::vector<workload::RankData>> drawn;
  int64_t capacity = 1;
  for (int round = 0; round < kRounds; ++round) {
    drawn.push_back(workload::generate(shape_of(c), seed_for("symmetric_cuda/graph_capacity") + round));
    capacity = std::max(capacity, max_expert_rows(drawn.back(), c.num_experts));
  }
  c = with_capacity(c, capacity);
  std::vector<Expected> rounds;
  for (int round = 0; round < kRounds; ++round) rounds.push_back(expected_from(c, drawn[round]));
  Failures failures;
  run_ranks(c.ranks, [&](Group& group) {
    const int rank = group.rank();
    GpuRank gpu(options_of(c, rank), group);
    const cudaStream_t stream = gpu.stream;
    const DeviceInputs in = upload_inputs(rounds[0].data[rank], gpu.device, stream);
    Tensor y =
        poisoned_device(DType::bf16, {c.num_experts / c.ranks, c.capacity, c.hidden}, gpu.device, stream);
    const PoisonedOutputs out =
        poisoned_device_outputs(c, rounds[0].data[rank].x.size(0), gpu.device, stream);
    check_replays(c, rounds, group, gpu, in, y, out, failures);
  });
  expect_none(failures, seed_for("symmetric_cuda/graph_capacity"));
}

// ---- back to back, graphs -----------------------------------------------------------------------

// Two dispatches, then their combines in the other order, with no synchronisation between ranks:
// four barriers per round walk through both signal phases and both signs, and the halves alternate.
TEST_P(SymmetricCudaPaths, BackToBackCallsReuseTheBarrierAndHalvesWithoutRacing) {
  SWITCHYARD_REQUIRE_GPU();
  const Case c =
      with_symmetric_combine(make("back_to_back", 4, {40, 23, 40, 17}, 40, 4, 16, 512), GetParam());
  SWITCHYARD_REQUIRE_PATH(c);
  const uint64_t seed = seed_for("symmetric_cuda/back_to_back");
  const Expected first = expected_for(c, seed);
  const Expected second = expected_for(c, seed + 1);
  Failures failures;
  run_ranks(c.ranks, [&](Group& group) {
    const int rank = group.rank();
    GpuRank gpu(options_of(c, rank), group);
    const cudaStream_t stream = gpu.stream;
    const DeviceInputs a_in = upload_inputs(first.data[rank], gpu.device, stream);
    const DeviceInputs b_in = upload_inputs(second.data[rank], gpu.device, stream);
    Tensor a_y = to_device(first.ys[rank], gpu.device, stream),
           b_y = to_device(second.ys[rank], gpu.device, stream);
    for (int round = 0; round < 6; ++round) {
      LowLatencyDispatchResult a =
          gpu.buffer->symmetric_dispatch(dispatch_args(c, a_in.x, a_in.topk_idx, stream));
      LowLatencyDispatchResult b =
          gpu.buffer->symmetric_dispatch(dispatch_args(c, b_in.x, b_in.topk_idx, stream));
      LowLatencyCombineResult combined_b = gpu.buffer->symmetric_combine(
          combine_args(b_in.topk_idx, b_in.topk_weights, b.handle, b_y, stream));
      LowLatencyCombineResult combined_a = gpu.buffer->symmetric_combine(
          combine_args(a_in.topk_idx, a_in.topk_weights, a.handle, a_y, stream));
      gpu.buffer->synchronize(stream);
      Outputs got_a = download(a, stream);
      got_a.combined_x = to_host(combined_a.combined_x, stream);
      Outputs got_b = download(b, stream);
      got_b.combined_x = to_host(combined_b.combined_x, stream);
      const std::string which = ", round " + std::to_string(round) + ")";
      check_outputs(got_a, reference_outputs(first, rank), "reference (first" + which, rank, failures);
      check_outputs(got_b, reference_outputs(second, rank), "reference (second" + which, rank, failures);
    }
    group.barrier();
  });
  expect_none(failures, seed);
}

// Programmatic dependent launch (cuda/backend/dependent_launch.hpp, SWITCHYARD_DEPENDENT_LAUNCH=on): the
// dispatch and the combine start as soon as the stream's previous kernel lets them, so they must read nothing
// before that kernel is done. Here that kernel triggers its dependents at once and writes x and topk_idx
// (before the dispatch) or y (before the combine) only ~300 us later, over 0xFF bytes: a call that read its
// inputs before ptx::wait_for_previous_grid() would route by -1 ids and move NaN rows, and miss the
// reference. With the launch off (the default) it checks the ordinary order. Not for compute-sanitizer: under
// memcheck the dispatch did read early here (session 49; the tool's handling of an early trigger, as far as
// is known).
TEST_P(SymmetricCudaPaths, InputsThePreviousKernelWritesLateAreWhatTheCallsRead) {
  SWITCHYARD_REQUIRE_GPU();
  const Case c = with_symmetric_combine(make("late_inputs", 4, {40, 23, 40, 17}, 40, 4, 16, 512), GetParam());
  SWITCHYARD_REQUIRE_PATH(c);
  const uint64_t seed = seed_for("symmetric_cuda/late_inputs");
  const Expected expected = expected_for(c, seed);
  constexpr uint64_t kLateNs = 300'000;
  Failures failures;
  run_ranks(c.ranks, [&](Group& group) {
    const int rank = group.rank();
    GpuRank gpu(options_of(c, rank), group);
    const cudaStream_t stream = gpu.stream;
    const DeviceInputs truth = upload_inputs(expected.data[rank], gpu.device, stream);
    const Tensor true_y = to_device(expected.ys[rank], gpu.device, stream);
    // The tensors the calls read, 0xFF until the late copies write them.
    const DeviceInputs in = upload_inputs(expected.data[rank], gpu.device, stream);
    const Tensor y = to_device(expected.ys[rank], gpu.device, stream);
    for (const Tensor* late : {&in.x, &in.topk_idx, &y}) {
      ASSERT_EQ(cudaMemsetAsync(late->data(), 0xFF, late->nbytes(), stream), cudaSuccess);
    }
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    group.barrier();
    for (int round = 0; round < 2; ++round) {
      testing::enqueue_late_copy(in.x.data(), truth.x.data(), in.x.nbytes(), kLateNs, stream);
      testing::enqueue_late_copy(in.topk_idx.data(), truth.topk_idx.data(), in.topk_idx.nbytes(), kLateNs,
                                 stream);
      LowLatencyDispatchResult dispatched =
          gpu.buffer->symmetric_dispatch(dispatch_args(c, in.x, in.topk_idx, stream));
      testing::enqueue_late_copy(y.data(), true_y.data(), y.nbytes(), kLateNs, stream);
      LowLatencyCombineResult combined = gpu.buffer->symmetric_combine(
          combine_args(truth.topk_idx, truth.topk_weights, dispatched.handle, y, stream));
      gpu.buffer->synchronize(stream);
      Outputs got = download(dispatched, stream);
      got.combined_x = to_host(combined.combined_x, stream);
      check_outputs(got, reference_outputs(expected, rank), "reference (round " + std::to_string(round) + ")",
                    rank, failures);
      // Poison again for the next round, after this round's calls are done with the inputs.
      for (const Tensor* late : {&in.x, &in.topk_idx, &y}) {
        ASSERT_EQ(cudaMemsetAsync(late->data(), 0xFF, late->nbytes(), stream), cudaSuccess);
      }
      ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
      group.barrier();
    }
  });
  expect_none(failures, seed);
}

// Three rounds of new routing replayed from graphs captured once (check_replays), on every rank;
// `poison_x`: x poisoned on the stream right behind every replayed dispatch.
void run_graph_replays(const Case& c, const std::string& seed_name, bool poison_x) {
  constexpr int kRounds = 3;
  std::vector<Expected> rounds;
  for (int round = 0; round < kRounds; ++round)
    rounds.push_back(expected_for(c, seed_for(seed_name) + round));
  Failures failures;
  run_ranks(c.ranks, [&](Group& group) {
    const int rank = group.rank();
    GpuRank gpu(options_of(c, rank), group);
    const cudaStream_t stream = gpu.stream;
    const int64_t local = c.num_experts / c.ranks;
    const int64_t rows = c.ranks * c.max_tokens;
    const workload::RankData& data = rounds[0].data[rank];
    const DeviceInputs in = upload_inputs(data, gpu.device, stream);
    Tensor y = poisoned_device(DType::bf16, {local, rows, c.hidden}, gpu.device, stream);
    const PoisonedOutputs out = poisoned_device_outputs(c, data.x.size(0), gpu.device, stream);
    check_replays(c, rounds, group, gpu, in, y, out, failures, poison_x);
  });
  expect_none(failures, seed_for(seed_name));
}

// No host synchronisation: dispatch and combine are captured in CUDA graphs once and replayed with
// new inputs (new routing) uploaded into the same device tensors; every replay matches the
// reference (the heap half and barrier phase advance on the device, not in the captured arguments).
TEST_P(SymmetricCudaPaths, DispatchAndCombineReplayFromCudaGraphsWithNewRouting) {
  SWITCHYARD_REQUIRE_GPU();
  const Case c = with_symmetric_combine(make("graph", 4, {48, 48, 48, 48}, 48, 8, 32, 1024), GetParam());
  SWITCHYARD_REQUIRE_PATH(c);
  run_graph_replays(c, "symmetric_cuda/graph", /*poison_x=*/false);
}

// One Buffer serves the symmetric and normal engines in turn: a whole normal round trip between a
// symmetric dispatch and its combine (their grids are sized independently; see the report).
TEST_P(SymmetricCudaPaths, InterleavesWithTheNormalEngineOnOneBuffer) {
  SWITCHYARD_REQUIRE_GPU();
  const Case c = with_symmetric_combine(make("interleaved", 2, {48, 48}, 48, 4, 8, 512), GetParam());
  SWITCHYARD_REQUIRE_PATH(c);
  const workload::Shape shape = shape_of(c);
  const uint64_t seed = seed_for("symmetric_cuda/interleaved");
  const std::vector<workload::RankData> normal_data = workload::generate(shape, seed);
  const testing::Expected normal_expected = compute_expected(shape, normal_data, 1);
  const Expected expected = expected_for(c, seed);
  std::mutex mutex;
  std::vector<std::string> normal_failures;
  Failures failures;
  run_ranks(2, [&](Group& group) {
    const int rank = group.rank();
    BufferOptions options = options_of(c, rank);
    options.sizing = sizing_for(shape);
    options.sizing.symmetric_max_tokens_per_rank = c.max_tokens;
    GpuRank gpu(options, group);
    const cudaStream_t stream = gpu.stream;
    const DeviceInputs in = upload_inputs(expected.data[rank], gpu.device, stream);
    Tensor y = to_device(expected.ys[rank], gpu.device, stream);
    for (int round = 0; round < 2; ++round) {
      LowLatencyDispatchResult dispatched =
          gpu.buffer->symmetric_dispatch(dispatch_args(c, in.x, in.topk_idx, stream));
      DeviceRun run = run_on_device(*gpu.buffer, shape, normal_data[rank], normal_expected, 1, stream);
      std::vector<std::string> mine;
      compare_with_reference(run, shape, normal_expected, rank, &mine);
      LowLatencyCombineResult combined = gpu.buffer->symmetric_combine(
          combine_args(in.topk_idx, in.topk_weights, dispatched.handle, y, stream));
      gpu.buffer->synchronize(stream);
      Outputs got = download(dispatched, stream);
      got.combined_x = to_host(combined.combined_x, stream);
      check_outputs(got, reference_outputs(expected, rank), "reference (round " + std::to_string(round) + ")",
                    rank, failures);
      std::lock_guard<std::mutex> lock(mutex);
      normal_failures.insert(normal_failures.end(), mine.begin(), mine.end());
    }
    group.barrier();
  });
  for (const auto& line : normal_failures) ADD_FAILURE() << "normal: " << line;
  expect_none(failures, seed);
}

// ---- timeouts -----------------------------------------------------------------------------------

// Rank 0 dispatches (and with `combine`, combines) while rank 1 makes only the dispatch (with
// `combine`) or no call at all; returns what rank 0 caught, and whether its buffer refused work
// afterwards.
std::string timeout_message(bool combine, bool* refused_after,
                            SymmetricCombine path = SymmetricCombine::automatic,
                            SymmetricDispatch source = SymmetricDispatch::automatic) {
  constexpr double kTimeout = 1.0;
  const Case c = with_symmetric_dispatch(
      with_symmetric_combine(make("timeout", 2, {16, 16}, 16, 2, 4, 256), path), source);
  const Expected expected = expected_for(c, seed_for("symmetric_cuda/timeout"));
  PeerGate gate;
  Caught caught;
  run_ranks(2, [&](Group& group) {
    const int rank = group.rank();
    GpuRank gpu(options_of(c, rank, kTimeout), group);
    const cudaStream_t stream = gpu.stream;
    const DeviceInputs in = upload_inputs(expected.data[rank], gpu.device, stream);
    Tensor y = to_device(expected.ys[rank], gpu.device, stream);
    if (rank == 1) {
      if (combine) {
        gpu.buffer->symmetric_dispatch(dispatch_args(c, in.x, in.topk_idx, stream));
        gpu.buffer->synchronize(stream);
      }
      gate.wait();  // makes no (further) call
      return;
    }
    const auto opener = gate.open_on_exit();
    caught = catch_timeout([&] {
      LowLatencyDispatchResult dispatched =
          gpu.buffer->symmetric_dispatch(dispatch_args(c, in.x, in.topk_idx, stream));
      if (combine) {
        gpu.buffer->synchronize(stream);
        gpu.buffer->symmetric_combine(
            combine_args(in.topk_idx, in.topk_weights, dispatched.handle, y, stream));
      }
      gpu.buffer->synchronize(stream);
    });
    *refused_after = refused_after_timeout(
        [&] { gpu.buffer->symmetric_dispatch(dispatch_args(c, in.x, in.topk_idx, stream)); });
  });
  expect_timed_out(caught, kTimeout, 20.0);
  return caught.message;
}

// Zero-copy: rank 0 arrived at the barrier, so it also waits (bounded) for rank 1's done word before
// the kernel ends; the first failure (the barrier) is the one reported.
TEST_P(SymmetricCudaSources, DispatchWithoutItsPeerTimesOutNamingRankRoleAndTheMissingRank) {
  SWITCHYARD_REQUIRE_GPU();
  SWITCHYARD_REQUIRE_PATH(with_symmetric_dispatch(make("timeout", 2, {16, 16}, 16, 2, 4, 256), GetParam()));
  bool refused_after = false;
  const std::string message = timeout_message(false, &refused_after, SymmetricCombine::automatic, GetParam());
  SCOPED_TRACE("message: " + message);
  EXPECT_NE(message.find("rank 0 (cuda symmetric, dispatch)"), std::string::npos);
  EXPECT_NE(message.find("timed out"), std::string::npos);
  EXPECT_NE(message.find("barrier from rank 1"), std::string::npos);
  EXPECT_TRUE(refused_after);
}

TEST_P(SymmetricCudaPaths, CombineWithoutItsPeerTimesOutNamingRankRoleAndTheMissingRank) {
  SWITCHYARD_REQUIRE_GPU();
  SWITCHYARD_REQUIRE_PATH(with_symmetric_combine(make("timeout", 2, {16, 16}, 16, 2, 4, 256), GetParam()));
  bool refused_after = false;
  const std::string message = timeout_message(true, &refused_after, GetParam());
  SCOPED_TRACE("message: " + message);
  EXPECT_NE(message.find("rank 0 (cuda symmetric, combine)"), std::string::npos);
  EXPECT_NE(message.find("timed out"), std::string::npos);
  if (GetParam() == SymmetricCombine::pull) {
    // No barrier on the pull path: rank 0 waits for rank 1 to announce its y.
    EXPECT_NE(message.find("pull record"), std::string::npos);
    EXPECT_NE(message.find("from rank 1"), std::string::npos);
  } else {
    EXPECT_NE(message.find("barrier from rank 1"), std::string::npos);
  }
  EXPECT_TRUE(refused_after);
}

// ---- the pull combine's lifetime and path ------------------------------------------------------------

// The caller may overwrite y on its stream as soon as combine returns: a rank with few tokens finishes
// its own reduction early, poisons its y right behind the combine on its stream, and the peers, still
// reading that y on the pull path, must not see it (the combine kernel ends only after every peer has
// released its done word). Every rank's output stays the reference's, round after round.
// The caller's out_layout_range and out_src_info are borrowed for the dispatch only: overwritten and
// freed before the combine, they must not change how it routes.
TEST_P(SymmetricCudaPaths, CombineRoutesAsDispatchedAfterTheCallersOutputsWereFreed) {
  SWITCHYARD_REQUIRE_GPU();
  const Case c = with_symmetric_combine(make("freed_outputs", 4, {8, 5, 8, 1}, 8, 4, 16, 512), GetParam());
  SWITCHYARD_REQUIRE_PATH(c);
  const uint64_t seed = seed_for("symmetric_cuda/freed_outputs");
  const Expected expected = expected_for(c, seed);
  Failures failures;
  run_ranks(c.ranks, [&](Group& group) {
    const int rank = group.rank();
    GpuRank gpu(options_of(c, rank), group);
    check_combine_after_the_callers_outputs_were_freed(Engine::symmetric, c, expected, false, rank,
                                                       *gpu.buffer, gpu.stream, failures);
    group.barrier();
  });
  expect_none(failures, seed);
}

TEST_P(SymmetricCudaPaths, ExpertOutputsMayBeOverwrittenOnTheStreamRightAfterCombine) {
  SWITCHYARD_REQUIRE_GPU();
  const Case c =
      with_symmetric_combine(make("overwrite_y", 4, {2, 256, 256, 256}, 256, 8, 32, 7168), GetParam());
  SWITCHYARD_REQUIRE_PATH(c);
  const uint64_t seed = seed_for("symmetric_cuda/overwrite_y");
  const Expected expected = expected_for(c, seed);
  Failures failures;
  run_ranks(c.ranks, [&](Group& group) {
    const int rank = group.rank();
    GpuRank gpu(options_of(c, rank), group);
    const cudaStream_t stream = gpu.stream;
    const DeviceInputs in = upload_inputs(expected.data[rank], gpu.device, stream);
    for (int round = 0; round < 4; ++round) {
      Tensor y = to_device(expected.ys[rank], gpu.device, stream);
      LowLatencyDispatchResult dispatched =
          gpu.buffer->symmetric_dispatch(dispatch_args(c, in.x, in.topk_idx, stream));
      LowLatencyCombineResult combined = gpu.buffer->symmetric_combine(
          combine_args(in.topk_idx, in.topk_weights, dispatched.handle, y, stream));
      if (cudaMemsetAsync(y.data(), kPoison, y.nbytes(), stream) != cudaSuccess)
        failures.add(rank, "poisoning y failed");
      gpu.buffer->synchronize(stream);
      compare(to_host(combined.combined_x, stream), expected.combined[rank],
              "combined_x (round " + std::to_string(round) + ")", rank, failures);
    }
    group.barrier();
  });
  expect_none(failures, seed);
}

// The caller may overwrite x on its stream as soon as dispatch returns: a rank that receives few rows
// finishes its own pulls early and poisons its x right behind the dispatch on its stream, while the
// peers may still be pulling its rows in place (zero-copy; the dispatch kernel ends only after every
// peer has released its done word). Every rank's outputs stay the reference's, round after round.
TEST_P(SymmetricCudaSources, TokensMayBeOverwrittenOnTheStreamRightAfterDispatch) {
  SWITCHYARD_REQUIRE_GPU();
  const Case c = with_routing(
      with_symmetric_dispatch(make("overwrite_x", 4, {256, 256, 256, 256}, 256, 8, 32, 7168), GetParam()),
      workload::Routing::skewed);
  SWITCHYARD_REQUIRE_PATH(c);
  const uint64_t seed = seed_for("symmetric_cuda/overwrite_x");
  const Expected expected = expected_for(c, seed);
  Failures failures;
  run_ranks(c.ranks, [&](Group& group) {
    const int rank = group.rank();
    GpuRank gpu(options_of(c, rank), group);
    const cudaStream_t stream = gpu.stream;
    if (gpu.buffer->symmetric_dispatch_path() != GetParam())
      failures.add(rank, "symmetric_dispatch_path differs");
    for (int round = 0; round < 4; ++round) {
      const DeviceInputs in = upload_inputs(expected.data[rank], gpu.device, stream);
      LowLatencyDispatchResult dispatched =
          gpu.buffer->symmetric_dispatch(dispatch_args(c, in.x, in.topk_idx, stream));
      if (cudaMemsetAsync(in.x.data(), kPoison, in.x.nbytes(), stream) != cudaSuccess) {
        failures.add(rank, "poisoning x failed");
      }
      gpu.buffer->synchronize(stream);
      check_dispatch(download(dispatched, stream), expected.dispatched[rank],
                     "reference (round " + std::to_string(round) + ")", rank, failures);
    }
    group.barrier();
  });
  expect_none(failures, seed);
}

// Graph replay on both dispatch sources: x is rewritten in place before every replay (the captured
// kernel argument is its address; the sequence advances on the device), and poisoned right behind
// every replayed dispatch.
TEST_P(SymmetricCudaSources, ReplaysFromCudaGraphsWithXRewrittenInPlace) {
  SWITCHYARD_REQUIRE_GPU();
  const Case c = with_symmetric_dispatch(make("graph_x", 4, {48, 48, 48, 48}, 48, 8, 32, 1024), GetParam());
  SWITCHYARD_REQUIRE_PATH(c);
  run_graph_replays(c, "symmetric_cuda/graph_x", /*poison_x=*/true);
}

// bf16 dispatches with every rank a thread on one GPU: under config.symmetric_dispatch auto every source
// pushes its rows into the receivers' outputs (each receiver's record announces them at their address), and a
// named zero_copy or publish keeps the pull (announced: nothing to push into); both bitwise the reference's.
// SWITCHYARD_SYMMETRIC_PULL=tma|warps turns the push off (gpu-check runs the suite so).
TEST(SymmetricCudaPath, Bf16DispatchesPushUnderAutoWithEveryRankOnOneGpu) {
  SWITCHYARD_REQUIRE_GPU();
  const Case base = make("bf16_push", 4, {24, 17, 0, 24}, 24, 4, 16, 512);
  if (!on_one_device(base)) GTEST_SKIP() << "SWITCHYARD_TEST_DEVICES spreads the ranks over GPUs";
  const cuda::SymmetricPull pull = cuda::symmetric_pull_from_environment();
  const bool push_on = pull == cuda::SymmetricPull::automatic || pull == cuda::SymmetricPull::push;
  for (SymmetricDispatch source :
       {SymmetricDispatch::automatic, SymmetricDispatch::zero_copy, SymmetricDispatch::publish}) {
    const Case c = with_symmetric_dispatch(base, source);
    SCOPED_TRACE(std::string("config.symmetric_dispatch ") + symmetric_dispatch_name(source));
    const uint64_t seed =
        seed_for("symmetric_cuda/bf16_push/" + std::string(symmetric_dispatch_name(source)));
    const Expected expected = expected_for(c, seed);
    const bool pushes = push_on && source == SymmetricDispatch::automatic;
    Failures failures;
    run_ranks(c.ranks, [&](Group& group) {
      const int rank = group.rank();
      GpuRank gpu(options_of(c, rank), group);
      for (int round = 0; round < 2; ++round) {
        const Outputs got = gpu_round_trip(gpu, c, expected, rank, round == 1);
        check_outputs(got, reference_outputs(expected, rank),
                      "reference (round " + std::to_string(round) + ")", rank, failures);
        const common::SymmetricRowsAt at = latest_source_record(*gpu.buffer, gpu.stream).recv_at;
        const common::SymmetricRowsAt want =
            pushes ? common::SymmetricRowsAt::address : common::SymmetricRowsAt::input_buffer;
        if (at != want) {
          failures.add(rank, "recv_at " + std::to_string(static_cast<uint32_t>(at)) + ", expected " +
                                 std::to_string(static_cast<uint32_t>(want)) + " (round " +
                                 std::to_string(round) + ")");
        }
      }
      group.barrier();
    });
    expect_none(failures, seed);
  }
}

TEST(SymmetricCudaPath, AutoPullsAndCopiesNothingWithEveryRankOnOneGpu) {
  SWITCHYARD_REQUIRE_GPU();
  const Case c = make("auto_path", 2, {8, 8}, 8, 2, 4, 256);
  if (!on_one_device(c)) GTEST_SKIP() << "SWITCHYARD_TEST_DEVICES spreads the ranks over GPUs";
  std::vector<SymmetricCombine> paths(c.ranks, SymmetricCombine::automatic);
  std::vector<SymmetricDispatch> sources(c.ranks, SymmetricDispatch::automatic);
  run_ranks(c.ranks, [&](Group& group) {
    GpuRank gpu(options_of(c, group.rank()), group);
    paths[group.rank()] = gpu.buffer->symmetric_combine_path();
    sources[group.rank()] = gpu.buffer->symmetric_dispatch_path();
    group.barrier();
  });
  for (SymmetricCombine path : paths) EXPECT_EQ(path, SymmetricCombine::pull);
  // The push where SWITCHYARD_SYMMETRIC_PULL leaves it on (gpu-check also runs the suite with it naming a
  // pull).
  const cuda::SymmetricPull pull = cuda::symmetric_pull_from_environment();
  const SymmetricDispatch expected =
      pull == cuda::SymmetricPull::automatic || pull == cuda::SymmetricPull::push
          ? SymmetricDispatch::push
          : SymmetricDispatch::zero_copy;
  for (SymmetricDispatch source : sources) EXPECT_EQ(source, expected);
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
    GpuRank gpu(options_of(c, rank), group);
    const cudaStream_t stream = gpu.stream;
    Tensor ids = Tensor::empty(DType::i64, {expected.data[rank].topk_idx.size(0), c.topk});
    std::memcpy(ids.data(), expected.data[rank].topk_idx.data(), ids.nbytes());
    if (rank == bad_rank) spoil(ids.as<int64_t>());
    Tensor x = to_device(expected.data[rank].x, gpu.device, stream);
    Tensor topk_idx = to_device(ids, gpu.device, stream);
    const PoisonedOutputs out = poisoned_device_outputs(c, expected.data[rank].x.size(0), gpu.device, stream);
    LowLatencyDispatchArgs args = dispatch_args(c, x, topk_idx, stream);
    out.attach(args);
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
    for (const Tensor& output : out.dispatch_outputs()) {
      Tensor host = to_host(output, stream);
      for (size_t i = 0; i < host.nbytes(); ++i) {
        if (host.as<uint8_t>()[i] != kPoison) {
          failures.add(rank, "an output was written at byte " + std::to_string(i) + " of a refused call");
          break;
        }
      }
    }
    group.barrier();
    // Still usable: a good call matches the reference.
    Tensor good_idx = to_device(expected.data[rank].topk_idx, gpu.device, stream);
    LowLatencyDispatchResult again = gpu.buffer->symmetric_dispatch(dispatch_args(c, x, good_idx, stream));
    gpu.buffer->synchronize(stream);
    check_dispatch(download(again, stream), expected.dispatched[rank], "reference (after the refused call)",
                   rank, failures);
    group.barrier();
  });
  expect_none(failures, seed);
}

TEST(SymmetricCudaErrors, Small_R1_ExpertIdOutOfRangeIsInvalidArgumentAndWritesNothing) {
  SWITCHYARD_REQUIRE_GPU();
  expect_refused_on_device(make("Small_R1_bad_expert", 1, {16}, 16, 2, 4, 256), 0,
                           [](int64_t* ids) { ids[5] = 4; });  // == num_experts
}

TEST(SymmetricCudaErrors, ExpertIdOutOfRangeOnOneRankLeavesEveryRanksOutputsUntouched) {
  SWITCHYARD_REQUIRE_GPU();
  expect_refused_on_device(make("R2_bad_expert", 2, {16, 16}, 16, 2, 4, 256), 0,
                           [](int64_t* ids) { ids[3] = -2; });
}

TEST(SymmetricCudaErrors, MoreRowsForOneExpertThanMaxTokensIsRefused) {
  SWITCHYARD_REQUIRE_GPU();
  // Five rows of expert 1 from one rank; max_tokens_per_rank is 4.
  expect_refused_on_device(make("R1_over_capacity", 1, {4}, 4, 2, 4, 256), 0, [](int64_t* ids) {
    for (int i = 0; i < 5; ++i) ids[i] = 1;
  });
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

TEST(SymmetricCudaGrid, StoreReadLagOverrideIsReadFromTheEnvironmentAndBadValuesAreNamed) {
  // Pure arithmetic: no GPU needed.
  const ScopedEnvironment variable("SWITCHYARD_SYMMETRIC_STORE_READ_LAG");
  EXPECT_EQ(cuda::store_read_lag_from_environment(), 0u);
  variable.set("6");
  EXPECT_EQ(cuda::store_read_lag_from_environment(), 6u);
  expect_refused_by_name(variable, {"0", "17", "4x", "-1", "lots"},
                         "SWITCHYARD_SYMMETRIC_STORE_READ_LAG: expected an integer 1..16",
                         [] { cuda::store_read_lag_from_environment(); });
}

TEST(SymmetricCudaGrid, PullOverrideIsReadFromTheEnvironmentAndBadValuesAreNamed) {
  // Pure parsing: no GPU needed. The suite runs as it is (fp8 pushed where every rank is a thread on one
  // GPU, else pulled by warps; bf16 pulled by TMA) and with SWITCHYARD_SYMMETRIC_PULL=warps and =tma
  // (scripts/gpu-check.sh), so the push and both pulls are checked bitwise.
  const ScopedEnvironment variable("SWITCHYARD_SYMMETRIC_PULL");
  EXPECT_EQ(cuda::symmetric_pull_from_environment(), cuda::SymmetricPull::automatic);
  EXPECT_TRUE(cuda::symmetric_pull_by_warps(cuda::SymmetricPull::automatic, true));
  EXPECT_FALSE(cuda::symmetric_pull_by_warps(cuda::SymmetricPull::automatic, false));
  EXPECT_TRUE(cuda::symmetric_pull_by_warps(cuda::SymmetricPull::warps, false));
  EXPECT_FALSE(cuda::symmetric_pull_by_warps(cuda::SymmetricPull::tma, true));
  // push: fp8 calls that cannot push are pulled as automatic pulls them.
  EXPECT_TRUE(cuda::symmetric_pull_by_warps(cuda::SymmetricPull::push, true));
  EXPECT_FALSE(cuda::symmetric_pull_by_warps(cuda::SymmetricPull::push, false));
  variable.set("push");
  EXPECT_EQ(cuda::symmetric_pull_from_environment(), cuda::SymmetricPull::push);
  variable.set("warps");
  EXPECT_EQ(cuda::symmetric_pull_from_environment(), cuda::SymmetricPull::warps);
  variable.set("tma");
  EXPECT_EQ(cuda::symmetric_pull_from_environment(), cuda::SymmetricPull::tma);
  expect_refused_by_name(variable, {"warp", "TMA", "1"},
                         "SWITCHYARD_SYMMETRIC_PULL: expected tma, warps or push",
                         [] { cuda::symmetric_pull_from_environment(); });
}

TEST(SymmetricCudaGrid, RoutingBlocksFollowTheCallsPairsAndTheOverrideIsNamedWhenMalformed) {
  // Pure arithmetic and parsing: no GPU needed. The suite runs as it is (nearly every case's pairs fit one
  // batch of block 0's routing warps, so block 0 routes alone; R2_many_tokens_routing_waves routes in every
  // block) and with SWITCHYARD_SYMMETRIC_ROUTING=every (scripts/gpu-check.sh), so both are checked bitwise.
  const ScopedEnvironment variable("SWITCHYARD_SYMMETRIC_ROUTING");
  EXPECT_EQ(cuda::symmetric_routing_from_environment(), cuda::SymmetricRouting::automatic);
  const auto automatic = cuda::SymmetricRouting::automatic;
  // 14 routing warps walk 14 * 32 * kRoutingBatch pairs in one batch of loads.
  const int64_t one_batch = 14 * 32 * cuda::kRoutingBatch;
  EXPECT_EQ(cuda::symmetric_routing_blocks(automatic, false, 128 * 8, 132, 14), 1);  // one rank, decode
  EXPECT_EQ(cuda::symmetric_routing_blocks(automatic, false, one_batch, 16, 14), 1);
  EXPECT_EQ(cuda::symmetric_routing_blocks(automatic, false, one_batch + 1, 16, 14), 16);
  EXPECT_EQ(cuda::symmetric_routing_blocks(automatic, false, 4096 * 8, 16, 14), 16);  // prefill
  EXPECT_EQ(cuda::symmetric_routing_blocks(automatic, false, 0, 16, 14), 1);
  // The bf16 publish's pipeline keeps the other blocks busy: block 0 alone, whatever the override.
  EXPECT_EQ(cuda::symmetric_routing_blocks(automatic, true, 4096 * 8, 16, 14), 1);
  EXPECT_EQ(cuda::symmetric_routing_blocks(cuda::SymmetricRouting::every_block, true, 4096 * 8, 16, 14), 1);
  EXPECT_EQ(cuda::symmetric_routing_blocks(cuda::SymmetricRouting::every_block, false, 8, 16, 14), 16);
  EXPECT_EQ(cuda::symmetric_routing_blocks(cuda::SymmetricRouting::one_block, false, 4096 * 8, 16, 14), 1);
  variable.set("every");
  EXPECT_EQ(cuda::symmetric_routing_from_environment(), cuda::SymmetricRouting::every_block);
  variable.set("one");
  EXPECT_EQ(cuda::symmetric_routing_from_environment(), cuda::SymmetricRouting::one_block);
  variable.set("auto");
  EXPECT_EQ(cuda::symmetric_routing_from_environment(), automatic);
  expect_refused_by_name(variable, {"all", "ONE", "1"},
                         "SWITCHYARD_SYMMETRIC_ROUTING: expected auto, one or every",
                         [] { cuda::symmetric_routing_from_environment(); });
}

TEST(SymmetricCudaGrid, SignalScopeIsGpuOnlyWhereEveryRankIsOnThisGpuAndBadValuesAreNamed) {
  // Pure parsing: no GPU needed. The GPU suites run with the default (GPU scope where every rank shares the
  // GPU) and with SWITCHYARD_SIGNAL_SCOPE=sys (scripts/gpu-check.sh runs the engines' suites both ways).
  const ScopedEnvironment variable("SWITCHYARD_SIGNAL_SCOPE");
  EXPECT_TRUE(cuda::gpu_scope_signals_allowed_by_environment());
  variable.set("gpu");
  EXPECT_TRUE(cuda::gpu_scope_signals_allowed_by_environment());
  variable.set("sys");
  EXPECT_FALSE(cuda::gpu_scope_signals_allowed_by_environment());
  expect_refused_by_name(variable, {"GPU", "system", "1"}, "SWITCHYARD_SIGNAL_SCOPE: expected gpu or sys",
                         [] { cuda::gpu_scope_signals_allowed_by_environment(); });
  // Every rank on this GPU, allowed: GPU scope; a rank elsewhere (another GPU or node), or sys: system scope.
  EXPECT_TRUE(cuda::signals_at_gpu_scope(true, 8, 8));
  EXPECT_FALSE(cuda::signals_at_gpu_scope(true, 4, 8));
  EXPECT_FALSE(cuda::signals_at_gpu_scope(false, 8, 8));
  EXPECT_TRUE(cuda::signals_at_gpu_scope(true, 1, 1));
}

TEST(DependentLaunch, OffByDefaultOnOnRequestAndBadValuesAreNamed) {
  // Pure parsing: no GPU needed. The GPU suites run with the default (off); gpu-check runs the engines'
  // suites with SWITCHYARD_DEPENDENT_LAUNCH=on too.
  const ScopedEnvironment variable("SWITCHYARD_DEPENDENT_LAUNCH");
  EXPECT_FALSE(cuda::dependent_launch_from_environment());
  variable.set("on");
  EXPECT_TRUE(cuda::dependent_launch_from_environment());
  variable.set("off");
  EXPECT_FALSE(cuda::dependent_launch_from_environment());
  expect_refused_by_name(variable, {"ON", "0", "false"}, "SWITCHYARD_DEPENDENT_LAUNCH: expected on or off",
                         [] { cuda::dependent_launch_from_environment(); });
}

TEST(SymmetricCudaGrid, PieceBytesOverrideSplitsRowsAndBadValuesAreNamed) {
  // Pure arithmetic: no GPU needed.
  {
    const ScopedEnvironment variable("SWITCHYARD_SYMMETRIC_PIECE_BYTES");
    EXPECT_EQ(cuda::piece_bytes_from_environment(), 0u);
    variable.set("3584");
    EXPECT_EQ(cuda::piece_bytes_from_environment(), 3584u);
    expect_refused_by_name(
        variable, {"0", "1000", "1032x", "40000", "3585", "-16"},
        "SWITCHYARD_SYMMETRIC_PIECE_BYTES: expected an integer 1024..32768 and a multiple of 16",
        [] { cuda::piece_bytes_from_environment(); });
  }
  // An fp8 DeepSeek row in two pieces: stages sized for half a row and the scales, so about twice as many.
  const cuda::SymmetricGrid whole = cuda::symmetric_grid(16, 8, 32, 7168, 56 * 4, true);
  const cuda::SymmetricGrid halves = cuda::symmetric_grid(16, 8, 32, 7168, 56 * 4, true, 0, 3584);
  EXPECT_EQ(whole.piece_bytes, 7168u);
  EXPECT_EQ(halves.piece_bytes, 3584u);
  EXPECT_GE(halves.stage_bytes, 3584u + 56 * 4);
  EXPECT_GT(halves.stages, whole.stages);
  // A piece larger than the row is the row.
  EXPECT_EQ(cuda::symmetric_grid(16, 8, 32, 2048, 0, true, 0, 4096).piece_bytes, 2048u);
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
  // Half the stages keep stores reading shared memory by default, the other half loads; an explicit lag
  // stays below the stages.
  EXPECT_EQ(dispatch.store_read_lag, cuda::default_store_read_lag(dispatch.stages));
  EXPECT_EQ(fp8.store_read_lag, static_cast<uint32_t>((fp8.stages - 1) / 2));
  EXPECT_GE(fp8.store_read_lag, 2u * dispatch.store_read_lag - 1);
  EXPECT_EQ(cuda::symmetric_grid(16, 8, 32, 7168, 56 * 4, true, 3).store_read_lag, 3u);
  EXPECT_EQ(cuda::symmetric_grid(16, 2, 2, 40960, 0, false, cuda::kMaxStoreReadLag).store_read_lag,
            static_cast<uint32_t>(cuda::symmetric_grid(16, 2, 2, 40960, 0, false).stages - 1));
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
  // NOTES: the worst case, all eight ranks sharing one GPU; device 0 stands for the machine's GPUs.
  constexpr int kDevice = 0;
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
}  // namespace switchyard::testing::expert_major
