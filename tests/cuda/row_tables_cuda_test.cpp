// The symmetric kernels' per-call row tables (cuda/symmetric/tables.cuh: RowTables::build) built on the GPU,
// against a plain host computation of the same prefix sums: each expert's ranks' begins and total, and each
// rank's walk over the rows that fit the capacity. The build takes a segmented warp sum with R <= 32 ranks
// and slices the experts over several warps a rank where ranks are fewer than warps and experts more than 32
// (the dispatch's build; the push combine's keeps a warp a rank), so the shapes cover each side of those
// edges (R = 1, 31, 32, 33; L = 1, 32, 33, 256), capacities that cut through the experts, block sizes of 2,
// 16 and 32 warps, and both builds. Skipped (reported) where no GPU is present.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "cuda/row_tables_check.hpp"
#include "switchyard/buffer.hpp"

namespace switchyard::testing {
namespace {

struct HostRowTables {
  std::vector<int32_t> begin, start, total;
};

HostRowTables host_tables(const std::vector<int32_t>& count, int num_ranks, int local_experts,
                          int64_t capacity) {
  HostRowTables tables;
  tables.begin.assign(count.size(), 0);
  tables.total.assign(local_experts, 0);
  tables.start.assign(static_cast<size_t>(num_ranks) * (local_experts + 1), 0);
  for (int l = 0; l < local_experts; ++l) {
    int32_t rows = 0;
    for (int r = 0; r < num_ranks; ++r) {
      tables.begin[l * num_ranks + r] = rows;
      rows += count[l * num_ranks + r];
    }
    tables.total[l] = rows;
  }
  for (int r = 0; r < num_ranks; ++r) {
    int32_t walked = 0;
    for (int l = 0; l < local_experts; ++l) {
      tables.start[r * (local_experts + 1) + l] = walked;
      const int64_t room = capacity - tables.begin[l * num_ranks + r];
      walked += static_cast<int32_t>(std::clamp<int64_t>(room, 0, count[l * num_ranks + r]));
    }
    tables.start[r * (local_experts + 1) + local_experts] = walked;
  }
  return tables;
}

TEST(SymmetricRowTablesCuda, BuiltTablesMatchTheHostPrefixSumsAtEveryShapeCapacityAndBlockSize) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device: GPU tests are skipped, not passed";
  const std::vector<std::pair<int, int>> shapes = {
      {1, 1},   {1, 8},   {1, 32}, {1, 33}, {1, 256}, {2, 31}, {3, 100}, {5, 7},   {8, 32}, {8, 33},  {8, 64},
      {16, 16}, {16, 40}, {31, 3}, {32, 8}, {32, 65}, {33, 5}, {64, 40}, {128, 2}, {7, 1},  {15, 300}};
  std::mt19937 random(20261207);
  int checked = 0;
  for (const auto& [num_ranks, local_experts] : shapes) {
    for (int zeros_percent : {0, 30, 100}) {
      std::vector<int32_t> count(static_cast<size_t>(num_ranks) * local_experts);
      std::uniform_int_distribution<int> rows(1, 40), percent(0, 99);
      for (int32_t& entry : count) entry = percent(random) < zeros_percent ? 0 : rows(random);
      int32_t largest = 1;
      for (int l = 0; l < local_experts; ++l) {
        int32_t sum = 0;
        for (int r = 0; r < num_ranks; ++r) sum += count[l * num_ranks + r];
        largest = std::max(largest, sum);
      }
      // Room for every row, a capacity that cuts most experts' rows, and a single row.
      for (int64_t capacity : {int64_t{largest} + 5, int64_t{std::max(1, largest / 2)}, int64_t{1}}) {
        const HostRowTables want = host_tables(count, num_ranks, local_experts, capacity);
        for (int threads : {64, 512, 1024}) {
          for (bool slice : {true, false}) {
            const DeviceRowTables got =
                build_row_tables_on_device(count, num_ranks, local_experts, capacity, threads, slice);
            const std::string where =
                "R=" + std::to_string(num_ranks) + " L=" + std::to_string(local_experts) +
                " zeros=" + std::to_string(zeros_percent) + "% capacity=" + std::to_string(capacity) +
                " threads=" + std::to_string(threads) + (slice ? " sliced" : " unsliced");
            ASSERT_EQ(got.begin, want.begin) << "begin, " << where;
            ASSERT_EQ(got.total, want.total) << "total, " << where;
            ASSERT_EQ(got.start, want.start) << "start, " << where;
            ++checked;
          }
        }
      }
    }
  }
  EXPECT_EQ(checked, 21 * 3 * 3 * 3 * 2);
}

}  // namespace
}  // namespace switchyard::testing
