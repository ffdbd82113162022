// The CPU `low_latency` engine across nodes (ranks_per_node < num_ranks): stores within a node,
// loopback transport puts and signal adds to other nodes, with the transport's delays and
// reordering off and on. Expert-major outputs do not depend on the topology, so every case is
// checked bit for bit against the reference and against the same inputs on one node
// (DESIGN.md, "low_latency and symmetric interface: expert-major" and Nodes).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <future>
#include <string>
#include <vector>

#include "common/sym_heap.hpp"
#include "cpu/low_latency/link.hpp"
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
// NOTES: far above what any case needs, yet a hang fails well before ctest's TIMEOUT.
constexpr double kTestTimeoutSeconds = 20.0;

// A case's name in this suite.
std::string name_of(const NodesCase& n) {
  return n.c.name + (n.delays ? "_delayed" : "_prompt");
}

BufferOptions nodes_options(const Case& c, const Topology& topology, int rank, double timeout_seconds) {
  BufferOptions options = buffer_options(c, rank, kRegions, timeout_seconds);
  options.topology = topology;
  return options;
}

// Runs body(group, buffer) on every rank (threads) with a connected CPU buffer of `topology`.
void with_node_buffers(const Case& c, const Topology& topology,
                       const std::function<void(Group&, Buffer&)>& body,
                       double timeout_seconds = kTestTimeoutSeconds) {
  run_ranks(c.ranks, [&](Group& group) {
    Buffer buffer(nodes_options(c, topology, group.rank(), timeout_seconds));
    buffer.connect(group.allgather(buffer.local_handle()));
    body(group, buffer);
    group.barrier();
  });
}

// ---- bitwise round trips ------------------------------------------------------------------------

class LowLatencyInternodeRoundTrip : public ::testing::TestWithParam<NodesCase> {};

TEST_P(LowLatencyInternodeRoundTrip, MatchesTheReferenceAndOneNodeBitwise) {
  const NodesCase& n = GetParam();
  const Case& c = n.c;
  const uint64_t seed = testing::seed_for("low_latency_internode/" + c.name);
  const Expected expected = expected_on(c, n.topology(), seed);
  Failures failures;
  {
    const LoopbackDelays delays(n.delays, seed);
    with_node_buffers(c, n.topology(), [&](Group& group, Buffer& buffer) {
      const int rank = group.rank();
      const workload::RankData& data = expected.data[rank];
      // Preallocated, poisoned outputs on even ranks; the library allocates on odd ones.
      const PoisonedOutputs out = rank % 2 == 0 ? poisoned_outputs(c, data.x.size(0)) : PoisonedOutputs();
      LowLatencyDispatchArgs args = dispatch_args(c, data);
      out.attach(args);
      const LowLatencyDispatchResult dispatched = buffer.low_latency_dispatch(args);
      check_dispatch(dispatched, expected.dispatched[rank], "the reference", rank, failures);
      if (c.fp8.use_ue8m0) return;

      const Tensor y = expert_outputs(dispatched.recv_x, dispatched.recv_x_scales, rank);
      LowLatencyCombineArgs cargs = combine_args(data, dispatched.handle, y);
      out.attach(cargs);
      const LowLatencyCombineResult combined = buffer.low_latency_combine(cargs);
      compare(combined.combined_x, expected.combined[rank], "combined_x", rank, failures);
    });
  }
  // The same inputs on one node (the intranode protocol), for the claim that nodes change nothing.
  const std::vector<Outputs> one_node = run_cpu_engine(Engine::low_latency, c, expected);
  for (int rank = 0; rank < c.ranks; ++rank) {
    check_outputs(one_node[rank], reference_outputs(expected, rank), "the reference (one node)", rank,
                  failures);
  }
  expect_none(failures, seed);
}

