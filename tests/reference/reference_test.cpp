// The oracle against small cases computed by hand (DESIGN.md, Semantics).
#include "switchyard/reference.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "common/numeric.hpp"
#include "switchyard/errors.hpp"

namespace switchyard::reference {
namespace {

using common::bf16_to_float;
using common::float_to_bf16;

Tensor i64_tensor(int64_t rows, int64_t cols, const std::vector<int64_t>& values) {
  Tensor tensor = Tensor::empty(DType::i64, {rows, cols});
  if (!values.empty()) std::memcpy(tensor.data(), values.data(), values.size() * sizeof(int64_t));
  return tensor;
}

Tensor f32_tensor(int64_t rows, int64_t cols, const std::vector<float>& values) {
  Tensor tensor = Tensor::empty(DType::f32, {rows, cols});
  if (!values.empty()) std::memcpy(tensor.data(), values.data(), values.size() * sizeof(float));
  return tensor;
}

// Values must be exact in bf16.
Tensor bf16_tensor(int64_t rows, int64_t cols, const std::vector<float>& values) {
  Tensor tensor = Tensor::empty(DType::bf16, {rows, cols});
  for (size_t i = 0; i < values.size(); ++i) {
    uint16_t bits = float_to_bf16(values[i]);
    EXPECT_EQ(bf16_to_float(bits), values[i]) << "test value " << values[i] << " is not exact in bf16";
    tensor.as<uint16_t>()[i] = bits;
  }
  return tensor;
}

std::vector<int64_t> i64_values(const Tensor& tensor) {
  return std::vector<int64_t>(tensor.as<int64_t>(), tensor.as<int64_t>() + tensor.numel());
}
std::vector<float> f32_values(const Tensor& tensor) {
  return std::vector<float>(tensor.as<float>(), tensor.as<float>() + tensor.numel());
}
std::vector<uint16_t> bf16_bits(const Tensor& tensor) {
  return std::vector<uint16_t>(tensor.as<uint16_t>(), tensor.as<uint16_t>() + tensor.numel());
}

// Two ranks, four experts (two per rank: experts 0-1 on rank 0, 2-3 on rank 1), k = 2.
//   rank 0: token 0 -> {0, 3} (ranks 0 and 1), token 1 -> {1, -1} (rank 0), token 2 -> {-1, -1} (nowhere)
//   rank 1: token 0 -> {2, 3} (rank 1 only),  token 1 -> {-1, 0} (rank 0)
struct TwoRankCase {
  Topology topology = Topology::single_node(2);
  int num_experts = 4;
  std::vector<Tensor> x = {bf16_tensor(3, 2, {1, 2, 3, 4, 5, 6}), bf16_tensor(2, 2, {-1, -2, -3, -4})};
  std::vector<Tensor> topk_idx = {i64_tensor(3, 2, {0, 3, 1, -1, -1, -1}), i64_tensor(2, 2, {2, 3, -1, 0})};
  std::vector<Tensor> weights = {f32_tensor(3, 2, {0.5f, 0.25f, 0.75f, 0.125f, 0.375f, 0.625f}),
                                 f32_tensor(2, 2, {0.0625f, 0.875f, 0.3125f, 0.1875f})};

