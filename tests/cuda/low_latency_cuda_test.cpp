// The CUDA `low_latency` engine, bit for bit against the reference and against the CPU engine: R
// ranks as threads of this process, each with its own non-blocking stream, on the GPUs
// SWITCHYARD_TEST_DEVICES picks (cuda/rank_device.hpp; default: all on GPU 0).
// Expert-major dispatch (bf16, fp8, round_scale, ue8m0), the weighted FMA combine, hooks, the
// double buffer, CUDA graph replay with new routing, zero-copy combine, bad input and timeouts.
// Skipped (reported as skipped) where no GPU is present. The cases named Small_R1 are the ones
// compute-sanitizer runs (one rank: the sanitizer serialises kernels, so ranks could not meet).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "cuda/device_fp8_cast_check.hpp"
#include "cuda/device_tensors.hpp"
#include "cuda/expert_major_round_trip.hpp"
#include "cuda/freed_outputs_round_trip.hpp"
#include "cuda/low_latency_modes.hpp"
#include "cuda/rank_device.hpp"
#include "support/expert_major_gtest.hpp"
#include "support/test_seed.hpp"
#include "support/wait_cost_check.hpp"
#include "switchyard/buffer.hpp"
#include "switchyard/errors.hpp"
#include "switchyard/group.hpp"
#include "switchyard/reference.hpp"
#include "workload/workload.hpp"

