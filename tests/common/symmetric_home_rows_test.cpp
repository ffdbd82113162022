// Where an expert-output row goes home (common/symmetric_home_rows.hpp): every row of every home's range
// at its combine row in that home's heap (through the peer offset), in the half it is given; and no place
// for what the push combine would not write either: an overflowed dispatch, a masked home or rank, a row
// past the ranges or the capacity, a token or slot out of range, a count out of range.
#include "common/symmetric_home_rows.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace switchyard::common {
namespace {

constexpr int kRanks = 3;
constexpr int kLocalExperts = 2;
constexpr int kTopk = 4;
constexpr int64_t kMaxTokens = 5;
constexpr int64_t kCapacity = 9;

// Rank 1 of 3; expert 0 holds 2 rows of home 0, none of home 1, 3 of home 2 (rows 0-1, 2-4); expert 1
// holds 4 of home 1 (rows 0-3). Row r of expert l came from token 10 l + r (mod max) and slot r % k.
struct Fixture {
  std::vector<uint8_t> heaps[kRanks];
  std::vector<int32_t> layout_range = {0, 2, 2, 0, 2, 3,   // expert 0: (begin, count) of homes 0, 1, 2
                                       0, 0, 0, 4, 4, 0};  // expert 1
  std::vector<int32_t> src_info, src_slot;
  std::vector<int32_t> mask_words = std::vector<int32_t>(kRanks, 0);
  int32_t overflow[4] = {0, 0, 0, 0};
  SymmetricHomeRows rows;

  Fixture() {
    SymmetricLayout layout{};
    layout.region_offset = 0;
    layout.num_ranks = kRanks;
    layout.local_experts = kLocalExperts;
    layout.topk = kTopk;
    layout.max_tokens_per_rank = kMaxTokens;
    layout.hidden = 8;
    layout.combine_row_bytes = 16;
    const size_t bytes = layout.combine_offset() + 2 * layout.combine_half_bytes();
    for (std::vector<uint8_t>& heap : heaps) heap.assign(bytes, 0);
    for (int local = 0; local < kLocalExperts; ++local) {
      for (int64_t row = 0; row < kCapacity; ++row) {
        src_info.push_back(static_cast<int32_t>((10 * local + row) % kMaxTokens));
        src_slot.push_back(static_cast<int32_t>(row % kTopk));
      }
    }
    rows.heap.base = heaps[1].data();
    rows.heap.bytes = bytes;
    rows.heap.rank = 1;
    rows.heap.num_ranks = kRanks;
    for (int peer = 0; peer < kRanks; ++peer) {
      rows.heap.peer_offset[peer] = static_cast<int64_t>(reinterpret_cast<uintptr_t>(heaps[peer].data()) -
                                                         reinterpret_cast<uintptr_t>(heaps[1].data()));
    }
    rows.layout = layout;
    rows.mask = RankMaskView{mask_words.data(), kRanks};
    rows.rank = 1;
    rows.num_ranks = kRanks;
    rows.local_experts = kLocalExperts;
    rows.topk = kTopk;
    rows.max_tokens_per_rank = kMaxTokens;
    rows.capacity = kCapacity;
    rows.layout_range = layout_range.data();
    rows.src_info = src_info.data();
    rows.src_slot = src_slot.data();
    rows.overflow = overflow;
    rows.half = 1;
  }

  uint8_t* combine_row(int home, int half, int local, int64_t row) {
    const int64_t index = local * kCapacity + row;
    return rows.layout.combine_row(heaps[home].data(), half, src_slot[index], src_info[index]);
  }
};

TEST(SymmetricHomeRows, EveryRowOfEveryHomeAtItsCombineRowThroughThatHomesHeap) {
  Fixture f;
  const int expected_home[kLocalExperts][5] = {{0, 0, 2, 2, 2}, {1, 1, 1, 1, -1}};
  for (int local = 0; local < kLocalExperts; ++local) {
    for (int64_t row = 0; row < 5; ++row) {
      const int home = expected_home[local][row];
      EXPECT_EQ(f.rows.home_of(local, row), home) << "expert " << local << " row " << row;
      if (home < 0) continue;
      for (int half : {0, 1}) {
        EXPECT_EQ(f.rows.place(local, row, half), f.combine_row(home, half, local, row))
            << "expert " << local << " row " << row << " half " << half;
      }
    }
  }
  EXPECT_EQ(f.rows.combine_half(), 1);
}

TEST(SymmetricHomeRows, TheHalfComesFromTheCallCountWhenNotGiven) {
  Fixture f;
  uint32_t calls = 6;  // the combine is call 7: half 1
  f.rows.half = -1;
  f.rows.calls = &calls;
  EXPECT_EQ(f.rows.combine_half(), symmetric_half(7));
  calls = 7;
  EXPECT_EQ(f.rows.combine_half(), symmetric_half(8));
}

TEST(SymmetricHomeRows, NoPlaceWhereThePushCombineWouldNotWrite) {
  {
    Fixture f;  // past the homes' ranges, past the capacity, a bad expert
    EXPECT_EQ(f.rows.place(0, 5, 0), nullptr);
    EXPECT_EQ(f.rows.place(1, 4, 0), nullptr);
    EXPECT_EQ(f.rows.place(0, kCapacity, 0), nullptr);
    EXPECT_EQ(f.rows.place(0, -1, 0), nullptr);
    EXPECT_EQ(f.rows.place(kLocalExperts, 0, 0), nullptr);
    EXPECT_EQ(f.rows.place(-1, 0, 0), nullptr);
  }
  {
    Fixture f;  // the dispatch overflowed: the combine is refused on every rank
    f.overflow[0] = 1;
    EXPECT_EQ(f.rows.place(0, 0, 0), nullptr);
    EXPECT_EQ(f.rows.place(1, 0, 0), nullptr);
  }
  {
    Fixture f;  // a masked home, and this rank masked in its own view
    f.mask_words[2] = 1;
    EXPECT_EQ(f.rows.place(0, 2, 0), nullptr);
    EXPECT_NE(f.rows.place(0, 0, 0), nullptr);
    f.mask_words[2] = 0;
    f.mask_words[1] = 1;
    EXPECT_EQ(f.rows.place(0, 0, 0), nullptr);
  }
  {
    Fixture f;  // tables that do not describe the row
    f.src_info[0] = -1;
    f.src_info[1] = static_cast<int32_t>(kMaxTokens);
    f.src_slot[2] = kTopk;
    f.src_slot[3] = -1;
    for (int64_t row = 0; row < 4; ++row) EXPECT_EQ(f.rows.place(0, row, 0), nullptr) << "row " << row;
    EXPECT_NE(f.rows.place(0, 4, 0), nullptr);
    f.layout_range[2 * 2 + 1] = static_cast<int32_t>(kMaxTokens + 1);  // home 2's count out of range
    EXPECT_EQ(f.rows.place(0, 4, 0), nullptr);
  }
}

}  // namespace
}  // namespace switchyard::common