std::vector<NodesCase> round_trip_cases() {
  using workload::Routing;
  // nodes x ranks_per_node: 2x1, 2x2, 2x4, 3x2 and 4x2; k from 1 to 9; bf16 and fp8.
  const std::vector<NodesCase> shapes = {
      {make("n2x1_k2", 2, {6, 4}, 6, 2, 4), 1},
      {make("n2x2_k3", 4, {5, 3, 0, 5}, 5, 3, 8), 2},
      {make("n2x4_k9", 8, {4, 2, 4, 0, 3, 4, 1, 4}, 4, 9, 16, 128), 4},
      {with_fp8(make("n3x2_fp8_k4", 6, {4, 3, 4, 1, 4, 2}, 4, 4, 12, 256), false, false), 2},
      {with_fp8(make("n4x2_fp8_round_scale_k1", 8, {3, 0, 3, 2, 3, 1, 3, 3}, 3, 1, 8, 128), true, false), 2},
      {with_fp8(make("n2x2_fp8_ue8m0", 4, {4, 3, 4, 2}, 4, 2, 8, 640), false, true), 2},
      {make("n2x2_k2_hidden_72", 4, {4, 4, 1, 3}, 4, 2, 8, 72), 2},
      {make("n2x2_zero_tokens", 4, {0, 0, 0, 0}, 4, 2, 8), 2},
      {with_routing(make("n2x1_all_invalid", 2, {4, 4}, 4, 3, 4), Routing::all_invalid), 1},
      // Every token of every rank on one expert: its rows fill R * max exactly, 3 of 4 sources remote.
      {with_routing(make("n4x1_one_expert_full", 4, {5, 5, 5, 5}, 5, 2, 8), Routing::one_expert), 1},
  };
  return delays_off_and_on(shapes);
}

INSTANTIATE_TEST_SUITE_P(Topologies, LowLatencyInternodeRoundTrip, ::testing::ValuesIn(round_trip_cases()),
                         [](const auto& info) { return name_of(info.param); });

// One dispatch and combine on every rank across nodes, the combine with `expected`'s biases and LogFMT
// (attach_biases), against `expected`'s combined rows.
void check_combine_across_nodes(const NodesCase& n, const Expected& expected, uint64_t seed) {
  const Case& c = n.c;
  Failures failures;
  {
    const LoopbackDelays delays(n.delays, seed);
    with_node_buffers(c, n.topology(), [&](Group& group, Buffer& buffer) {
      const int rank = group.rank();
      const workload::RankData& data = expected.data[rank];
      const LowLatencyDispatchResult dispatched = buffer.low_latency_dispatch(dispatch_args(c, data));
      LowLatencyCombineArgs cargs = combine_args(data, dispatched.handle, expected.ys[rank]);
      attach_biases(expected, rank, cargs);
      const LowLatencyCombineResult combined = buffer.low_latency_combine(cargs);
      compare(combined.combined_x, expected.combined[rank], "combined_x", rank, failures);
    });
  }
  expect_none(failures, seed);
}

// Combine biases across nodes: the accumulator starts at bias0 + bias1 on the home rank, as on one node.
TEST(LowLatencyInternode, CombineWithBiasesMatchesTheReferenceBitwise) {
  const NodesCase n{make("n2x2_biases", 4, {5, 3, 0, 5}, 5, 3, 8), 2, true};
  const Case& c = n.c;
  const uint64_t seed = testing::seed_for("low_latency_internode/" + c.name);
  check_combine_across_nodes(n, with_biases(c, expected_on(c, n.topology(), seed), seed, true, true), seed);
}