  std::vector<RankInputs> inputs(bool with_weights = true) const {
    std::vector<RankInputs> result(2);
    for (int rank = 0; rank < 2; ++rank) {
      result[rank].x = x[rank];
      result[rank].topk_idx = topk_idx[rank];
      if (with_weights) result[rank].topk_weights = weights[rank];
    }
    return result;
  }
};

TEST(ReferenceLayout, CountsTokensPerRankNodeAndExpert) {
  TwoRankCase c;
  Layout rank0 = layout(c.topk_idx[0], c.num_experts, c.topology);
  EXPECT_EQ(rank0.num_tokens_per_rank, (std::vector<int>{2, 1}));
  EXPECT_EQ(rank0.num_tokens_per_node, (std::vector<int>{2}));
  EXPECT_EQ(rank0.num_tokens_per_expert, (std::vector<int>{1, 1, 0, 1}));
  EXPECT_EQ(rank0.is_token_in_rank, (std::vector<uint8_t>{1, 1, 1, 0, 0, 0}));

  Layout rank1 = layout(c.topk_idx[1], c.num_experts, c.topology);
  EXPECT_EQ(rank1.num_tokens_per_rank, (std::vector<int>{1, 1}));
  EXPECT_EQ(rank1.num_tokens_per_node, (std::vector<int>{2}));
  EXPECT_EQ(rank1.num_tokens_per_expert, (std::vector<int>{1, 0, 1, 1}));
  EXPECT_EQ(rank1.is_token_in_rank, (std::vector<uint8_t>{0, 1, 1, 0}));
}

TEST(ReferenceLayout, CountsATokenOncePerNodeEvenWithSeveralRanksThere) {
  // Four ranks in two nodes of two; eight experts, two per rank.
  Tensor topk_idx = i64_tensor(3, 3,
                               {
                                   0, 2, -1,  // ranks 0 and 1: node 0 once
                                   1, 7, 4,   // ranks 0, 3, 2: nodes 0 and 1
                                   6, 7, -1,  // rank 3 twice: node 1 once, rank 3 once
                               });
  Layout result = layout(topk_idx, 8, Topology{4, 2});
  EXPECT_EQ(result.num_tokens_per_rank, (std::vector<int>{2, 1, 1, 2}));
  EXPECT_EQ(result.num_tokens_per_node, (std::vector<int>{2, 2}));
  EXPECT_EQ(result.num_tokens_per_expert, (std::vector<int>{1, 1, 1, 0, 1, 0, 1, 2}));
  EXPECT_EQ(result.is_token_in_rank, (std::vector<uint8_t>{1, 1, 0, 0, 1, 0, 1, 1, 0, 0, 0, 1}));
}

TEST(ReferenceLayout, HandlesZeroTokens) {
  Layout result = layout(i64_tensor(0, 4, {}), 8, Topology::single_node(2));
  EXPECT_EQ(result.num_tokens_per_rank, (std::vector<int>{0, 0}));
  EXPECT_EQ(result.num_tokens_per_node, (std::vector<int>{0}));
  EXPECT_EQ(result.num_tokens_per_expert, std::vector<int>(8, 0));
  EXPECT_TRUE(result.is_token_in_rank.empty());
}

TEST(ReferenceDispatch, ReceivesEachTokenOnceOrderedBySourceRankThenToken) {
  TwoRankCase c;
  std::vector<NormalDispatchOutput> out = normal_dispatch(c.inputs(), c.num_experts, c.topology);
  ASSERT_EQ(out.size(), 2u);

  // Rank 0 gets rank 0's tokens 0 and 1, then rank 1's token 1.
  EXPECT_EQ(out[0].recv_src_rank, (std::vector<int>{0, 0, 1}));
  EXPECT_EQ(out[0].recv_src_token, (std::vector<int64_t>{0, 1, 1}));
  EXPECT_EQ(bf16_bits(out[0].recv_x), bf16_bits(bf16_tensor(3, 2, {1, 2, 3, 4, -3, -4})));
  EXPECT_EQ(i64_values(out[0].recv_topk_idx), (std::vector<int64_t>{0, -1, 1, -1, -1, 0}));
  EXPECT_EQ(f32_values(out[0].recv_topk_weights), (std::vector<float>{0.5f, 0, 0.75f, 0, 0, 0.1875f}));
  EXPECT_EQ(out[0].num_recv_tokens_per_expert, (std::vector<int>{2, 1}));
  EXPECT_FALSE(out[0].recv_x_scales.defined());

  // Rank 1 gets rank 0's token 0, then rank 1's token 0; local ids are e - 2.
  EXPECT_EQ(out[1].recv_src_rank, (std::vector<int>{0, 1}));
  EXPECT_EQ(out[1].recv_src_token, (std::vector<int64_t>{0, 0}));
  EXPECT_EQ(bf16_bits(out[1].recv_x), bf16_bits(bf16_tensor(2, 2, {1, 2, -1, -2})));
  EXPECT_EQ(i64_values(out[1].recv_topk_idx), (std::vector<int64_t>{-1, 1, 0, 1}));
  EXPECT_EQ(f32_values(out[1].recv_topk_weights), (std::vector<float>{0, 0.25f, 0.0625f, 0.875f}));
  EXPECT_EQ(out[1].num_recv_tokens_per_expert, (std::vector<int>{1, 2}));
}

TEST(ReferenceDispatch, WithoutWeightsLeavesRecvWeightsUndefined) {
  TwoRankCase c;
  std::vector<NormalDispatchOutput> out = normal_dispatch(c.inputs(false), c.num_experts, c.topology);
  EXPECT_FALSE(out[0].recv_topk_weights.defined());
  EXPECT_EQ(i64_values(out[0].recv_topk_idx), (std::vector<int64_t>{0, -1, 1, -1, -1, 0}));
}

TEST(ReferenceDispatch, RoundsCountsPerExpertUpToTheAlignment) {
  TwoRankCase c;
  EXPECT_EQ(normal_dispatch(c.inputs(), c.num_experts, c.topology, 2)[0].num_recv_tokens_per_expert,
            (std::vector<int>{2, 2}));
  EXPECT_EQ(normal_dispatch(c.inputs(), c.num_experts, c.topology, 2)[1].num_recv_tokens_per_expert,
            (std::vector<int>{2, 2}));
  EXPECT_EQ(normal_dispatch(c.inputs(), c.num_experts, c.topology, 4)[0].num_recv_tokens_per_expert,
            (std::vector<int>{4, 4}));
  EXPECT_EQ(normal_dispatch(c.inputs(), c.num_experts, c.topology, 3)[1].num_recv_tokens_per_expert,
            (std::vector<int>{3, 3}));

  // An expert nobody routes to stays at 0 whatever the alignment.
  TwoRankCase sparse;
  sparse.topk_idx = {i64_tensor(3, 2, {0, -1, 0, -1, -1, -1}), i64_tensor(2, 2, {-1, -1, -1, -1})};
  std::vector<NormalDispatchOutput> out =
      normal_dispatch(sparse.inputs(), sparse.num_experts, sparse.topology, 4);
  EXPECT_EQ(out[0].num_recv_tokens_per_expert, (std::vector<int>{4, 0}));
  EXPECT_EQ(out[1].num_recv_tokens_per_expert, (std::vector<int>{0, 0}));
  EXPECT_EQ(out[1].recv_x.size(0), 0);
}

TEST(ReferenceDispatch, CopiesFp8RowsAndTheirScales) {
  const int hidden = 256;
  Tensor x = Tensor::empty(DType::fp8_e4m3, {2, hidden});
  for (int i = 0; i < 2 * hidden; ++i) x.as<uint8_t>()[i] = static_cast<uint8_t>((i * 37) % 0x7f);
  Tensor scales = f32_tensor(2, 2, {0.5f, 0.25f, 2.0f, 4.0f});
  Tensor topk_idx = i64_tensor(2, 1, {-1, 1});
  RankInputs in;
  in.x = x;
  in.x_scales = scales;
  in.topk_idx = topk_idx;
  std::vector<NormalDispatchOutput> out = normal_dispatch({in}, 2, Topology::single_node(1));
  ASSERT_EQ(out[0].recv_x.size(0), 1);
  EXPECT_EQ(out[0].recv_x.dtype(), DType::fp8_e4m3);
  EXPECT_EQ(std::memcmp(out[0].recv_x.data(), x.as<uint8_t>() + hidden, hidden), 0);
  EXPECT_EQ(f32_values(out[0].recv_x_scales), (std::vector<float>{2.0f, 4.0f}));
  EXPECT_EQ(out[0].recv_src_token, (std::vector<int64_t>{1}));
}

// ---- combine: the reduction order is the contract --------------------------------------------------

// One token on rank 0 that every rank receives: experts 0..R-1, one per rank.
struct EveryRankCase {
  Topology topology;
  std::vector<NormalDispatchOutput> dispatched;

