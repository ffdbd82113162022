// The low-latency reference (expert-major dispatch, weighted FMA combine) on a case small enough to
// work out by hand.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/numeric.hpp"
#include "switchyard/errors.hpp"
#include "switchyard/reference.hpp"

namespace switchyard {
namespace {

constexpr int kHidden = 8;

Tensor ids(std::initializer_list<int64_t> values, int64_t rows, int64_t topk) {
  Tensor tensor = Tensor::empty(DType::i64, {rows, topk});
  std::copy(values.begin(), values.end(), tensor.as<int64_t>());
  return tensor;
}

// Row t of rank r holds 16 r + t + channel / 8 ... small integers, exact in bf16.
Tensor rows_of(int rank, int64_t rows) {
  Tensor x = Tensor::empty(DType::bf16, {rows, kHidden});
  for (int64_t t = 0; t < rows; ++t) {
    for (int c = 0; c < kHidden; ++c)
      x.as<uint16_t>()[t * kHidden + c] = common::float_to_bf16(16.0f * rank + 4.0f * t + c);
  }
  return x;
}

std::vector<int> values(const Tensor& tensor) {
  return std::vector<int>(tensor.as<const int32_t>(), tensor.as<const int32_t>() + tensor.numel());
}

struct HandCase {
  // R = 2, E = 4 (2 local experts each), max_tokens_per_rank = 3.
  // rank 0: t0 -> {1, 2}, t1 -> {2, -1}, t2 -> {1, 1} (the same expert twice: two rows)
  // rank 1: t0 -> {3, 0}
  Topology topology = Topology::single_node(2);
  std::vector<Tensor> x = {rows_of(0, 3), rows_of(1, 1)};
  std::vector<Tensor> topk_idx = {ids({1, 2, 2, -1, 1, 1}, 3, 2), ids({3, 0}, 1, 2)};
  std::vector<Tensor> weights;
  std::vector<reference::RankInputs> inputs;