namespace switchyard::testing::expert_major {
namespace {

// Every buffer here has the low_latency region only.
constexpr Regions kRegions = Regions::low_latency;
constexpr double kTimeoutSeconds = 10.0;

// A macro, since GTEST_SKIP returns from the function it is written in.
#define SWITCHYARD_REQUIRE_GPU() \
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device: GPU tests are skipped, not passed"

void with_cuda_buffers(const Case& c, const std::function<void(Group&, Buffer&, cudaStream_t)>& body,
                       double timeout_seconds = kTimeoutSeconds) {
  with_gpu_ranks(c, kRegions, body, timeout_seconds);
}

// ---- bitwise round trips ------------------------------------------------------------------------

class CudaLowLatencyRoundTrip : public ::testing::TestWithParam<Case> {};

TEST_P(CudaLowLatencyRoundTrip, MatchesTheReferenceAndTheCpuEngineBitwise) {
  SWITCHYARD_REQUIRE_GPU();
  const Case& c = GetParam();
  const uint64_t seed = seed_for("cuda_low_latency/" + c.name);
  SCOPED_TRACE("case " + c.name + " seed=" + std::to_string(seed));
  const Expected expected = expected_for(c, seed);
  const std::vector<Outputs> cpu = run_cpu_engine(Engine::low_latency, c, expected);
  Failures failures;
  with_cuda_buffers(c, [&](Group& group, Buffer& buffer, cudaStream_t stream) {
    const int rank = group.rank();
    const int device = device_of(buffer);
    const DeviceInputs in = upload_inputs(expected.data[rank], device, stream);
    LowLatencyDispatchArgs args = dispatch_args(c, in.x, in.topk_idx, stream);
    // Preallocated, poisoned outputs on even ranks; the library allocates on odd ones.
    const PoisonedOutputs preallocated =
        rank % 2 == 0 ? poisoned_device_outputs(c, in.x.size(0), device, stream) : PoisonedOutputs();
    preallocated.attach(args);
    LowLatencyDispatchResult dispatched = buffer.low_latency_dispatch(args);
    buffer.synchronize(stream);
    Outputs out = download(dispatched, stream);
    check_dispatch(out, expected.dispatched[rank], "the reference", rank, failures);
    check_dispatch(out, cpu[rank], "the cpu engine", rank, failures);
    if (rank % 2 == 0 && dispatched.recv_x.data() != preallocated.recv_x.data()) {
      failures.add(rank, "out_recv_x was not used");
    }
    if (c.fp8.use_ue8m0) return;

    const Tensor y = to_device(expert_outputs(out.recv_x, out.recv_x_scales, rank), device, stream);
    LowLatencyCombineArgs cargs = combine_args(in.topk_idx, in.topk_weights, dispatched.handle, y, stream);
    preallocated.attach(cargs);
    LowLatencyCombineResult combined = buffer.low_latency_combine(cargs);
    buffer.synchronize(stream);
    const Tensor combined_x = to_host(combined.combined_x, stream);
    compare(combined_x, expected.combined[rank], "combined_x vs the reference", rank, failures);
    compare(combined_x, cpu[rank].combined_x, "combined_x vs the cpu engine", rank, failures);
  });
  expect_none(failures, seed);
}

std::vector<Case> round_trip_cases() {
  using workload::Routing;
  // use_ue8m0 implies round_scale: the ue8m0 cases pass both.
  std::vector<Case> all = {
      // Small enough for compute-sanitizer.
      make("Small_R1_k1", 1, {5}, 8, 1, 4),
      make("Small_R1_k9", 1, {6}, 6, 9, 12, 128),
      with_fp8(make("Small_R1_fp8", 1, {7}, 8, 3, 4, 384), false, false),
      with_fp8(make("Small_R1_fp8_ue8m0", 1, {6}, 6, 2, 4, 640), true, true),  // 5 scales: 2 words
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
      with_fp8(make("R2_fp8_ue8m0_padded", 2, {6, 4}, 6, 2, 4, 640), true, true),
      with_fp8(make("R8_fp8_h7168", 8, {16, 16, 16, 16, 16, 16, 16, 16}, 16, 8, 64, 7168), false, false),
      with_fp8(make("R4_fp8_ue8m0_h7168", 4, {8, 8, 8, 8}, 8, 8, 32, 7168), true, true),
  };
  return all;
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaLowLatencyRoundTrip, ::testing::ValuesIn(round_trip_cases()),
                         [](const auto& info) { return info.param.name; });

// Each of `expected` (with the CPU engine's outputs for it, `cpu`) through the CUDA engine, plain and with
// the receive hook, against the reference and the CPU engine: the body of the biased and LogFMT combines.
void check_combines(const Case& c, uint64_t seed, const std::vector<Expected>& expected,
                    const std::vector<std::vector<Outputs>>& cpu, bool use_logfmt,
                    const std::function<std::string(size_t)>& label) {
  Failures failures;
  with_cuda_buffers(c, [&](Group& group, Buffer& buffer, cudaStream_t stream) {
    const int rank = group.rank();
    const int device = device_of(buffer);
    for (size_t i = 0; i < expected.size(); ++i) {
      for (bool hook : {false, true}) {
        const DeviceInputs in = upload_inputs(expected[i].data[rank], device, stream);
        LowLatencyDispatchResult dispatched =
            buffer.low_latency_dispatch(dispatch_args(c, in.x, in.topk_idx, stream));
        const Tensor y = to_device(expected[i].ys[rank], device, stream);
        const Tensor bias0 =
            expected[i].bias0.empty() ? Tensor() : to_device(expected[i].bias0[rank], device, stream);
        const Tensor bias1 =
            expected[i].bias1.empty() ? Tensor() : to_device(expected[i].bias1[rank], device, stream);
        LowLatencyCombineArgs cargs =
            combine_args(in.topk_idx, in.topk_weights, dispatched.handle, y, stream);
        cargs.bias0 = bias0;
        cargs.bias1 = bias1;
        cargs.use_logfmt = use_logfmt;
        cargs.return_recv_hook = hook;
        LowLatencyCombineResult combined = buffer.low_latency_combine(cargs);
        if (hook) combined.hook();
        buffer.synchronize(stream);
        const Tensor combined_x = to_host(combined.combined_x, stream);
        const std::string which = label(i) + (hook ? ", hook" : "");
        compare(combined_x, expected[i].combined[rank], "combined_x vs the reference, " + which, rank,
                failures);
        compare(combined_x, cpu[i][rank].combined_x, "combined_x vs the cpu engine, " + which, rank,
                failures);
      }
    }
  });
  expect_none(failures, seed);
}

// Combine biases (docs/deep_ep.md, "Combine bias"): the accumulator starts at bias0 + bias1, then the
// weighted slots; bias0, bias1 alone and both, plain and with the receive hook, against the
// reference and the CPU engine.
class CudaLowLatencyBiasedCombine : public ::testing::TestWithParam<Case> {};

TEST_P(CudaLowLatencyBiasedCombine, CombineWithBiasesMatchesTheReferenceAndTheCpuEngineBitwise) {
  SWITCHYARD_REQUIRE_GPU();
  const Case& c = GetParam();
  const uint64_t seed = seed_for("cuda_low_latency/bias/" + c.name);
  SCOPED_TRACE("case " + c.name + " seed=" + std::to_string(seed));
  const Expected plain = expected_for(c, seed);
  std::vector<Expected> expected;
  std::vector<std::vector<Outputs>> cpu;
  for (auto [first, second] : {std::pair{true, false}, {false, true}, {true, true}}) {
    expected.push_back(with_biases(c, plain, seed, first, second));
    cpu.push_back(run_cpu_engine(Engine::low_latency, c, expected.back()));
  }
  check_combines(c, seed, expected, cpu, false, [](size_t i) { return "biases " + std::to_string(i); });
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, CudaLowLatencyBiasedCombine,
    ::testing::Values(make("Small_R1_k1", 1, {5}, 8, 1, 4), make("R3_k9", 3, {6, 0, 4}, 6, 9, 18, 128),
                      make("R4_k3_zero_tokens", 4, {0, 0, 0, 0}, 4, 3, 8),
                      with_routing(make("R2_all_invalid", 2, {4, 4}, 4, 3, 4),
                                   workload::Routing::all_invalid),
                      make("R8_k6_h7168", 8, {24, 17, 24, 3, 24, 20, 11, 24}, 24, 6, 64, 7168)),
    [](const auto& info) { return info.param.name; });

// LogFMT-10 (use_logfmt): the send kernel packs each row (its 128-channel blocks' parameters agreed
// through half-warp shuffles) and the receive kernel accumulates what the packed rows decode to; bit
// for bit the reference and the CPU engine, plain and with both biases, with and without the receive
// hook; and not the bf16 result.
class CudaLowLatencyLogfmtCombine : public ::testing::TestWithParam<Case> {};

TEST_P(CudaLowLatencyLogfmtCombine, MatchesTheReferenceAndTheCpuEngineBitwise) {
  SWITCHYARD_REQUIRE_GPU();
  const Case& c = GetParam();
  const uint64_t seed = seed_for("cuda_low_latency/logfmt/" + c.name);
  SCOPED_TRACE("case " + c.name + " seed=" + std::to_string(seed));
  const Expected drawn = with_rows_in_both_formats(expected_for(c, seed));
  ASSERT_GT(cast_and_plain_blocks(drawn).first, 0)
      << "no block of the expert outputs is cast: the test would not see LogFMT";
  std::vector<Expected> expected;
  std::vector<std::vector<Outputs>> cpu;
  for (bool biased : {false, true}) {
    expected.push_back(with_logfmt(c, biased ? with_biases(c, drawn, seed, true, true) : drawn));
    cpu.push_back(run_cpu_engine(Engine::low_latency, c, expected.back()));
  }
  check_combines(c, seed, expected, cpu, true,
                 [](size_t i) { return std::string(i ? "biases" : "no biases"); });
}

// Hidden sizes of 1, 3 and 56 LogFMT blocks (7168: DeepSeek-V3's rows, 56 half-warps per row), tokens
// with no valid slot, and fp8 dispatches (the combine's rows are bf16 either way).
INSTANTIATE_TEST_SUITE_P(
    Shapes, CudaLowLatencyLogfmtCombine,
    ::testing::Values(make("Small_R1_k1", 1, {5}, 8, 1, 4), make("R3_k9_h128", 3, {6, 0, 4}, 6, 9, 18, 128),
                      make("R4_h384", 4, {7, 3, 0, 7}, 7, 4, 8, 384),
                      with_fp8(make("R2_fp8_h384", 2, {6, 5}, 6, 4, 8, 384), false, false),
                      make("R8_k8_h7168", 8, {16, 9, 16, 2, 16, 12, 16, 5}, 16, 8, 64, 7168)),
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
    const int device = device_of(buffer);
    const DeviceInputs in = upload_inputs(expected.data[rank], device, stream);
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
    check_dispatch(out, expected.dispatched[rank], "the reference", rank, failures);

    const Tensor y = to_device(expert_outputs(out.recv_x, out.recv_x_scales, rank), device, stream);
    Tensor weights = to_device(expected.data[rank].topk_weights, device, stream);
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
    if (weights.nbytes() > 0)
      check_cuda(cudaMemsetAsync(weights.data(), 0x7f, weights.nbytes(), stream), "memset");
    std::this_thread::sleep_for(std::chrono::milliseconds(5 * (c.ranks - 1 - rank)));
    combined.hook();
    buffer.synchronize(stream);
    compare(to_host(combined.combined_x, stream), expected.combined[rank], "combined_x", rank, failures);
  });
  expect_none(failures, seed);
}

