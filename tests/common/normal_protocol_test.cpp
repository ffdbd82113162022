// The `normal` engine's heap layouts as the host and the kernels share them (common/normal_protocol.hpp):
// every region a peer writes or reads in place lies inside its layout's bytes, apart from every other one,
// and aligned as the bulk copies that read it need. Checked over a grid of shapes, against the arithmetic
// of each region's own size rather than against the offsets' formulas.
#include "common/normal_protocol.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace switchyard::common {
namespace {

struct Region {
  std::string name;
  size_t begin, bytes;
};

// Regions sorted by start: each ends where (or before) the next begins, the last inside `total`.
void expect_disjoint_within(std::vector<Region> regions, size_t base, size_t total,
                            const std::string& where) {
  std::sort(regions.begin(), regions.end(),
            [](const Region& a, const Region& b) { return a.begin < b.begin; });
  for (size_t i = 0; i < regions.size(); ++i) {
    const Region& r = regions[i];
    EXPECT_GE(r.begin, base) << where << ": " << r.name << " starts before its layout";
    if (i + 1 < regions.size()) {
      EXPECT_LE(r.begin + r.bytes, regions[i + 1].begin)
          << where << ": " << r.name << " runs into " << regions[i + 1].name;
    }
    EXPECT_LE(r.begin + r.bytes, base + total) << where << ": " << r.name << " runs past the layout's bytes";
  }
}

TEST(NormalInputLayout, RowsScalesSendListsAndRoutingAreDisjointAlignedAndInside) {
  for (int64_t tokens : {1, 7, 128, 4096}) {
    for (int hidden : {128, 256, 7168}) {
      for (int topk : {1, 8, 32}) {
        for (int ranks : {1, 3, 8, 64}) {
          const NormalInputLayout input{4096, tokens, hidden, topk, ranks};
          const std::string where = "tokens " + std::to_string(tokens) + " hidden " + std::to_string(hidden) +
                                    " topk " + std::to_string(topk) + " ranks " + std::to_string(ranks);
          const size_t n = static_cast<size_t>(tokens);
          // x as bf16 (the larger), fp8 scales after the largest fp8 x, then the routing.
          expect_disjoint_within(
              {{"x (bf16)", input.x_offset(), n * hidden * 2},
               {"send lists", input.send_lists_offset(), static_cast<size_t>(ranks) * n * 4},
               {"topk_idx", input.topk_idx_offset(), n * topk * 8},
               {"topk_weights", input.topk_weights_offset(), n * topk * 4}},
              input.offset, input.bytes(), where);
          expect_disjoint_within(
              {{"x (fp8)", input.x_offset(), n * hidden},
               {"scales", input.scales_offset(), n * (hidden / kScaleBlock) * 4},
               {"send lists", input.send_lists_offset(), static_cast<size_t>(ranks) * n * 4}},
              input.offset, input.bytes(), where);
          // Rows and scales are read by bulk copies: 16-byte aligned. Each send list starts its own row.
          EXPECT_EQ(input.scales_offset() % kFieldAlignment, 0u) << where;
          EXPECT_EQ(input.send_lists_offset() % kFieldAlignment, 0u) << where;
          uint8_t* base = nullptr;
          EXPECT_EQ(reinterpret_cast<uintptr_t>(input.send_list(base, ranks - 1)) -
                        reinterpret_cast<uintptr_t>(input.send_list(base, 0)),
                    static_cast<size_t>(ranks - 1) * n * 4)
              << where;
        }
      }
    }
  }
  EXPECT_EQ((NormalInputLayout{0, 0, 7168, 8, 8}.bytes()), 0u) << "no input, no bytes";
}

TEST(NormalHeapLayout, EveryBarrierWordAndStampLiesInTheBarrierAreaApart) {
  for (int ranks : {1, 2, 8, 64, 128}) {
    const NormalHeapLayout layout{ranks, 4, 2, 16, 256};
    std::vector<Region> words;
    uint8_t* base = nullptr;
    auto offset_of = [&](const uint64_t* word) {
      return static_cast<size_t>(reinterpret_cast<uintptr_t>(word));
    };
    for (int source = 0; source < ranks; ++source) {
      words.push_back(
          {"barrier word " + std::to_string(source), offset_of(layout.barrier_word(base, source)), 8});
      for (uint64_t epoch : {uint64_t{6}, uint64_t{7}}) {
        words.push_back({"stamp " + std::to_string(source) + "/" + std::to_string(epoch % 2),
                         offset_of(layout.call_stamp_word(base, source, epoch)), 8});
      }
    }
    expect_disjoint_within(words, layout.barrier_offset(), layout.barrier_bytes(),
                           "ranks " + std::to_string(ranks));
    // Consecutive barriers use different stamp words; barriers two apart, the same one.
    EXPECT_NE(layout.call_stamp_word(base, 0, 6), layout.call_stamp_word(base, 0, 7));
    EXPECT_EQ(layout.call_stamp_word(base, 0, 6), layout.call_stamp_word(base, 0, 8));
    EXPECT_LE(layout.barrier_offset() + layout.barrier_bytes(), layout.notify_offset());
  }
}

TEST(NormalHeapLayout, NotifyRecordsOfConsecutiveBarriersLieApartInTheNotifyArea) {
  // The CUDA notify writes a call's records before its only barrier, in the set of that barrier's parity,
  // while a peer one barrier behind may still read the previous call's: the two sets must not share a byte.
  for (int ranks : {1, 2, 8, 64}) {
    for (int channels : {1, 4, 24}) {
      for (int local_experts : {1, 32, 256}) {
        const NormalHeapLayout layout{ranks, channels, local_experts, 16, 256};
        const std::string where = "ranks " + std::to_string(ranks) + " channels " + std::to_string(channels) +
                                  " local experts " + std::to_string(local_experts);
        uint8_t* base = nullptr;
        auto offset_of = [&](const void* at) { return static_cast<size_t>(reinterpret_cast<uintptr_t>(at)); };
        std::vector<Region> records;
        for (int source = 0; source < ranks; ++source) {
          for (uint64_t epoch : {uint64_t{6}, uint64_t{7}}) {
            const std::string name = "record " + std::to_string(source) + "/" + std::to_string(epoch % 2);
            // The signature word, then the channel counts, then the expert counts, back to back.
            const NotifyRecord record = layout.notify_record(base, source, epoch);
            EXPECT_EQ(offset_of(record.channel_counts),
                      offset_of(layout.notify_signature(base, source, epoch)) + sizeof(uint64_t))
                << where << ": " << name;
            EXPECT_EQ(offset_of(record.expert_counts), offset_of(record.channel_counts) + channels * 4u)
                << where << ": " << name;
            records.push_back({name, offset_of(layout.notify_signature(base, source, epoch)),
                               sizeof(uint64_t) + (static_cast<size_t>(channels) + local_experts) * 4});
          }
        }
        expect_disjoint_within(records, layout.notify_offset(), layout.notify_bytes(), where);
        // Barriers two apart share a set; set 0 is the one the engines with a barrier of their own use.
        EXPECT_EQ(layout.notify_signature(base, ranks - 1, 6), layout.notify_signature(base, ranks - 1, 8));
        EXPECT_EQ(layout.notify_signature(base, ranks - 1), layout.notify_signature(base, ranks - 1, 6));
        EXPECT_LE(layout.notify_offset() + layout.notify_bytes(), layout.rings_offset()) << where;
      }
    }
  }
}

TEST(SourceOfRow, IsTheSourceWhoseRangesHoldTheRowWithEmptySourcesAnywhere) {
  // Per source, rows per channel; sources without rows first, in the middle and last.
  const std::vector<std::vector<int32_t>> counts = {{0, 0}, {3, 0}, {0, 0}, {1, 4}, {0, 2}, {0, 0}};
  for (size_t ranks = 1; ranks <= counts.size(); ++ranks) {
    const int channels = 2;
    std::vector<int32_t> start;
    std::vector<int> owner;  // the source of each row, by walking the ranges
    int32_t running = 0;
    for (size_t source = 0; source < ranks; ++source) {
      for (int channel = 0; channel < channels; ++channel) {
        start.push_back(running);
        for (int32_t i = 0; i < counts[source][channel]; ++i) owner.push_back(static_cast<int>(source));
        running += counts[source][channel];
      }
    }
    start.push_back(running);
    for (int64_t row = 0; row < running; ++row) {
      EXPECT_EQ(source_of_row(start.data(), static_cast<int>(ranks), channels, row), owner[row])
          << ranks << " ranks, row " << row;
    }
  }
}

TEST(CallStamp, DependsOnTheSignatureAndTheBarrierAndIsNeverZero) {
  EXPECT_NE(call_stamp(17, 5), call_stamp(17, 6)) << "a stamp left by an earlier barrier must not match";
  EXPECT_NE(call_stamp(17, 5), call_stamp(18, 5)) << "another call must not match";
  EXPECT_NE(routed_signature(17, 3), routed_signature(17, 4)) << "another dispatch's routing must not match";
  for (uint64_t signature : {uint64_t{0}, uint64_t{1}, ~uint64_t{0}}) {
    for (uint64_t epoch = 0; epoch < 64; ++epoch) EXPECT_NE(call_stamp(signature, epoch), 0u);
  }
}

}  // namespace
}  // namespace switchyard::common