  HandCase() {
    for (int rank = 0; rank < 2; ++rank) {
      weights.push_back(Tensor::empty(DType::f32, {topk_idx[rank].size(0), 2}));
      for (int64_t i = 0; i < weights[rank].numel(); ++i)
        weights[rank].as<float>()[i] = 0.25f * static_cast<float>(i + 1);
      inputs.push_back({x[rank], {}, topk_idx[rank], weights[rank]});
    }
  }
};

TEST(LowLatencyReference, DispatchIsExpertMajorThenSourceRankThenTokenAndSlot) {
  HandCase hand;
  auto out = reference::low_latency_dispatch(hand.inputs, 4, hand.topology, 3);
  ASSERT_EQ(out.size(), 2u);
  // Rank 0 holds experts 0 and 1; rows per expert R * max = 6.
  EXPECT_EQ(values(out[0].recv_count), (std::vector<int>{1, 3}));
  EXPECT_EQ(values(out[0].layout_range), (std::vector<int>{0, 0, 0, 1, 0, 3, 3, 0}));
  EXPECT_EQ(values(out[0].src_info), (std::vector<int>{0, -1, -1, -1, -1, -1, 0, 2, 2, -1, -1, -1}));
  // Rank 1 holds experts 2 and 3.
  EXPECT_EQ(values(out[1].recv_count), (std::vector<int>{2, 1}));
  EXPECT_EQ(values(out[1].layout_range), (std::vector<int>{0, 2, 2, 0, 0, 0, 0, 1}));
  EXPECT_EQ(values(out[1].src_info), (std::vector<int>{0, 1, -1, -1, -1, -1, 0, -1, -1, -1, -1, -1}));
  // Expert 1's third row is rank 0's token 2 again (its second slot), bit for bit.
  const uint16_t* row = out[0].recv_x.as<const uint16_t>() + (1 * 6 + 2) * kHidden;
  for (int c = 0; c < kHidden; ++c) EXPECT_EQ(row[c], hand.x[0].as<const uint16_t>()[2 * kHidden + c]);
  // Expert 0's first row comes from rank 1.
  EXPECT_EQ(out[0].recv_x.as<const uint16_t>()[3], hand.x[1].as<const uint16_t>()[3]);
}

TEST(LowLatencyReference, CombineWeighsEachSlotsRowInSlotOrder) {
  HandCase hand;
  auto dispatched = reference::low_latency_dispatch(hand.inputs, 4, hand.topology, 3);
  // Identity experts: y = recv_x, so out[t] = (sum of t's valid weights) * x[t], exact here.
  std::vector<TensorView> ys = {dispatched[0].recv_x, dispatched[1].recv_x};
  auto combined = reference::low_latency_combine(ys, hand.inputs, 4, hand.topology, 3);
  const float rank0_sums[3] = {0.25f + 0.5f, 0.75f, 1.25f + 1.5f};
  for (int t = 0; t < 3; ++t) {
    for (int c = 0; c < kHidden; ++c) {
      EXPECT_EQ(combined[0].as<const uint16_t>()[t * kHidden + c],
                common::float_to_bf16(rank0_sums[t] * (4.0f * t + c)))
          << "token " << t << " channel " << c;
    }
  }
  for (int c = 0; c < kHidden; ++c) {
    EXPECT_EQ(combined[1].as<const uint16_t>()[c], common::float_to_bf16(0.75f * (16.0f + c)));
  }
}

// expert_capacity C: outputs [L, C, ...] keep each expert's first C rows; recv_count and
// layout_range stay the true counts; the combine of a dispatch that fit is unchanged, and one whose
// rows lie past C is a CapacityError.
TEST(LowLatencyReference, ExpertCapacityKeepsTheFirstRowsAndTheTrueCounts) {
  HandCase hand;
  auto full = reference::low_latency_dispatch(hand.inputs, 4, hand.topology, 3);
  auto fitting =
      reference::low_latency_dispatch(hand.inputs, 4, hand.topology, 3, {}, 3);  // the most rows: 3
  auto cut = reference::low_latency_dispatch(hand.inputs, 4, hand.topology, 3, {}, 2);
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_EQ(cut[rank].recv_x.size(1), 2);
    EXPECT_EQ(cut[rank].src_info.size(1), 2);
    EXPECT_EQ(values(cut[rank].recv_count), values(full[rank].recv_count));
    EXPECT_EQ(values(cut[rank].layout_range), values(full[rank].layout_range));
    for (int l = 0; l < 2; ++l) {
      for (int row = 0; row < 2; ++row) {
        EXPECT_EQ(cut[rank].src_info.as<const int32_t>()[l * 2 + row],
                  full[rank].src_info.as<const int32_t>()[l * 6 + row]);
        for (int c = 0; c < kHidden; ++c) {
          EXPECT_EQ(cut[rank].recv_x.as<const uint16_t>()[(l * 2 + row) * kHidden + c],
                    full[rank].recv_x.as<const uint16_t>()[(l * 6 + row) * kHidden + c]);
        }
      }
    }
  }
  // Expert 1 (rank 0's local expert 1) has 3 rows: the capacity of 2 holds its first two.
  EXPECT_EQ(values(cut[0].src_info), (std::vector<int>{0, -1, 0, 2}));
  std::vector<TensorView> full_ys = {full[0].recv_x, full[1].recv_x};
  std::vector<TensorView> fitting_ys = {fitting[0].recv_x, fitting[1].recv_x};
  auto want = reference::low_latency_combine(full_ys, hand.inputs, 4, hand.topology, 3);
  auto got = reference::low_latency_combine(fitting_ys, hand.inputs, 4, hand.topology, 3, 3);
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_EQ(std::vector<uint16_t>(got[rank].as<const uint16_t>(),
                                    got[rank].as<const uint16_t>() + got[rank].numel()),
              std::vector<uint16_t>(want[rank].as<const uint16_t>(),
                                    want[rank].as<const uint16_t>() + want[rank].numel()));
  }
  std::vector<TensorView> cut_ys = {cut[0].recv_x, cut[1].recv_x};
  try {
    reference::low_latency_combine(cut_ys, hand.inputs, 4, hand.topology, 3, 2);
    ADD_FAILURE() << "expected CapacityError";
  } catch (const CapacityError& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("got 3 for expert 1 (on rank 0)"), std::string::npos) << message;
  }
  EXPECT_THROW(reference::low_latency_dispatch(hand.inputs, 4, hand.topology, 3, {}, 7), InvalidArgument);
  EXPECT_THROW(reference::low_latency_dispatch(hand.inputs, 4, hand.topology, 3, {}, -1), InvalidArgument);
}

TEST(LowLatencyReference, MoreRowsForOneExpertThanMaxTokensIsRefused) {
  HandCase hand;
  // Expert 1 gets 3 rows from rank 0; a capacity of 2 cannot hold them.
  hand.inputs[0].x = TensorView(hand.x[0].data(), DType::bf16, {2, kHidden});
  hand.topk_idx[0] = ids({1, 1, 1, -1}, 2, 2);
  hand.inputs[0].topk_idx = hand.topk_idx[0];
  EXPECT_THROW(reference::low_latency_dispatch(hand.inputs, 4, hand.topology, 2), InvalidArgument);
}

}  // namespace
}  // namespace switchyard