// The caller's out_layout_range and out_src_info are borrowed for the dispatch only (with a hook, until
// it has run): overwritten and freed before the combine, they must not change how it routes.
TEST_P(CudaLowLatencyModes, CombineRoutesAsDispatchedAfterTheCallersOutputsWereFreed) {
  SWITCHYARD_REQUIRE_GPU();
  const Case& c = GetParam();
  const uint64_t seed = seed_for("cuda_low_latency/freed_outputs/" + c.name);
  const Expected expected = expected_for(c, seed);
  Failures failures;
  with_cuda_buffers(c, [&](Group& group, Buffer& buffer, cudaStream_t stream) {
    for (const bool hook : {false, true}) {
      group.barrier();
      check_combine_after_the_callers_outputs_were_freed(Engine::low_latency, c, expected, hook, group.rank(),
                                                         buffer, stream, failures);
    }
  });
  expect_none(failures, seed);
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
    check_back_to_back_calls(c, first, second, 3, group.rank(), buffer, stream, failures);
  });
  expect_none(failures, seed);
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
    check_graph_replays(c, rounds, group, buffer, stream, failures);
  });
  expect_none(failures, seed_for("cuda_low_latency/graph/" + c.name));
}

// A caller that lets the handle go once its graphs are made (as DeepEP's users do with theirs) still
// replays correct results: what the captured calls allocated belongs to the graphs as well.
TEST_P(CudaLowLatencyModes, GraphReplaysOutliveTheHandleDroppedAfterCapture) {
  SWITCHYARD_REQUIRE_GPU();
  const Case& c = GetParam();
  constexpr int kRounds = 3;
  std::vector<Expected> rounds;
  for (int round = 0; round < kRounds; ++round) {
    rounds.push_back(expected_for(c, seed_for("cuda_low_latency/graph_dropped/" + c.name) + round));
  }
  Failures failures;
  with_cuda_buffers(c, [&](Group& group, Buffer& buffer, cudaStream_t stream) {
    check_graph_replays(c, rounds, group, buffer, stream, failures, HandleAfterCapture::dropped);
  });
  expect_none(failures, seed_for("cuda_low_latency/graph_dropped/" + c.name));
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
    const int device = device_of(buffer);
    const DeviceInputs in = upload_inputs(expected.data[rank], device, stream);
    LowLatencyDispatchResult dispatched =
        buffer.low_latency_dispatch(dispatch_args(c, in.x, in.topk_idx, stream));
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
    LowLatencyCombineArgs args =
        combine_args(in.topk_idx, in.topk_weights, dispatched.handle, TensorView(), stream);
    args.zero_copy = true;
    LowLatencyCombineResult combined = buffer.low_latency_combine(args);
    buffer.synchronize(stream);
    compare(to_host(combined.combined_x, stream), expected.combined[rank], "combined_x", rank, failures);
  });
  expect_none(failures, seed);
}