// LogFMT-10 across nodes: the packed rows are transport puts of their own length (cast blocks 168
// bytes, the rest 256), decoded on the home rank as on one node.
TEST(LowLatencyInternode, LogfmtCombineMatchesTheReferenceBitwise) {
  const NodesCase n{make("n2x2_logfmt", 4, {5, 3, 0, 5}, 5, 3, 8, 384), 2, true};
  const Case& c = n.c;
  const uint64_t seed = testing::seed_for("low_latency_internode/" + c.name);
  const Expected drawn = with_rows_in_both_formats(expected_on(c, n.topology(), seed));
  const auto [cast, plain] = cast_and_plain_blocks(drawn);
  ASSERT_GT(cast, 0) << "no block of the expert outputs is cast: the test would not see LogFMT";
  ASSERT_GT(plain, 0) << "every block is cast: the test would not see raw blocks";
  for (bool biased : {false, true}) {
    SCOPED_TRACE(biased ? "biases" : "no biases");
    check_combine_across_nodes(n, with_logfmt(c, biased ? with_biases(c, drawn, seed, true, true) : drawn),
                               seed);
  }
}

// Across nodes the packed rows are staged in the combine buffer (by the CUDA engine), so an x that
// lies there is refused with use_logfmt on every backend, before anything is sent.
TEST(LowLatencyInternode, LogfmtRefusesAnXInsideTheCombineBuffer) {
  const Case c = make("n2x1_logfmt_in_buffer", 2, {4, 4}, 4, 2, 4, 128);
  const uint64_t seed = testing::seed_for("low_latency_internode/" + c.name);
  const Expected expected = expected_on(c, Topology{2, 1}, seed);
  std::vector<std::string> messages(c.ranks);
  with_node_buffers(c, Topology{2, 1}, [&](Group& group, Buffer& buffer) {
    const int rank = group.rank();
    const LowLatencyDispatchResult dispatched =
        buffer.low_latency_dispatch(dispatch_args(c, expected.data[rank]));
    const TensorView in_buffer = buffer.low_latency_combine_buffer(dispatched.handle);
    std::memcpy(in_buffer.data, expected.ys[rank].data(), expected.ys[rank].nbytes());
    LowLatencyCombineArgs cargs = combine_args(expected.data[rank], dispatched.handle, in_buffer);
    cargs.use_logfmt = true;
    try {
      buffer.low_latency_combine(cargs);
    } catch (const InvalidArgument& error) {
      messages[rank] = error.what();
    }
  });
  for (int rank = 0; rank < c.ranks; ++rank) {
    EXPECT_EQ(messages[rank].rfind("use_logfmt:", 0), 0u) << "rank " << rank << ": " << messages[rank];
  }
}

// ---- the double buffer, hooks and changing shapes across nodes ----------------------------------

// Consecutive calls alternate halves and reuse signal words that arrived as adds: each must start
// from a cleared word, also when a call with fewer experts moves the combine words' writers.
TEST(LowLatencyInternode, BackToBackCallsWithHooksAndFewerExpertsStayBitwise) {
  const Topology topology{4, 2};
  const Case wide = make("back_to_back_wide", 4, {5, 3, 5, 2}, 5, 3, 8, 128);
  Case narrow = wide;  // one local expert per rank instead of two, in the same buffer
  narrow.name = "back_to_back_narrow";
  narrow.num_experts = 4;
  narrow.topk = 2;
  const uint64_t seed = testing::seed_for("low_latency_internode/back_to_back");
  const Expected first = expected_on(wide, topology, seed);
  const Expected second = expected_on(wide, topology, seed + 1);
  const Expected third = expected_on(narrow, topology, seed + 2);
  Failures failures;
  const LoopbackDelays delays(true, seed);
  with_node_buffers(wide, topology, [&](Group& group, Buffer& buffer) {
    const int rank = group.rank();
    for (int round = 0; round < 3; ++round) {
      // Two dispatches, then two combines, the first through hooks; no synchronisation between ranks.
      LowLatencyDispatchArgs hooked = dispatch_args(wide, first.data[rank]);
      hooked.return_recv_hook = true;
      LowLatencyDispatchResult a = buffer.low_latency_dispatch(hooked);
      a.hook();
      LowLatencyDispatchResult b = buffer.low_latency_dispatch(dispatch_args(wide, second.data[rank]));
      check_dispatch(a, first.dispatched[rank], "the reference (first)", rank, failures);
      check_dispatch(b, second.dispatched[rank], "the reference (second)", rank, failures);
      const Tensor ya = expert_outputs(a.recv_x, {}, rank);
      const Tensor yb = expert_outputs(b.recv_x, {}, rank);
      LowLatencyCombineResult combined_b =
          buffer.low_latency_combine(combine_args(second.data[rank], b.handle, yb));
      LowLatencyCombineArgs hooked_combine = combine_args(first.data[rank], a.handle, ya);
      hooked_combine.return_recv_hook = true;
      LowLatencyCombineResult combined_a = buffer.low_latency_combine(hooked_combine);
      combined_a.hook();
      compare(combined_a.combined_x, first.combined[rank], "combined_x (first)", rank, failures);
      compare(combined_b.combined_x, second.combined[rank], "combined_x (second)", rank, failures);

      LowLatencyDispatchResult c = buffer.low_latency_dispatch(dispatch_args(narrow, third.data[rank]));
      check_dispatch(c, third.dispatched[rank], "the reference (fewer experts)", rank, failures);
      const Tensor yc = expert_outputs(c.recv_x, {}, rank);
      LowLatencyCombineResult combined_c =
          buffer.low_latency_combine(combine_args(third.data[rank], c.handle, yc));
      compare(combined_c.combined_x, third.combined[rank], "combined_x (fewer experts)", rank, failures);
    }
  });
  expect_none(failures, seed);
}

