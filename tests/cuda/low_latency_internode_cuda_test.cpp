// The CUDA `low_latency` engine across nodes (ranks_per_node < num_ranks): stores within a node,
// loopback device transport puts with signal adds to other nodes (cuda/low_latency/link.cuh), with
// the transport's delays and reordering off and on. Expert-major outputs do not depend on the
// topology, so every case is checked bit for bit against the reference and against the same inputs
// run by the CUDA engine on one node (DESIGN.md, "low_latency and symmetric interface:
// expert-major" and Nodes). Ranks are threads of this process, each with its own non-blocking
// stream, on the GPUs SWITCHYARD_TEST_DEVICES picks (cuda/rank_device.hpp; default: all on GPU 0).
// Skipped (reported as skipped) where no GPU is present.
//
// NOTES: no case here can run under compute-sanitizer: every case has ranks on two nodes that
// spin-wait on each other, and the sanitizer serialises kernels.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "common/low_latency_protocol.hpp"
#include "core/low_latency_sizing.hpp"
#include "cuda/device_tensors.hpp"
#include "cuda/expert_major_round_trip.hpp"
#include "cuda/low_latency_modes.hpp"
#include "cuda/rank_device.hpp"
#include "support/expert_major_gtest.hpp"
#include "support/expert_major_nodes.hpp"
#include "support/loopback_delays.hpp"
#include "support/test_seed.hpp"
#include "switchyard/buffer.hpp"
#include "switchyard/errors.hpp"
#include "switchyard/group.hpp"
#include "workload/workload.hpp"