INSTANTIATE_TEST_SUITE_P(Modes, CudaLowLatencyModes, ::testing::ValuesIn(mode_cases()),
                         [](const auto& info) { return info.param.name; });

// ---- bad input and timeouts ---------------------------------------------------------------------

// One rank with poisoned, preallocated outputs on its stream.
struct SingleGpuRank {
  Case c = make("single", 1, {4}, 4, 2, 4);
  GpuRank gpu{cuda_buffer_options(c, 0, kRegions, kTimeoutSeconds)};
  workload::RankData data = workload::generate(shape_of(c), seed_for("cuda_low_latency/single"))[0];
  DeviceInputs in = upload_inputs(data, gpu.device, gpu.stream);
  PoisonedOutputs out = poisoned_device_outputs(c, data.x.size(0), gpu.device, gpu.stream);

  LowLatencyDispatchArgs args() const {
    LowLatencyDispatchArgs args = dispatch_args(c, in.x, in.topk_idx, gpu.stream);
    out.attach(args);
    return args;
  }
  bool untouched() const {
    for (const Tensor& tensor : out.dispatch_outputs()) {
      if (!all_poison_on_device(tensor, gpu.stream)) return false;
    }
    return true;
  }
  // A valid dispatch still matches the reference.
  void expect_usable() {
    const Expected expected = expected_from(c, {data});
    upload(in.topk_idx, data.topk_idx, gpu.stream);
    LowLatencyDispatchResult dispatched = gpu.buffer->low_latency_dispatch(args());
    gpu.buffer->synchronize(gpu.stream);
    Failures failures;
    check_dispatch(download(dispatched, gpu.stream), expected.dispatched[0], "the reference", 0, failures);
    expect_none(failures, 0);
  }
};