// ---- the link: stores within the node, transport puts across -------------------------------------

// Two ranks' heaps in one address space, as a SymHeap of rank 0.
struct TwoHeaps {
  static constexpr size_t kBytes = 4096;
  std::vector<uint8_t> own = std::vector<uint8_t>(kBytes, 0);
  std::vector<uint8_t> peer = std::vector<uint8_t>(kBytes, 0);
  common::SymHeap heap;

  TwoHeaps() {
    heap.base = own.data();
    heap.bytes = kBytes;
    heap.rank = 0;
    heap.num_ranks = 2;
    heap.peer_offset[0] = 0;
    heap.peer_offset[1] = static_cast<int64_t>(reinterpret_cast<uintptr_t>(peer.data()) -
                                               reinterpret_cast<uintptr_t>(own.data()));
  }
};

TEST(LowLatencyLink, WritesToAnotherNodeAreTransportPutsAndSignalsAreAdds) {
  TwoHeaps two;
  const uint8_t row[48] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  {
    cpu::LowLatencyLink link(two.heap, Topology{2, 1}, TransportOptions{});
    EXPECT_FALSE(link.same_node(1));
    link.write(1, two.heap.base + 256, row, sizeof(row));
    EXPECT_EQ(link.bytes_across_nodes(), sizeof(row)) << "the row did not go through the transport";
    auto* word = reinterpret_cast<uint64_t*>(two.heap.base + 128);
    link.signal(1, word, 0x500000003ull);
    // The reader's side: it clears a consumed word, so that the next add starts from zero.
    *reinterpret_cast<uint64_t*>(two.own.data() + 128) = 7;
    cpu::LowLatencyLink::clear_after_use(reinterpret_cast<uint64_t*>(two.own.data() + 128));
    EXPECT_EQ(*reinterpret_cast<uint64_t*>(two.own.data() + 128), 0u);
  }  // the link's teardown flushes what is still in flight
  EXPECT_EQ(std::memcmp(two.peer.data() + 256, row, sizeof(row)), 0);
  EXPECT_EQ(*reinterpret_cast<uint64_t*>(two.peer.data() + 128), 0x500000003ull);
  EXPECT_EQ(two.own[256], 0) << "a put landed in the sender's own heap";
}