namespace switchyard::testing::expert_major {
namespace {

constexpr Regions kRegions = Regions::low_latency;
// NOTES: far above what any case needs (the delays add tens of microseconds per put), yet a hang
// fails well before the suite's timeout in scripts/gpu-check.sh.
constexpr double kTimeoutSeconds = 20.0;

#define SWITCHYARD_REQUIRE_GPU() \
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device: GPU tests are skipped, not passed"

// A case's name in this suite.
std::string name_of(const NodesCase& n) {
  return n.c.name + (n.delays ? "_delays" : "_prompt");
}

// Runs body(group, buffer, stream) on every rank (threads) of `n` with a connected CUDA buffer of
// its topology, and the loopback delays of `n` (seeded by `seed`); buffers stay alive until every
// rank is done.
void with_node_gpu_ranks(const NodesCase& n, uint64_t seed,
                         const std::function<void(Group&, Buffer&, cudaStream_t)>& body) {
  const LoopbackDelays delays(n.delays, seed);
  run_ranks(n.c.ranks, [&](Group& group) {
    BufferOptions options = cuda_buffer_options(n.c, group.rank(), kRegions, kTimeoutSeconds);
    options.topology = n.topology();
    GpuRank gpu(options, group);
    body(group, *gpu.buffer, gpu.stream);
    group.barrier();
  });
}

// One round trip of this rank on the device: dispatch (into preallocated, poisoned outputs on even
// ranks; the library allocates on odd ones), the synthetic experts on what arrived, combine. Its
// outputs on the host (combined_x undefined with use_ue8m0).
Outputs round_trip(const Case& c, const workload::RankData& data, int rank, Buffer& buffer,
                   cudaStream_t stream) {
  const int device = device_of(buffer);
  const DeviceInputs in = upload_inputs(data, device, stream);
  LowLatencyDispatchArgs args = dispatch_args(c, in.x, in.topk_idx, stream);
  const PoisonedOutputs preallocated =
      rank % 2 == 0 ? poisoned_device_outputs(c, in.x.size(0), device, stream) : PoisonedOutputs();
  preallocated.attach(args);
  const LowLatencyDispatchResult dispatched = buffer.low_latency_dispatch(args);
  buffer.synchronize(stream);
  Outputs out = download(dispatched, stream);
  if (c.fp8.use_ue8m0) return out;
  const Tensor y = to_device(expert_outputs(out.recv_x, out.recv_x_scales, rank), device, stream);
  LowLatencyCombineArgs cargs = combine_args(in.topk_idx, in.topk_weights, dispatched.handle, y, stream);
  preallocated.attach(cargs);
  const LowLatencyCombineResult combined = buffer.low_latency_combine(cargs);
  buffer.synchronize(stream);
  out.combined_x = to_host(combined.combined_x, stream);
  return out;
}

// ---- bitwise round trips ------------------------------------------------------------------------

// Combine biases across nodes: the accumulator starts at bias0 + bias1 on the home rank, as on one node.
TEST(CudaLowLatencyInternode, CombineWithBiasesMatchesTheReferenceBitwise) {
  SWITCHYARD_REQUIRE_GPU();
  const NodesCase n{make("n2x2_biases", 4, {5, 3, 0, 5}, 5, 3, 8), 2, true};
  const Case& c = n.c;
  const uint64_t seed = seed_for("cuda_low_latency_internode/" + c.name);
  SCOPED_TRACE("case " + name_of(n) + " seed=" + std::to_string(seed));
  const Expected expected = with_biases(c, expected_on(c, n.topology(), seed), seed, true, true);
  Failures failures;
  with_node_gpu_ranks(n, seed, [&](Group& group, Buffer& buffer, cudaStream_t stream) {
    const int rank = group.rank();
    const int device = device_of(buffer);
    const DeviceInputs in = upload_inputs(expected.data[rank], device, stream);
    const LowLatencyDispatchResult dispatched =
        buffer.low_latency_dispatch(dispatch_args(c, in.x, in.topk_idx, stream));
    const Tensor y = to_device(expected.ys[rank], device, stream);
    const Tensor bias0 = to_device(expected.bias0[rank], device, stream);
    const Tensor bias1 = to_device(expected.bias1[rank], device, stream);
    LowLatencyCombineArgs cargs = combine_args(in.topk_idx, in.topk_weights, dispatched.handle, y, stream);
    cargs.bias0 = bias0;
    cargs.bias1 = bias1;
    const LowLatencyCombineResult combined = buffer.low_latency_combine(cargs);
    buffer.synchronize(stream);
    compare(to_host(combined.combined_x, stream), expected.combined[rank], "combined_x", rank, failures);
  });
  expect_none(failures, seed);
}

// LogFMT-10 across nodes: the send kernel packs the rows for other nodes into the combine buffer and
// puts only the packed bytes (hidden 7168: two words of cast bits; rows with cast and raw blocks), and
// the home rank decodes them as on one node; twice, so that both halves of the buffer are used.
TEST(CudaLowLatencyInternode, LogfmtCombineMatchesTheReferenceBitwise) {
  SWITCHYARD_REQUIRE_GPU();
  const NodesCase n{make("n2x2_logfmt_h7168", 4, {5, 3, 0, 5}, 5, 3, 8, 7168), 2, true};
  const Case& c = n.c;
  const uint64_t seed = seed_for("cuda_low_latency_internode/" + c.name);
  SCOPED_TRACE("case " + name_of(n) + " seed=" + std::to_string(seed));
  const Expected drawn = with_rows_in_both_formats(expected_on(c, n.topology(), seed));
  const auto [cast, plain] = cast_and_plain_blocks(drawn);
  ASSERT_GT(cast, 0) << "no block of the expert outputs is cast: the test would not see LogFMT";
  ASSERT_GT(plain, 0) << "every block is cast: the test would not see raw blocks";
  const Expected expected = with_logfmt(c, with_biases(c, drawn, seed, true, false));
  Failures failures;
  with_node_gpu_ranks(n, seed, [&](Group& group, Buffer& buffer, cudaStream_t stream) {
    const int rank = group.rank();
    const int device = device_of(buffer);
    const DeviceInputs in = upload_inputs(expected.data[rank], device, stream);
    const Tensor y = to_device(expected.ys[rank], device, stream);
    const Tensor bias0 = to_device(expected.bias0[rank], device, stream);
    for (int round = 0; round < 2; ++round) {
      const LowLatencyDispatchResult dispatched =
          buffer.low_latency_dispatch(dispatch_args(c, in.x, in.topk_idx, stream));
      LowLatencyCombineArgs cargs = combine_args(in.topk_idx, in.topk_weights, dispatched.handle, y, stream);
      cargs.bias0 = bias0;
      cargs.use_logfmt = true;
      const LowLatencyCombineResult combined = buffer.low_latency_combine(cargs);
      buffer.synchronize(stream);
      compare(to_host(combined.combined_x, stream), expected.combined[rank],
              "combined_x, round " + std::to_string(round), rank, failures);
    }
  });
  expect_none(failures, seed);
}

class CudaLowLatencyInternodeRoundTrip : public ::testing::TestWithParam<NodesCase> {};

// Twice with the same inputs (both halves of the buffer, and words that arrived as adds reused),
// then once on one node: every run equals the reference, and the runs across nodes equal the
// one-node run bit for bit.
TEST_P(CudaLowLatencyInternodeRoundTrip, MatchesTheReferenceAndOneNodeBitwiseTwice) {
  SWITCHYARD_REQUIRE_GPU();
  const NodesCase& n = GetParam();
  const Case& c = n.c;
  const uint64_t seed = seed_for("cuda_low_latency_internode/" + c.name);
  SCOPED_TRACE("case " + name_of(n) + " " + n.topology().to_string() + " seed=" + std::to_string(seed) +
               " loopback delays " + (n.delays ? std::string(kLoopbackDelayMicroseconds) + " us" : "off"));
  const Expected expected = expected_on(c, n.topology(), seed);
  constexpr int kRounds = 2;
  std::vector<std::vector<Outputs>> across(kRounds, std::vector<Outputs>(c.ranks));
  std::vector<Outputs> one_node(c.ranks);
  Failures failures;
  with_node_gpu_ranks(n, seed, [&](Group& group, Buffer& buffer, cudaStream_t stream) {
    const int rank = group.rank();
    for (int round = 0; round < kRounds; ++round) {
      across[round][rank] = round_trip(c, expected.data[rank], rank, buffer, stream);
    }
  });
  with_gpu_ranks(
      c, kRegions,
      [&](Group& group, Buffer& buffer, cudaStream_t stream) {
        one_node[group.rank()] = round_trip(c, expected.data[group.rank()], group.rank(), buffer, stream);
      },
      kTimeoutSeconds);
  for (int rank = 0; rank < c.ranks; ++rank) {
    const Outputs want = reference_outputs(expected, rank);
    check_outputs(one_node[rank], want, "the reference (cuda, one node)", rank, failures);
    for (int round = 0; round < kRounds; ++round) {
      const std::string which = " (across nodes, round " + std::to_string(round + 1) + ")";
      check_outputs(across[round][rank], want, "the reference" + which, rank, failures);
      check_outputs(across[round][rank], one_node[rank], "the one-node run" + which, rank, failures);
    }
  }
  expect_none(failures, seed);
}

std::vector<NodesCase> round_trip_cases() {
  using workload::Routing;
  // nodes x ranks_per_node: 2x1, 2x2, 2x4, 3x2 and 4x2; k from 1 to 9; bf16 and fp8.
  const std::vector<NodesCase> shapes = {
      {make("Small_n2x1_k2", 2, {6, 4}, 6, 2, 4), 1},
      {make("n2x2_k3", 4, {5, 3, 0, 5}, 5, 3, 8), 2},
      {make("n2x4_k9", 8, {4, 2, 4, 0, 3, 4, 1, 4}, 4, 9, 16, 128), 4},
      {make("n2x4_k8_h7168", 8, {16, 9, 16, 3, 16, 12, 7, 16}, 16, 8, 32, 7168), 4},
      {make("n3x2_k5_h512", 6, {8, 3, 8, 6, 0, 8}, 8, 5, 12, 512), 2},
      {make("n4x2_k6", 8, {6, 6, 2, 6, 5, 6, 6, 1}, 6, 6, 16, 256), 2},
      {with_fp8(make("n2x1_fp8", 2, {6, 5}, 6, 4, 8, 384), false, false), 1},
      {with_fp8(make("n3x2_fp8_k4", 6, {4, 3, 4, 1, 4, 2}, 4, 4, 12, 256), false, false), 2},
      {with_fp8(make("n4x2_fp8_round_scale_k1", 8, {3, 0, 3, 2, 3, 1, 3, 3}, 3, 1, 8, 128), true, false), 2},
      {with_fp8(make("n2x2_fp8_ue8m0", 4, {4, 3, 4, 2}, 4, 2, 8, 640), true, true), 2},
      {with_fp8(make("n2x4_fp8_h7168", 8, {16, 16, 16, 16, 16, 16, 16, 16}, 16, 8, 64, 7168), false, false),
       4},
      {make("n2x2_k1_hidden_72", 4, {4, 4, 1, 3}, 4, 1, 8, 72), 2},
      {make("n2x2_zero_tokens", 4, {0, 0, 0, 0}, 4, 2, 8), 2},
      {with_routing(make("n2x1_all_invalid", 2, {4, 4}, 4, 3, 4), Routing::all_invalid), 1},
      // Every token of every rank on one expert: its rows fill R * max exactly, 3 of 4 sources remote.
      {with_routing(make("n4x1_one_expert_full", 4, {5, 5, 5, 5}, 5, 2, 8), Routing::one_expert), 1},
      {with_routing(make("n2x2_skewed", 4, {12, 12, 12, 12}, 12, 4, 16, 512), Routing::skewed), 2},
      // More tokens than send blocks: each block sends a chunk of consecutive tokens.
      {make("n2x1_chunked_send_blocks", 2, {1100, 700}, 1100, 2, 8, 128), 1},
  };
  return delays_off_and_on(shapes);
}

INSTANTIATE_TEST_SUITE_P(Topologies, CudaLowLatencyInternodeRoundTrip,
                         ::testing::ValuesIn(round_trip_cases()),
                         [](const auto& info) { return name_of(info.param); });

// ---- hooks, the double buffer, graphs, zero copy, changing shapes ---------------------------------

class CudaLowLatencyInternodeModes : public ::testing::TestWithParam<NodesCase> {};

std::vector<NodesCase> mode_cases() {
  std::vector<NodesCase> cases = {
      {make("n2x2", 4, {8, 5, 8, 1}, 8, 4, 16, 512), 2},
      {with_fp8(make("n4x2_fp8", 8, {12, 7, 12, 12, 0, 12, 3, 12}, 12, 8, 64, 1024), false, false), 2},
  };
  for (NodesCase& n : cases) n.delays = true;
  return cases;
}

// The send half returns; the hook runs the receive half later, and gives the same bits. The combine
// hook reduces with the routing of the call, even if the caller's tensors change meanwhile.
TEST_P(CudaLowLatencyInternodeModes, HookSplitGivesTheSameBits) {
  SWITCHYARD_REQUIRE_GPU();
  const NodesCase& n = GetParam();
  const Case& c = n.c;
  const uint64_t seed = seed_for("cuda_low_latency_internode/hooks/" + c.name);
  const Expected expected = expected_on(c, n.topology(), seed);
  Failures failures;
  with_node_gpu_ranks(n, seed, [&](Group& group, Buffer& buffer, cudaStream_t stream) {
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
    // Something else meanwhile: the peers' puts land while this rank is busy.
    std::this_thread::sleep_for(std::chrono::milliseconds(3 * rank));
    dispatched.hook();
    buffer.synchronize(stream);
    const Outputs out = download(dispatched, stream);
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
    // The caller reuses its weights tensor before the hook: the hook must not see it.
    if (weights.nbytes() > 0) {
      check_cuda(cudaMemsetAsync(weights.data(), 0x7f, weights.nbytes(), stream), "memset");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(3 * (c.ranks - 1 - rank)));
    combined.hook();
    buffer.synchronize(stream);
    compare(to_host(combined.combined_x, stream), expected.combined[rank], "combined_x", rank, failures);
  });
  expect_none(failures, seed);
}

// Two dispatches, then their combines in the other order, with no synchronisation between ranks:
// two calls in flight, on both halves, whose signal words arrived as adds and must start from zero
// each time. Then a call with fewer experts in the same buffer, which moves the writers of the
// combine words between nodes.
TEST_P(CudaLowLatencyInternodeModes, BackToBackCallsAndFewerExpertsStayBitwise) {
  SWITCHYARD_REQUIRE_GPU();
  const NodesCase& n = GetParam();
  const Case& c = n.c;
  Case narrow = c;  // one local expert per rank, in a buffer sized for c
  narrow.name = c.name + "_narrow";
  narrow.num_experts = c.ranks;
  narrow.topk = std::min(c.topk, c.ranks);
  const uint64_t seed = seed_for("cuda_low_latency_internode/back_to_back/" + c.name);
  const Expected first = expected_on(c, n.topology(), seed);
  const Expected second = expected_on(c, n.topology(), seed + 1);
  const Expected third = expected_on(narrow, n.topology(), seed + 2);
  Failures failures;
  with_node_gpu_ranks(n, seed, [&](Group& group, Buffer& buffer, cudaStream_t stream) {
    const int rank = group.rank();
    check_back_to_back_calls(c, first, second, 3, rank, buffer, stream, failures, [&] {
      const Outputs out_c = round_trip(narrow, third.data[rank], rank, buffer, stream);
      check_outputs(out_c, reference_outputs(third, rank), "the reference (fewer experts)", rank, failures);
    });
  });
  expect_none(failures, seed);
}

// Dispatch and combine captured once in CUDA graphs across nodes; replays with new inputs (new
// routing too) must match the reference. The dispatch graph is replayed once or twice per round,
// so the halves each graph uses change between replays, and so do the words its send kernel zeroes.
TEST_P(CudaLowLatencyInternodeModes, GraphReplaysWithNewRoutingMatchTheReference) {
  SWITCHYARD_REQUIRE_GPU();
  const NodesCase& n = GetParam();
  const Case& c = n.c;
  constexpr int kRounds = 4;
  const uint64_t seed = seed_for("cuda_low_latency_internode/graph/" + c.name);
  std::vector<Expected> rounds;
  for (int round = 0; round < kRounds; ++round) rounds.push_back(expected_on(c, n.topology(), seed + round));
  Failures failures;
  with_node_gpu_ranks(n, seed, [&](Group& group, Buffer& buffer, cudaStream_t stream) {
    check_graph_replays(c, rounds, group, buffer, stream, failures);
  });
  expect_none(failures, seed);
}

// Expert outputs written straight into the buffer (low_latency_combine_buffer): combine with
// zero_copy puts the rows for other nodes from there, and without zero_copy (the same view passed
// as x) as well.
TEST_P(CudaLowLatencyInternodeModes, ZeroCopyCombinePutsFromTheCombineBuffer) {
  SWITCHYARD_REQUIRE_GPU();
  const NodesCase& n = GetParam();
  const Case& c = n.c;
  const uint64_t seed = seed_for("cuda_low_latency_internode/zero_copy/" + c.name);
  const Expected expected = expected_on(c, n.topology(), seed);
  Failures failures;
  with_node_gpu_ranks(n, seed, [&](Group& group, Buffer& buffer, cudaStream_t stream) {
    const int rank = group.rank();
    const int device = device_of(buffer);
    const DeviceInputs in = upload_inputs(expected.data[rank], device, stream);
    for (bool zero_copy : {true, false}) {
      LowLatencyDispatchResult dispatched =
          buffer.low_latency_dispatch(dispatch_args(c, in.x, in.topk_idx, stream));
      buffer.synchronize(stream);
      const Outputs out = download(dispatched, stream);
      const TensorView in_buffer = buffer.low_latency_combine_buffer(dispatched.handle);
      upload(in_buffer, expert_outputs(out.recv_x, out.recv_x_scales, rank), stream);
      LowLatencyCombineArgs args = combine_args(in.topk_idx, in.topk_weights, dispatched.handle,
                                                zero_copy ? TensorView() : in_buffer, stream);
      args.zero_copy = zero_copy;
      LowLatencyCombineResult combined = buffer.low_latency_combine(args);
      buffer.synchronize(stream);
      compare(to_host(combined.combined_x, stream), expected.combined[rank],
              zero_copy ? "combined_x (zero_copy)" : "combined_x (the combine buffer as x)", rank, failures);
    }
  });
  expect_none(failures, seed);
}

INSTANTIATE_TEST_SUITE_P(Modes, CudaLowLatencyInternodeModes, ::testing::ValuesIn(mode_cases()),
                         [](const auto& info) { return name_of(info.param); });

// ---- a rank that never arrives ------------------------------------------------------------------

// Rank 3 (on node 1 of 2 x 2) skips one call: every other rank's receiver times out on it, with a
// TimeoutError naming its own rank, the role and the missing rank, whether that rank is in its node
// (a stored signal) or not (a transport add).
void expect_missing_rank_times_out(bool skip_combine, const char* role) {
  constexpr double kShortTimeoutSeconds = 1.0;
  constexpr double kDeadlineSeconds = 15.0;
  constexpr int kMissing = 3;
  const Topology topology{4, 2};
  const Case c = make(skip_combine ? "missing_in_combine" : "missing_in_dispatch", 4, {4, 4, 4, 4}, 4, 2, 8);
  const uint64_t seed = seed_for("cuda_low_latency_internode/" + c.name);
  const Expected expected = expected_on(c, topology, seed);
  std::vector<Caught> caught(c.ranks);
  std::promise<void> others_done;
  std::shared_future<void> release = others_done.get_future().share();
  std::atomic<int> remaining{c.ranks - 1};
  const LoopbackDelays delays(true, seed);
  run_ranks(c.ranks, [&](Group& group) {
    const int rank = group.rank();
    {
      BufferOptions options = cuda_buffer_options(c, rank, kRegions, kShortTimeoutSeconds);
      options.topology = topology;
      GpuRank gpu(options, group);
      const DeviceInputs in = upload_inputs(expected.data[rank], gpu.device, gpu.stream);
      if (rank == kMissing) {
        if (skip_combine) {
          gpu.buffer->low_latency_dispatch(dispatch_args(c, in.x, in.topk_idx, gpu.stream));
          gpu.buffer->synchronize(gpu.stream);
        }
        // Keeps its heap until the others are done with it.
        release.wait_for(std::chrono::seconds(60));
        return;
      }
      caught[rank] = catch_timeout([&] {
        LowLatencyDispatchResult dispatched =
            gpu.buffer->low_latency_dispatch(dispatch_args(c, in.x, in.topk_idx, gpu.stream));
        gpu.buffer->synchronize(gpu.stream);
        if (!skip_combine) return;
        const Tensor y = to_device(expected.ys[rank], gpu.device, gpu.stream);
        gpu.buffer->low_latency_combine(
            combine_args(in.topk_idx, in.topk_weights, dispatched.handle, y, gpu.stream));
        gpu.buffer->synchronize(gpu.stream);
      });
    }
    if (--remaining == 0) others_done.set_value();
  });
  for (int rank = 0; rank < c.ranks; ++rank) {
    if (rank == kMissing) continue;
    const std::string& message = caught[rank].message;
    SCOPED_TRACE("rank " + std::to_string(rank) + ": " + message);
    expect_timed_out(caught[rank], kShortTimeoutSeconds, kDeadlineSeconds);
    EXPECT_NE(message.find("rank " + std::to_string(rank)), std::string::npos) << "does not name its rank";
    EXPECT_NE(message.find("low_latency"), std::string::npos);
    EXPECT_NE(message.find(role), std::string::npos) << "does not name the role";
    EXPECT_NE(message.find("from rank " + std::to_string(kMissing)), std::string::npos)
        << "does not name the missing rank";
  }
}

TEST(CudaLowLatencyInternodeTimeouts, ARankMissingFromDispatchEndsInTimeoutErrorOnTheOthers) {
  SWITCHYARD_REQUIRE_GPU();
  expect_missing_rank_times_out(false, "dispatch receiver");
}

TEST(CudaLowLatencyInternodeTimeouts, ARankMissingFromCombineEndsInTimeoutErrorOnTheOthers) {
  SWITCHYARD_REQUIRE_GPU();
  expect_missing_rank_times_out(true, "combine receiver");
}

// ---- the region's layout (no GPU needed) ----------------------------------------------------------

common::LowLatencyLayout layout_of(const Topology& topology) {
  BufferSizing sizing;
  sizing.num_experts = 16;
  sizing.topk = 4;
  sizing.hidden = 512;
  sizing.low_latency_max_tokens_per_rank = 8;
  return detail::low_latency_layout(topology, sizing, 4096);
}

// One node keeps the region it always had; across nodes the rows-landed counters and the send
// sources are added without overlapping anything, and transport signal ids find every word.
TEST(LowLatencyInternodeLayout, OneNodeIsUnchangedAndTheAcrossNodesArraysAreDisjoint) {
  common::LowLatencyLayout one = layout_of(Topology{4, 4});
  common::LowLatencyLayout unsaid = one;
  unsaid.ranks_per_node = 0;  // a layout that does not say: one node
  EXPECT_FALSE(one.across_nodes());
  EXPECT_EQ(one.region_bytes(), unsaid.region_bytes());
  EXPECT_EQ(one.landed_bytes(), 0u);
  EXPECT_EQ(one.send_messages_bytes() + one.send_sources_bytes(), 0u);
  EXPECT_EQ(one.signals_half_bytes(), one.dispatch_signal_bytes() + one.combine_signal_bytes());

  const common::LowLatencyLayout two = layout_of(Topology{4, 2});
  ASSERT_TRUE(two.across_nodes());
  // The counters follow the signals within each half, and half 1 follows half 0.
  EXPECT_EQ(two.dispatch_landed_offset(0, 0, 0),
            two.signals_offset() + two.dispatch_signal_bytes() + two.combine_signal_bytes());
  EXPECT_EQ(two.combine_landed_offset(0, 0),
            two.dispatch_landed_offset(0, 0, 0) + two.dispatch_signal_bytes());
  EXPECT_LT(two.combine_landed_offset(0, two.num_experts() - 1), two.dispatch_signal_offset(1, 0, 0));
  EXPECT_EQ(two.dispatch_signal_offset(1, 0, 0), two.signals_offset() + two.signals_half_bytes());
  EXPECT_LE(two.combine_landed_offset(1, two.num_experts() - 1) + sizeof(uint64_t), two.dispatch_offset());
  // Signal ids count 8-byte words from the region's start (a loopback transport's numbering).
  EXPECT_EQ(two.signal_id(two.dispatch_signal_offset(0, 1, 2)), 1u * 4 + 2);
  EXPECT_EQ(two.signal_id(two.dispatch_signal_offset(1, 0, 0)), two.first_signal_id(1));
  EXPECT_EQ(two.first_signal_id(1), two.signals_per_half());
  // The send sources come after the combine buffer, sized for every token and slot, inside the region.
  EXPECT_EQ(two.send_messages_offset(), two.staging_offset() + two.staging_bytes());
  EXPECT_GE(two.send_messages_bytes(),
            static_cast<size_t>(two.max_tokens_per_rank) * two.dispatch_slot_bytes);
  EXPECT_EQ(two.send_sources_offset(), two.send_messages_offset() + two.send_messages_bytes());
  EXPECT_LE(two.send_source_offset(two.max_tokens_per_rank - 1, two.topk - 1) + common::kLowLatencyAlignment,
            two.end_offset());
  EXPECT_EQ(two.end_offset(), two.send_sources_offset() + two.send_sources_bytes());
  // Everything before the combine buffer's end moves only by the counters.
  EXPECT_EQ(two.staging_offset() - one.staging_offset(),
            static_cast<size_t>(common::kLowLatencyHalves) * two.landed_bytes());
}

// ---- what stays refused ---------------------------------------------------------------------------

// The symmetric engine needs one load/store domain: across nodes it is refused before anything runs.
TEST(CudaLowLatencyInternodeRefusals, TheSymmetricEngineAcrossNodesIsUnsupported) {
  SWITCHYARD_REQUIRE_GPU();
  const Case c = make("symmetric_across_nodes", 2, {4, 4}, 4, 2, 4);
  const Topology topology{2, 1};
  const Expected expected = expected_on(c, topology, seed_for("cuda_low_latency_internode/symmetric"));
  run_ranks(c.ranks, [&](Group& group) {
    BufferOptions options = cuda_buffer_options(c, group.rank(), Regions::symmetric, kTimeoutSeconds);
    options.topology = topology;
    GpuRank gpu(options, group);
    const DeviceInputs in = upload_inputs(expected.data[group.rank()], gpu.device, gpu.stream);
    const std::string message = refused<Unsupported>(
        [&] { gpu.buffer->symmetric_dispatch(dispatch_args(c, in.x, in.topk_idx, gpu.stream)); });
    EXPECT_NE(message.find("one load/store domain"), std::string::npos) << message;
    gpu.buffer->synchronize(gpu.stream);
  });
}

}  // namespace
}  // namespace switchyard::testing::expert_major