TEST(CudaLowLatencyErrors, Small_R1_MoreTokensThanMaxTokensPerRankIsInvalidArgumentAndWritesNothing) {
  SWITCHYARD_REQUIRE_GPU();
  SingleGpuRank single;
  Tensor x5 =
      to_device(Tensor::empty(DType::bf16, {5, single.c.hidden}), single.gpu.device, single.gpu.stream);
  Tensor idx5 = Tensor::empty(DType::i64, {5, 2});
  std::fill(idx5.as<int64_t>(), idx5.as<int64_t>() + 10, 0);
  Tensor idx5_device = to_device(idx5, single.gpu.device, single.gpu.stream);
  LowLatencyDispatchArgs args = single.args();
  args.x = x5;
  args.topk_idx = idx5_device;
  const std::string message =
      refused<InvalidArgument>([&] { single.gpu.buffer->low_latency_dispatch(args); });
  EXPECT_EQ(message.rfind("x:", 0), 0u) << message;
  EXPECT_NE(message.find("max_tokens_per_rank"), std::string::npos) << message;
  single.gpu.buffer->synchronize(single.gpu.stream);
  EXPECT_TRUE(single.untouched()) << "outputs were written";
  single.expect_usable();
}

// topk_idx on the device is checked by the send kernel before anything is written: the call writes
// nothing, and the next call on the buffer (or synchronize) raises InvalidArgument.
TEST(CudaLowLatencyErrors, Small_R1_ExpertIdOutOfRangeOnTheDeviceIsInvalidArgumentAndWritesNothing) {
  SWITCHYARD_REQUIRE_GPU();
  SingleGpuRank single;
  Tensor bad = Tensor::empty(DType::i64, {4, 2});
  std::memcpy(bad.data(), single.data.topk_idx.data(), bad.nbytes());
  bad.as<int64_t>()[5] = single.c.num_experts;
  upload(single.in.topk_idx, bad, single.gpu.stream);
  single.gpu.buffer->low_latency_dispatch(single.args());
  try {
    single.gpu.buffer->synchronize(single.gpu.stream);
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
  SingleGpuRank single;
  Tensor duplicates = Tensor::empty(DType::i64, {4, 2});
  std::fill(duplicates.as<int64_t>(), duplicates.as<int64_t>() + 8, 1);  // 8 rows for expert 1, room for 4
  upload(single.in.topk_idx, duplicates, single.gpu.stream);
  single.gpu.buffer->low_latency_dispatch(single.args());
  EXPECT_THROW(single.gpu.buffer->synchronize(single.gpu.stream), InvalidArgument);
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
  PeerGate gate;
  Caught caught;
  with_cuda_buffers(
      c,
      [&](Group& group, Buffer& buffer, cudaStream_t stream) {
        if (group.rank() == 1) {
          gate.wait();  // never calls
          return;
        }
        const auto opener = gate.open_on_exit();
        const DeviceInputs in = upload_inputs(expected.data[0], device_of(buffer), stream);
        caught = catch_timeout([&] {
          buffer.low_latency_dispatch(dispatch_args(c, in.x, in.topk_idx, stream));
          buffer.synchronize(stream);
        });
      },
      kTimeout);
  const std::string& message = caught.message;
  SCOPED_TRACE("message: " + message);
  expect_timed_out(caught, kTimeout, 15.0);
  EXPECT_NE(message.find("rank 0"), std::string::npos);
  EXPECT_NE(message.find("low_latency"), std::string::npos);
  EXPECT_NE(message.find("dispatch receiver"), std::string::npos);
  EXPECT_NE(message.find("from rank 1"), std::string::npos);
}

// ---- wait statistics ----------------------------------------------------------------------------

// wait_recv_cost_stats on the GPU: the receive kernels' waits (block 0's, %globaltimer nanoseconds)
// land in the awaited rank's entry, added to what the tensor held; results stay the reference's.
TEST(CudaLowLatencyWaitCost, ALateRankShowsOnEveryOtherRankInDispatchAndCombine) {
  SWITCHYARD_REQUIRE_GPU();
  const Case c = make("wait_cost", 3, {6, 5, 4}, 6, 2, 6);
  const uint64_t seed = seed_for("cuda_low_latency/wait_cost");
  const Expected expected = expected_for(c, seed);
  Failures failures;
  with_cuda_buffers(c, [&](Group& group, Buffer& buffer, cudaStream_t stream) {
    const int rank = group.rank();
    const int device = device_of(buffer);
    constexpr int kLateInDispatch = 1, kLateInCombine = 2;
    // Every rank's uploads are done and it has met the others; then `late` sleeps before its call.
    const auto enter = [&](int late) {
      check_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
      group.barrier();
      if (rank == late) std::this_thread::sleep_for(kLateBy);
    };
    const DeviceInputs in = upload_inputs(expected.data[rank], device, stream);
    const Tensor dispatch_stats = to_device(wait_stats_for(c.ranks), device, stream);
    LowLatencyDispatchArgs args = dispatch_args(c, in.x, in.topk_idx, stream);
    args.wait_recv_cost_stats = dispatch_stats;
    enter(kLateInDispatch);
    LowLatencyDispatchResult dispatched = buffer.low_latency_dispatch(args);
    buffer.synchronize(stream);
    Outputs out = download(dispatched, stream);
    check_dispatch(out, expected.dispatched[rank], "the reference", rank, failures);
    check_wait_stats(to_host(dispatch_stats, stream), rank, kLateInDispatch, "dispatch", failures);

    const Tensor y = to_device(expert_outputs(out.recv_x, out.recv_x_scales, rank), device, stream);
    const Tensor weights = to_device(expected.data[rank].topk_weights, device, stream);
    const Tensor combine_stats = to_device(wait_stats_for(c.ranks), device, stream);
    LowLatencyCombineArgs cargs = combine_args(in.topk_idx, weights, dispatched.handle, y, stream);
    cargs.wait_recv_cost_stats = combine_stats;
    enter(kLateInCombine);
    LowLatencyCombineResult combined = buffer.low_latency_combine(cargs);
    buffer.synchronize(stream);
    compare(to_host(combined.combined_x, stream), expected.combined[rank], "combined_x", rank, failures);
    check_wait_stats(to_host(combine_stats, stream), rank, kLateInCombine, "combine", failures);
  });
  expect_none(failures, seed);
}

// ---- the fp8 cast -------------------------------------------------------------------------------

TEST(CudaDeviceFp8Cast, HardwareCastEqualsTheSharedCastOnEveryFloat) {
  SWITCHYARD_REQUIRE_GPU();
  // NOTES: the cast is a property of the GPU model, not of a rank: device 0 stands for all.
  check_cuda(cudaSetDevice(0), "cudaSetDevice");
  const Fp8CastMismatches mismatches = count_device_fp8_cast_mismatches();
  EXPECT_EQ(mismatches.count, 0u) << "first mismatching float bits: 0x" << std::hex << mismatches.first_bits;
}

}  // namespace
}  // namespace switchyard::testing::expert_major