  explicit EveryRankCase(Topology t, int hidden = 2) : topology(t) {
    const int num_ranks = t.num_ranks;
    std::vector<Tensor> keep;
    std::vector<RankInputs> inputs(num_ranks);
    std::vector<int64_t> ids;
    for (int e = 0; e < num_ranks; ++e) ids.push_back(e);
    for (int rank = 0; rank < num_ranks; ++rank) {
      const int64_t tokens = rank == 0 ? 1 : 0;
      keep.push_back(Tensor::empty(DType::bf16, {tokens, hidden}));
      if (tokens) std::memset(keep.back().data(), 0, keep.back().nbytes());
      inputs[rank].x = keep.back();
      keep.push_back(rank == 0 ? i64_tensor(1, num_ranks, ids) : i64_tensor(0, num_ranks, {}));
      inputs[rank].topk_idx = keep.back();
    }
    dispatched = normal_dispatch(inputs, num_ranks, topology);
  }

  // y[d] = the one row rank d returns, as bf16.
  uint16_t combine_column(const std::vector<std::vector<float>>& columns_per_rank, int column) const {
    std::vector<Tensor> ys;
    std::vector<TensorView> views;
    for (const std::vector<float>& row : columns_per_rank) {
      ys.push_back(bf16_tensor(1, static_cast<int64_t>(row.size()), row));
      views.push_back(ys.back());
    }
    std::vector<int64_t> num_tokens(topology.num_ranks, 0);
    num_tokens[0] = 1;
    std::vector<NormalCombineOutput> out = normal_combine(views, {}, dispatched, num_tokens, topology);
    EXPECT_FALSE(out[0].combined_topk_weights.defined());
    return out[0].combined_x.as<uint16_t>()[column];
  }