TEST(LowLatencyLink, WritesWithinTheNodeAreStores) {
  TwoHeaps two;
  const uint8_t row[32] = {9, 8, 7};
  cpu::LowLatencyLink link(two.heap, Topology{2, 2}, TransportOptions{});
  EXPECT_TRUE(link.same_node(1));
  link.write(1, two.heap.base + 512, row, sizeof(row));
  link.signal(1, reinterpret_cast<uint64_t*>(two.heap.base + 64), 42);
  EXPECT_EQ(link.bytes_across_nodes(), 0u);
  EXPECT_EQ(std::memcmp(two.peer.data() + 512, row, sizeof(row)), 0);
  EXPECT_EQ(*reinterpret_cast<uint64_t*>(two.peer.data() + 64), 42u);
  EXPECT_EQ(two.own[512], 0) << "a store landed in the sender's own heap";
}

// ---- a rank that never arrives ------------------------------------------------------------------

// Rank 3 (on node 1 of 2 x 2) skips one call: every other rank's receiver times out on it, with a
// TimeoutError naming its own rank, the role and the missing source.
void expect_missing_rank_times_out(bool skip_combine, const char* role) {
  constexpr double kTimeoutSeconds = 1.0;
  constexpr double kDeadlineSeconds = 15.0;
  constexpr int kMissing = 3;
  const Topology topology{4, 2};
  const Case c = make(skip_combine ? "missing_in_combine" : "missing_in_dispatch", 4, {4, 4, 4, 4}, 4, 2, 8);
  const uint64_t seed = testing::seed_for("low_latency_internode/" + c.name);
  const Expected expected = expected_on(c, topology, seed);
  std::vector<Caught> caught(c.ranks);
  std::promise<void> others_done;
  std::shared_future<void> release = others_done.get_future().share();
  std::atomic<int> remaining{c.ranks - 1};
  const LoopbackDelays delays(true, seed);
  run_ranks(c.ranks, [&](Group& group) {
    const int rank = group.rank();
    {
      Buffer buffer(nodes_options(c, topology, rank, kTimeoutSeconds));
      buffer.connect(group.allgather(buffer.local_handle()));
      const workload::RankData& data = expected.data[rank];
      if (rank == kMissing) {
        if (skip_combine) buffer.low_latency_dispatch(dispatch_args(c, data));
        // Keeps its heap until the others are done with it.
        release.wait_for(std::chrono::seconds(60));
        return;
      }
      caught[rank] = catch_timeout([&] {
        LowLatencyDispatchResult dispatched = buffer.low_latency_dispatch(dispatch_args(c, data));
        if (!skip_combine) return;
        buffer.low_latency_combine(combine_args(data, dispatched.handle, expected.ys[rank]));
      });
    }
    if (--remaining == 0) others_done.set_value();
  });
  for (int rank = 0; rank < c.ranks; ++rank) {
    if (rank == kMissing) continue;
    const std::string& message = caught[rank].message;
    SCOPED_TRACE("rank " + std::to_string(rank) + ": " + message);
    expect_timed_out(caught[rank], kTimeoutSeconds, kDeadlineSeconds);
    EXPECT_NE(message.find("rank " + std::to_string(rank) + " (cpu " + role), std::string::npos);
    EXPECT_NE(message.find("rank " + std::to_string(kMissing)), std::string::npos)
        << "does not name the source";
    if (topology.node_of(rank) != topology.node_of(kMissing)) {
      EXPECT_NE(message.find("another node"), std::string::npos) << "does not say the source is remote";
    }
  }
}

TEST(LowLatencyInternodeTimeouts, ARankMissingFromDispatchEndsInTimeoutErrorOnTheOthers) {
  expect_missing_rank_times_out(false, "low_latency dispatch receiver");
}

TEST(LowLatencyInternodeTimeouts, ARankMissingFromCombineEndsInTimeoutErrorOnTheOthers) {
  expect_missing_rank_times_out(true, "low_latency combine receiver");
}

}  // namespace
}  // namespace switchyard::testing::expert_major
