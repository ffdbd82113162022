// The fused MoE kernel's work order (common/moe_fused_schedule.hpp): every unit exactly once, every
// GEMM 2 unit after all GEMM 1 units of its rows, the index mapping and its inverse, and the pairs'
// experts, against brute-force enumerations.
#include "common/moe_fused_schedule.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <tuple>
#include <vector>

namespace switchyard::common {
namespace {

using UnitKey = std::tuple<int, int32_t, int32_t>;  // kind, pair, n_block

UnitKey key(const MoeUnit& unit) {
  return {static_cast<int>(unit.kind), unit.pair, unit.n_block};
}

// The order as the header describes it, built step by step.
std::vector<UnitKey> enumerate_by_steps(const MoeFusedOrder& order) {
  std::vector<UnitKey> units;
  for (int32_t step = 0; step < order.pairs + order.lag; ++step) {
    if (step < order.pairs) {
      for (int32_t n = 0; n < order.l1_n_blocks; ++n) units.emplace_back(1, step, n);
    }
    if (step >= order.lag) {
      for (int32_t n = 0; n < order.l2_n_blocks; ++n) units.emplace_back(2, step - order.lag, n);
    }
  }
  return units;
}

void expect_order_holds(const MoeFusedOrder& order) {
  SCOPED_TRACE(::testing::Message() << "pairs " << order.pairs << ", n1 " << order.l1_n_blocks << ", n2 "
                                    << order.l2_n_blocks << ", lag " << order.lag);
  const std::vector<UnitKey> expected = enumerate_by_steps(order);
  ASSERT_EQ(order.units(), static_cast<int64_t>(expected.size()));
  std::set<UnitKey> seen;
  std::map<int32_t, int64_t> last_gemm1, first_gemm2;  // per pair
  for (int64_t index = 0; index < order.units(); ++index) {
    const MoeUnit unit = order.unit_at(index);
    ASSERT_EQ(key(unit), expected[static_cast<size_t>(index)]) << "index " << index;
    ASSERT_TRUE(seen.insert(key(unit)).second) << "index " << index << " repeats a unit";
    ASSERT_EQ(order.index_of(unit), index);
    if (unit.kind == MoeUnitKind::gemm1) {
      last_gemm1[unit.pair] = std::max(last_gemm1[unit.pair], index);
    } else if (first_gemm2.count(unit.pair) == 0) {
      first_gemm2[unit.pair] = index;
    }
  }
  // Every unit of every pair, each once.
  EXPECT_EQ(seen.size(), static_cast<size_t>(order.pairs) * (order.l1_n_blocks + order.l2_n_blocks));
  // A pair's GEMM 2 units come after all its GEMM 1 units, with the lag's other units between.
  for (int32_t pair = 0; pair < order.pairs; ++pair) {
    ASSERT_LT(last_gemm1.at(pair), first_gemm2.at(pair)) << "pair " << pair;
    const int32_t steps_between = std::max(0, std::min(order.lag, order.pairs - pair) - 1);
    EXPECT_GE(first_gemm2.at(pair) - last_gemm1.at(pair) - 1,
              static_cast<int64_t>(steps_between) * order.l1_n_blocks)
        << "pair " << pair;
  }
}

TEST(MoeFusedSchedule, EveryUnitOnceAndGemm2AfterItsRowsGemm1ForAnyLag) {
  for (int32_t pairs : {0, 1, 2, 5, 17}) {
    for (int32_t lag : {0, 1, 2, 3, 5, 16, 40}) {
      for (auto [n1, n2] : {std::pair<int32_t, int32_t>{1, 1}, {16, 56}, {3, 2}, {8, 1}}) {
        expect_order_holds(MoeFusedOrder{pairs, n1, n2, lag});
      }
    }
  }
}

TEST(MoeFusedSchedule, BlockMFollowsTheExpectedRowsPerExpert) {
  // DeepSeek-V3 on 8 ranks: R N K / E rows per expert.
  EXPECT_EQ(moe_fused_block_m(8 * 128 * 8 / 256), kMoeFusedSmallBlockM);   // decode, 32
  EXPECT_EQ(moe_fused_block_m(8 * 4096 * 8 / 256), kMoeFusedLargeBlockM);  // prefill, 1024
  EXPECT_EQ(moe_fused_block_m(0), kMoeFusedSmallBlockM);
  EXPECT_EQ(moe_fused_block_m(kMoeFusedSmallBlockM), kMoeFusedSmallBlockM);
  EXPECT_EQ(moe_fused_block_m(kMoeFusedSmallBlockM + 1), kMoeFusedLargeBlockM);
  EXPECT_EQ(moe_fused_m_blocks(0, 64), 0);
  EXPECT_EQ(moe_fused_m_blocks(1, 64), 1);
  EXPECT_EQ(moe_fused_m_blocks(64, 64), 1);
  EXPECT_EQ(moe_fused_m_blocks(65, 64), 2);
}

TEST(MoeFusedSchedule, TheLagCoversOneGridOfGemm1UnitsAndIsNeverZero) {
  EXPECT_EQ(moe_fused_lag(132, 16), 9);  // 9 pairs of 16 GEMM 1 units: 144 >= 132
  EXPECT_EQ(moe_fused_lag(132, 132), 1);
  EXPECT_EQ(moe_fused_lag(132, 1000), 1);
  EXPECT_EQ(moe_fused_lag(1, 16), 1);
  EXPECT_EQ(moe_fused_lag(132, 0), 1);
  for (int grid : {1, 16, 132}) {
    for (int32_t n1 : {1, 7, 16, 64}) {
      const int32_t lag = moe_fused_lag(grid, n1);
      EXPECT_GE(static_cast<int64_t>(lag) * n1, grid);
      EXPECT_LT(static_cast<int64_t>(lag - 1) * n1, std::max(grid, n1));
    }
  }
}

TEST(MoeFusedSchedule, PairsMapToTheirExpertsAndMBlocksSkippingExpertsWithoutRows) {
  std::mt19937 random(7);
  for (int trial = 0; trial < 50; ++trial) {
    const int local_experts = 1 + static_cast<int>(random() % 40);
    const int block_m = trial % 2 == 0 ? 64 : 128;
    std::vector<int64_t> rows(static_cast<size_t>(local_experts));
    for (int64_t& r : rows) r = random() % 3 == 0 ? 0 : static_cast<int64_t>(random() % 700);
    std::vector<int32_t> starts(static_cast<size_t>(local_experts) + 1);
    const int32_t pairs = moe_fused_m_block_starts(rows.data(), local_experts, block_m, starts.data());
    // Brute force: the pairs expert by expert.
    std::vector<std::pair<int, int32_t>> expected;  // expert, m_block
    for (int e = 0; e < local_experts; ++e) {
      for (int64_t m = 0; m * block_m < rows[static_cast<size_t>(e)]; ++m) expected.emplace_back(e, m);
    }
    ASSERT_EQ(pairs, static_cast<int32_t>(expected.size()));
    EXPECT_EQ(starts.back(), pairs);
    for (int32_t pair = 0; pair < pairs; ++pair) {
      const int expert = moe_fused_pair_expert(starts.data(), local_experts, pair);
      EXPECT_EQ(expert, expected[static_cast<size_t>(pair)].first) << "trial " << trial << ", pair " << pair;
      EXPECT_EQ(pair - starts[static_cast<size_t>(expert)], expected[static_cast<size_t>(pair)].second);
    }
  }
}

}  // namespace
}  // namespace switchyard::common
