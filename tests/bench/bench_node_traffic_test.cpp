// switchyard-bench across nodes, on a routing small enough to count by hand: the rows by link of the
// hierarchical normal engine (NodeTraffic) and of low_latency (DirectNodeTraffic), the bytes per link
// the report prints, and each engine's design bytes as the sum of its roles' passes.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "design_roofline.hpp"
#include "options.hpp"
#include "problem.hpp"
#include "progress.hpp"
#include "switchyard/topology.hpp"
#include "workload/workload.hpp"

namespace switchyard::bench {
namespace {

// 2 nodes x 2 ranks, 8 experts (rank r holds experts 2r and 2r + 1), top-2.
constexpr int kExperts = 8;
const Topology kTwoByTwo{4, 2};

workload::RankData rank_with_topk(const std::vector<int64_t>& topk_idx) {
  workload::RankData data;
  const int64_t tokens = static_cast<int64_t>(topk_idx.size()) / 2;
  data.topk_idx = Tensor::empty(DType::i64, {tokens, 2});
  for (size_t i = 0; i < topk_idx.size(); ++i) data.topk_idx.as<int64_t>()[i] = topk_idx[i];
  return data;
}

// Per token: its experts -> destination ranks (nodes); "own" is the source's node.
//   rank 0 (node 0): t0 {0, 1} -> rank 0 (own)           t1 {2, 4} -> ranks 1 (own), 2 (node 1)
//                    t2 {4, 6} -> ranks 2, 3 (node 1)
//   rank 1 (node 0): t0 {3, 3} -> rank 1 (own; two slots on one expert)
//   rank 2 (node 1): t0 {1, 2} -> ranks 0, 1 (node 0)
//   rank 3 (node 1): t0 {5, -} -> rank 2 (own)           t1 {0, 7} -> ranks 0 (node 0), 3 (own)
//                    t2 {-, -} -> nowhere
std::vector<workload::RankData> hand_routing() {
  return {rank_with_topk({0, 1, 2, 4, 4, 6}), rank_with_topk({3, 3}), rank_with_topk({1, 2}),
          rank_with_topk({5, -1, 0, 7, -1, -1})};
}

TEST(BenchNodeTraffic, NormalCountsRowsPerRankAndPerNodeTheOwnNodeApart) {
  const NodeTraffic traffic = node_traffic(hand_routing(), kTwoByTwo, kExperts);
  // (token, destination rank): 1 + 2 + 2, 1, 2, 1 + 2 + 0.
  EXPECT_EQ(traffic.nvlink_rows, 11);
  // (token, other node): r0 t1, r0 t2, r2 t0, r3 t1.
  EXPECT_EQ(traffic.rdma_rows, 4);
  // (token, own node): r0 t0, r0 t1, r1 t0, r3 t0, r3 t1.
  EXPECT_EQ(traffic.own_node_rows, 5);
  EXPECT_EQ(traffic.staged_rows(), 9);
  // (token, rank on another node): r0 t1 (1), r0 t2 (2), r2 t0 (2), r3 t1 (1).
  EXPECT_EQ(traffic.direct_rdma_rows, 6);
}

TEST(BenchNodeTraffic, LowLatencyCountsEverySlotByLinkAndTheTokensThatLeaveTheNode) {
  const DirectNodeTraffic cuda =
      direct_node_traffic(hand_routing(), kTwoByTwo, kExperts, /*landed_adds=*/true);
  // Slots to another node: r0 t1 (expert 4), r0 t2 (4, 6), r2 t0 (1, 2), r3 t1 (0).
  EXPECT_EQ(cuda.rdma_rows, 6);
  // Within the node: r0 t0 (0, 1), r0 t1 (2), r1 t0 (3, 3), r3 t0 (5), r3 t1 (7).
  EXPECT_EQ(cuda.nvlink_rows, 7);
  EXPECT_EQ(cuda.leaving_tokens, 4);  // r0 t1, r0 t2, r2 t0, r3 t1: each staged once
  // Each rank signals each expert once: 4 experts on the other node, 4 on its own.
  EXPECT_EQ(cuda.rdma_count_signals, 4 * 4);
  EXPECT_EQ(cuda.nvlink_count_signals, 4 * 4);
  EXPECT_EQ(cuda.rdma_landed_adds, 6);  // one with each RDMA row's put
  EXPECT_EQ(direct_node_traffic(hand_routing(), kTwoByTwo, kExperts, false).rdma_landed_adds, 0);  // cpu
}

// The hand routing's counts as the run's Traffic: d = 1000 (an fp8-like row), c = 800, 8 tokens.
Traffic hand_traffic(int64_t delivered_rows, int64_t input_row_bytes) {
  Traffic traffic;
  traffic.delivered_rows = delivered_rows;
  traffic.dispatch_row_bytes = 1000;
  traffic.combine_row_bytes = 800;
  traffic.input_row_bytes = input_row_bytes;
  traffic.source_tokens = 8;
  return traffic;
}

TEST(BenchNodeTraffic, NormalDesignBytesAreTheSumOfEachRolesPasses) {
  Traffic traffic = hand_traffic(11, 1000);
  traffic.nodes = node_traffic(hand_routing(), kTwoByTwo, kExperts);
  const int64_t x = 1000, d = 1000, c = 800, staged = 9, rows = 11, tokens = 8;
  const DesignTraffic design =
      design_traffic(BenchEngine::normal, traffic, /*single_node=*/false, std::nullopt);
  ASSERT_TRUE(design.dispatch_bytes && design.combine_bytes) << design.why_not;
  const int64_t rdma_sender = staged * (x + d);  // read x, write the send buffer, once per (token, node)
  const int64_t put = staged * 2 * d;            // loopback: read the send buffer, write the peer's ring
  const int64_t forwarder = rows * 2 * d;        // read the receive ring, write each wanted rank's ring
  const int64_t nvl_receiver = rows * 2 * d;     // read the ring, write recv_x
  EXPECT_EQ(*design.dispatch_bytes, rdma_sender + put + forwarder + nvl_receiver);
  EXPECT_EQ(*design.dispatch_bytes, 80000);
  const int64_t nvl_sender = rows * 2 * c;                // read y, write the forwarder's ring
  const int64_t reduction = rows * c + staged * c;        // read each rank's row, write one partial per node
  const int64_t combine_put = staged * 2 * c;             // read the partial, write the home's ring
  const int64_t rdma_receiver = staged * c + tokens * c;  // read each node's partial, write the output
  EXPECT_EQ(*design.combine_bytes, nvl_sender + reduction + combine_put + rdma_receiver);
  EXPECT_EQ(*design.combine_bytes, 61600);
  EXPECT_NE(design.passes.find("per (token, node)"), std::string::npos) << design.passes;
  // Without the rows by link the bench cannot count it, and says so.
  traffic.nodes.reset();
  const DesignTraffic uncounted = design_traffic(BenchEngine::normal, traffic, false, std::nullopt);
  EXPECT_FALSE(uncounted.dispatch_bytes.has_value());
  EXPECT_NE(uncounted.why_not.find("across nodes"), std::string::npos) << uncounted.why_not;
}

TEST(BenchNodeTraffic, NormalInPlaceDesignBytesReadEachRowOnceWhereItLies) {
  Traffic traffic = hand_traffic(13, 1600);
  const int64_t x = 1600, d = 1000, c = 800, rows = 13, tokens = 8;
  const DesignTraffic design = design_traffic(BenchEngine::normal, traffic, /*single_node=*/true,
                                              std::nullopt, std::nullopt, /*normal_rows_in_place=*/true);
  ASSERT_TRUE(design.dispatch_bytes && design.combine_bytes) << design.why_not;
  // Each receiver reads the source's row in place and writes recv_x; each home reads each row once.
  EXPECT_EQ(*design.dispatch_bytes, rows * (x + d));
  EXPECT_EQ(*design.combine_bytes, rows * c + tokens * c);
  EXPECT_NE(design.passes.find("in place"), std::string::npos) << design.passes;
  // Through the rings: the staged passes.
  EXPECT_EQ(*design_traffic(BenchEngine::normal, traffic, true, std::nullopt).dispatch_bytes,
            rows * (x + 3 * d));
}

TEST(BenchNodeTraffic, LowLatencyDesignBytesAddThePutsReadsAndTheStagingCopies) {
  Traffic traffic = hand_traffic(13, 1600);  // bf16 x, cast to an fp8 row of 1000 bytes by the engine
  traffic.direct_nodes = direct_node_traffic(hand_routing(), kTwoByTwo, kExperts, true);
  const int64_t x = 1600, d = 1000, c = 800, rows = 13, rdma_rows = 6, leaving = 4, tokens = 8;
  const DesignTraffic design =
      design_traffic(BenchEngine::low_latency, traffic, /*single_node=*/false, std::nullopt);
  ASSERT_TRUE(design.dispatch_bytes && design.combine_bytes) << design.why_not;
  // One node's 4 passes per row, the put's read of the send area per RDMA row, and the staging write
  // of each leaving token (from shared memory: no read counted).
  EXPECT_EQ(*design.dispatch_bytes, rows * (x + 3 * d) + rdma_rows * d + leaving * d);
  EXPECT_EQ(*design.dispatch_bytes, 69800);
  // One node's 3 per row + the output, and per RDMA row the copy of y into the combine buffer (no
  // zero_copy) the put reads.
  EXPECT_EQ(*design.combine_bytes, rows * 3 * c + tokens * c + rdma_rows * 2 * c);
  EXPECT_EQ(*design.combine_bytes, 47200);
  // On one node the formula is unchanged.
  EXPECT_EQ(*design_traffic(BenchEngine::low_latency, traffic, true, std::nullopt).dispatch_bytes,
            rows * (x + 3 * d));
  // symmetric runs on one node only: not counted across nodes.
  const DesignTraffic symmetric = design_traffic(BenchEngine::symmetric, traffic, false, std::nullopt);
  EXPECT_FALSE(symmetric.dispatch_bytes.has_value());
  EXPECT_NE(symmetric.why_not.find("one node"), std::string::npos) << symmetric.why_not;
}

TEST(BenchNodeTraffic, BytesByLinkCountRowPayloadsForNormalAndMessagesAndSignalsForLowLatency) {
  Traffic normal = hand_traffic(11, 1000);
  normal.nodes = node_traffic(hand_routing(), kTwoByTwo, kExperts);
  const NodeBytes forwarded = *normal.node_bytes();
  EXPECT_TRUE(forwarded.forwarded);
  EXPECT_EQ(forwarded.rdma_dispatch, 4 * 1000);
  EXPECT_EQ(forwarded.nvlink_dispatch, 11 * 1000);
  EXPECT_EQ(forwarded.direct_rdma_combine, 6 * 800);
  EXPECT_EQ(forwarded.own_node_dispatch, 5 * 1000);
  EXPECT_EQ(forwarded.own_node_combine, 5 * 800);
  EXPECT_EQ(forwarded.rdma_dispatch_signals, 0);

  Traffic ll = hand_traffic(13, 1600);
  ll.direct_nodes = direct_node_traffic(hand_routing(), kTwoByTwo, kExperts, true);
  ll.direct_nodes->dispatch_message_bytes = 1040;  // the 1000-byte row and scales aligned, + 16 source bytes
  const NodeBytes direct = *ll.node_bytes();
  EXPECT_FALSE(direct.forwarded);
  // 16 count adds + 6 landed adds, 8 bytes each.
  EXPECT_EQ(direct.rdma_dispatch_signals, 22);
  EXPECT_EQ(direct.rdma_combine_signals, 22);
  EXPECT_EQ(direct.rdma_dispatch, 6 * 1040 + 22 * 8);
  EXPECT_EQ(direct.nvlink_dispatch, 7 * 1040 + 16 * 8);
  EXPECT_EQ(direct.rdma_combine, 6 * 800 + 22 * 8);
  EXPECT_EQ(direct.nvlink_combine, 7 * 800 + 16 * 8);
  EXPECT_EQ(direct.direct_rdma_dispatch, direct.rdma_dispatch);  // no hierarchy to save anything
  EXPECT_EQ(direct.own_node_dispatch, 0);

  EXPECT_FALSE(hand_traffic(11, 1000).node_bytes().has_value());  // one node
}

// make_problem counts by link for normal and low_latency across nodes (the message size from the
// library's own message type), and not for symmetric, which runs on one node only.
TEST(BenchNodeTraffic, MakeProblemCountsTheEnginesThatRunAcrossNodes) {
  const BenchOptions options =
      resolve(parse_command_line({"--backend", "cpu", "--engine", "all", "--ranks", "4", "--ranks-per-node",
                                  "2", "--tokens", "6", "--hidden", "512", "--experts", "8", "--topk", "2",
                                  "--dtype", "fp8"}),
              /*cuda_is_available=*/false, /*visible_devices=*/0);
  Progress progress;
  const Problem problem = make_problem(options, progress);
  ASSERT_TRUE(problem.traffic.nodes.has_value());
  EXPECT_EQ(problem.traffic.nodes->nvlink_rows, problem.traffic.delivered_rows);
  const std::optional<DirectNodeTraffic>& ll = problem.low_latency.traffic.direct_nodes;
  ASSERT_TRUE(ll.has_value());
  EXPECT_EQ(ll->rdma_rows + ll->nvlink_rows, problem.low_latency.traffic.delivered_rows);
  // fp8 row 512, 4 scales (16 bytes), the source fields 16: each 16-byte aligned.
  EXPECT_EQ(ll->dispatch_message_bytes, 512 + 16 + 16);
  EXPECT_EQ(ll->rdma_landed_adds, 0);  // cpu: no rows-landed adds
  EXPECT_FALSE(problem.symmetric.traffic.direct_nodes.has_value());
}

}  // namespace
}  // namespace switchyard::bench