  // As combine_column, with rank 0's token biased by bias0 / bias1 (empty: absent).
  uint16_t combine_column_with_biases(const std::vector<std::vector<float>>& columns_per_rank,
                                      const std::vector<float>& bias0, const std::vector<float>& bias1,
                                      int column) const {
    std::vector<Tensor> ys;
    std::vector<TensorView> views;
    for (const std::vector<float>& row : columns_per_rank) {
      ys.push_back(bf16_tensor(1, static_cast<int64_t>(row.size()), row));
      views.push_back(ys.back());
    }
    const int64_t hidden = static_cast<int64_t>(columns_per_rank[0].size());
    Tensor first = bias0.empty() ? Tensor() : bf16_tensor(1, hidden, bias0);
    Tensor second = bias1.empty() ? Tensor() : bf16_tensor(1, hidden, bias1);
    std::vector<CombineBias> biases(topology.num_ranks);
    biases[0] = {first, second};
    std::vector<int64_t> num_tokens(topology.num_ranks, 0);
    num_tokens[0] = 1;
    return normal_combine(views, {}, dispatched, num_tokens, topology, biases)[0]
        .combined_x.as<uint16_t>()[column];
  }
};

constexpr float kTwoToMinus8 = 1.0f / 256.0f;
constexpr float kTwoToMinus30 = 1.0f / 1073741824.0f;

TEST(ReferenceCombine, SumsRanksInAscendingOrderInFp32) {
  EveryRankCase c(Topology::single_node(3));
  // (2^-30 + 1) rounds to 1 in fp32, then 1 + (-1) = 0. Any other order keeps the 2^-30.
  EXPECT_EQ(c.combine_column({{kTwoToMinus30, 0}, {1.0f, 0}, {-1.0f, 0}}, 0), 0x0000);
  // Descending values in ascending ranks: (-1 + 1) + 2^-30 keeps it.
  EXPECT_EQ(c.combine_column({{-1.0f, 0}, {1.0f, 0}, {kTwoToMinus30, 0}}, 0), float_to_bf16(kTwoToMinus30));
}

TEST(ReferenceCombine, OnOneNodeRoundsToBf16OnceAtTheEnd) {
  EveryRankCase c(Topology::single_node(3));
  // 1 + 2^-8 + 2^-8 = 1 + 2^-7 exactly in fp32. Rounding after each addition would tie 1 + 2^-8 back
  // to 1 (round-to-nearest-even) twice and give 1.
  EXPECT_EQ(c.combine_column({{1.0f, 0}, {kTwoToMinus8, 0}, {kTwoToMinus8, 0}}, 0), 0x3F81);
}

TEST(ReferenceCombine, AcrossNodesRoundsEachNodePartialToBf16ThenSumsNodesInOrder) {
  const std::vector<std::vector<float>> ys = {{1.0f, 0}, {kTwoToMinus8, 0}, {kTwoToMinus8, 0}, {0.0f, 0}};
  // Two nodes of two: bf16(1 + 2^-8) = 1 (tie to even), bf16(2^-8 + 0) = 2^-8, and bf16(1 + 2^-8) = 1.
  EXPECT_EQ(EveryRankCase(Topology{4, 2}).combine_column(ys, 0), 0x3F80);
  // The same values on one node: a flat fp32 sum is 1 + 2^-7.
  EXPECT_EQ(EveryRankCase(Topology::single_node(4)).combine_column(ys, 0), 0x3F81);
  // Four nodes of one: the partials are the values themselves, summed flat in fp32 as above.
  EXPECT_EQ(EveryRankCase(Topology{4, 1}).combine_column(ys, 0), 0x3F81);
}

TEST(ReferenceCombine, AcrossNodesSumsNodePartialsInAscendingNodeOrder) {
  // Nodes of two: node 0 = 2^-30 + 0, node 1 = 1 + 0, node 2 = -1 + 0. (2^-30 + 1) - 1 = 0 in fp32.
  const std::vector<std::vector<float>> ys = {{kTwoToMinus30, 0}, {0, 0}, {1.0f, 0}, {0, 0},
                                              {-1.0f, 0},         {0, 0}};
  EXPECT_EQ(EveryRankCase(Topology{6, 2}).combine_column(ys, 0), 0x0000);
}

TEST(ReferenceCombine, StartsFromPositiveZeroSoNegativeZeroBecomesPositive) {
  EveryRankCase c(Topology::single_node(2));
  EXPECT_EQ(c.combine_column({{-0.0f, 0}, {-0.0f, 0}}, 0), 0x0000);
}

// Combine biases start the final fp32 sum (docs/deep_ep.md, "Combine bias").
TEST(ReferenceCombine, BiasesStartTheSumBeforeTheRows) {
  EveryRankCase c(Topology::single_node(2));
  // (2^-30 + 1) rounds to 1 in fp32, then 1 + (-1) = 0. Adding the bias after the rows would keep it.
  EXPECT_EQ(c.combine_column_with_biases({{1.0f, 0}, {-1.0f, 0}}, {kTwoToMinus30, 0}, {}, 0), 0x0000);
  EXPECT_EQ(c.combine_column_with_biases({{1.0f, 0}, {-1.0f, 0}}, {}, {kTwoToMinus30, 0}, 0), 0x0000);
  // bias0 + bias1 first: (1 + 2^-8) + 2^-8 = 1 + 2^-7 exactly, rounded once.
  EXPECT_EQ(c.combine_column_with_biases({{kTwoToMinus8, 0}, {0, 0}}, {1.0f, 0}, {kTwoToMinus8, 0}, 0),
            0x3F81);
}

TEST(ReferenceCombine, BiasStartIsBias0PlusBias1WithAnAbsentOneAsPositiveZero) {
  EveryRankCase c(Topology::single_node(2));
  // -0 + -0 = -0, and adding the rows' -0 keeps it; with one bias, -0 + (+0) = +0.
  EXPECT_EQ(c.combine_column_with_biases({{-0.0f, 0}, {-0.0f, 0}}, {-0.0f, 0}, {-0.0f, 0}, 0), 0x8000);
  EXPECT_EQ(c.combine_column_with_biases({{-0.0f, 0}, {-0.0f, 0}}, {-0.0f, 0}, {}, 0), 0x0000);
  EXPECT_EQ(c.combine_column_with_biases({{-0.0f, 0}, {-0.0f, 0}}, {}, {-0.0f, 0}, 0), 0x0000);
}

TEST(ReferenceCombine, AcrossNodesBiasesStartTheSumOfNodePartialsNotAPartial) {
  const std::vector<std::vector<float>> ys = {{1.0f, 0}, {kTwoToMinus8, 0}, {kTwoToMinus8, 0}, {0.0f, 0}};
  // Nodes of two: 2^-8 + bf16(1 + 2^-8) = 2^-8 + 1, + bf16(2^-8) = 1 + 2^-7. Had the bias gone into node
  // 0's partial, bf16(1 + 2^-7) + 2^-8 would tie to 1 + 2^-6.
  EXPECT_EQ(EveryRankCase(Topology{4, 2}).combine_column_with_biases(ys, {kTwoToMinus8, 0}, {}, 0), 0x3F81);
}

TEST(ReferenceCombine, GivesZeroRowsAndZeroWeightsToTokensNobodyReceived) {
  TwoRankCase c;
  std::vector<NormalDispatchOutput> dispatched = normal_dispatch(c.inputs(), c.num_experts, c.topology);
  std::vector<Tensor> ys = {bf16_tensor(3, 2, {1, 1, 1, 1, 1, 1}), bf16_tensor(2, 2, {2, 2, 2, 2})};
  std::vector<NormalCombineOutput> out =
      normal_combine({ys[0], ys[1]}, {dispatched[0].recv_topk_weights, dispatched[1].recv_topk_weights},
                     dispatched, {3, 2}, c.topology);
  // Rank 0: token 0 came back from ranks 0 and 1 (1 + 2), token 1 from rank 0, token 2 from nobody.
  EXPECT_EQ(bf16_bits(out[0].combined_x), bf16_bits(bf16_tensor(3, 2, {3, 3, 1, 1, 0, 0})));
  // Weights: each slot is non-zero on exactly the rank that holds its expert.
  EXPECT_EQ(f32_values(out[0].combined_topk_weights), (std::vector<float>{0.5f, 0.25f, 0.75f, 0, 0, 0}));
  // Rank 1: token 0 from rank 1 (row 1 of its receive order), token 1 from rank 0 (row 2).
  EXPECT_EQ(bf16_bits(out[1].combined_x), bf16_bits(bf16_tensor(2, 2, {2, 2, 1, 1})));
  EXPECT_EQ(f32_values(out[1].combined_topk_weights), (std::vector<float>{0.0625f, 0.875f, 0, 0.1875f}));
}

TEST(ReferenceCombine, ReducesWeightsWithTheSameGroupingAsX) {
  // Non-exclusive weights (a caller may pass any): fp32 over a node's ranks, then over nodes.
  EveryRankCase c(Topology{4, 2}, 1);
  std::vector<Tensor> ys, weights;
  std::vector<TensorView> y_views, weight_views;
  const float two_to_minus_24 = 1.0f / 16777216.0f;
  const std::vector<float> w = {1.0f, 0.0f, two_to_minus_24, two_to_minus_24};
  for (int rank = 0; rank < 4; ++rank) {
    ys.push_back(bf16_tensor(1, 1, {0}));
    y_views.push_back(ys.back());
    weights.push_back(f32_tensor(1, 1, {w[rank]}));
    weight_views.push_back(weights.back());
  }
  std::vector<NormalCombineOutput> out =
      normal_combine(y_views, weight_views, c.dispatched, {1, 0, 0, 0}, c.topology);
  // Node 0: 1 + 0 = 1; node 1: 2^-24 + 2^-24 = 2^-23; total 1 + 2^-23. A flat sum would tie
  // 1 + 2^-24 back to 1 twice and give 1.
  EXPECT_EQ(out[0].combined_topk_weights.as<float>()[0], 1.0f + 2 * two_to_minus_24);
  EXPECT_NE(1.0f + 2 * two_to_minus_24, 1.0f);
}

// ---- validation ------------------------------------------------------------------------------------

template <typename Call>
std::string message_of(Call&& call) {
  try {
    call();
  } catch (const InvalidArgument& error) {
    return error.what();
  }
  ADD_FAILURE() << "expected InvalidArgument";
  return {};
}

TEST(ReferenceValidation, RefusesBadInputNamingTheArgument) {
  TwoRankCase c;
  EXPECT_NE(message_of([&] {
              layout(i64_tensor(1, 2, {0, 4}), 4, c.topology);
            }).find("topk_idx"),
            std::string::npos);
  EXPECT_NE(message_of([&] {
              layout(i64_tensor(1, 2, {0, -2}), 4, c.topology);
            }).find("-2"),
            std::string::npos);
  EXPECT_NE(message_of([&] { layout(c.topk_idx[0], 3, c.topology); }).find("num_experts"), std::string::npos);
  EXPECT_NE(message_of([&] { normal_dispatch({c.inputs()[0]}, 4, c.topology); }).find("inputs"),
            std::string::npos);

  std::vector<RankInputs> bad_weights = c.inputs();
  Tensor wide = f32_tensor(3, 3, std::vector<float>(9, 0));
  bad_weights[0].topk_weights = wide;
  EXPECT_NE(message_of([&] { normal_dispatch(bad_weights, 4, c.topology); }).find("inputs[0].topk_weights"),
            std::string::npos);

  std::vector<RankInputs> fp8_without_scales = c.inputs();
  Tensor fp8_x = Tensor::empty(DType::fp8_e4m3, {3, 128});
  Tensor fp8_x1 = Tensor::empty(DType::fp8_e4m3, {2, 128});
  fp8_without_scales[0].x = fp8_x;
  fp8_without_scales[1].x = fp8_x1;
  EXPECT_NE(message_of([&] { normal_dispatch(fp8_without_scales, 4, c.topology); }).find("x_scales"),
            std::string::npos);

  std::vector<NormalDispatchOutput> dispatched = normal_dispatch(c.inputs(), c.num_experts, c.topology);
  Tensor short_y = bf16_tensor(2, 2, {0, 0, 0, 0});  // rank 0 received 3 rows
  Tensor y1 = bf16_tensor(2, 2, {0, 0, 0, 0});
  EXPECT_NE(message_of([&] {
              normal_combine({short_y, y1}, {}, dispatched, {3, 2}, c.topology);
            }).find("ys[0]"),
            std::string::npos);
}

}  // namespace
}  // namespace switchyard::reference
