// The synthetic workloads: deterministic in the seed, with the routings and value ranges they promise.
#include "workload/workload.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <set>

#include "common/numeric.hpp"

namespace switchyard::workload {
namespace {

Shape shape_of(Routing routing, DType dtype = DType::bf16, int num_ranks = 4) {
  Shape shape;
  shape.topology = Topology::single_node(num_ranks);
  shape.tokens_per_rank = 64;
  shape.hidden = 256;
  shape.topk = 8;
  shape.num_experts = 32;
  shape.dtype = dtype;
  shape.routing = routing;
  return shape;
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.data(), b.data(), a.nbytes()) == 0;
}

TEST(Workload, GenerateIsDeterministicInTheSeed) {
  for (DType dtype : {DType::bf16, DType::fp8_e4m3}) {
    Shape shape = shape_of(Routing::random, dtype);
    std::vector<RankData> a = generate(shape, 42), b = generate(shape, 42), c = generate(shape, 43);
    for (int rank = 0; rank < 4; ++rank) {
      EXPECT_TRUE(same_bytes(a[rank].x, b[rank].x));
      EXPECT_TRUE(same_bytes(a[rank].topk_idx, b[rank].topk_idx));
      EXPECT_TRUE(same_bytes(a[rank].topk_weights, b[rank].topk_weights));
      if (dtype == DType::fp8_e4m3) {
        EXPECT_TRUE(same_bytes(a[rank].x_scales, b[rank].x_scales));
      }
      EXPECT_FALSE(same_bytes(a[rank].x, c[rank].x));
      EXPECT_FALSE(same_bytes(a[rank].topk_idx, c[rank].topk_idx));
    }
    // Ranks draw different inputs.
    EXPECT_FALSE(same_bytes(a[0].x, a[1].x));
  }
}

// Pins the streams: a change here changes every seeded test and benchmark input.
TEST(Workload, DrawsAreStableAcrossStandardLibraries) {
  Shape shape = shape_of(Routing::random);
  shape.tokens_per_rank = 2;
  shape.topology = Topology::single_node(1);
  RankData data = generate(shape, 1)[0];
  std::vector<int64_t> ids(data.topk_idx.as<int64_t>(), data.topk_idx.as<int64_t>() + 16);
  const std::vector<int64_t> kGoldenIds = {1, -1, -1, 18, 22, 24, 12, 3, 16, 11, 14, 7, 3, 18, 19, 13};
  EXPECT_EQ(ids, kGoldenIds);
  std::vector<uint16_t> values(data.x.as<uint16_t>(), data.x.as<uint16_t>() + 4);
  const std::vector<uint16_t> kGoldenValues = {16435, 48158, 15554, 15647};
  EXPECT_EQ(values, kGoldenValues);
  // Weights are multiples of 2^-24: compare the integers.
  std::vector<int64_t> weights;
  for (int i = 0; i < 2; ++i)
    weights.push_back(static_cast<int64_t>(data.topk_weights.as<float>()[i] * 16777216.0f));
  const std::vector<int64_t> kGoldenWeights = {7688230, 8241016};
  EXPECT_EQ(weights, kGoldenWeights);
}

TEST(Workload, RandomRoutingDrawsDistinctExpertsWithSomeSlotsInvalid) {
  Shape shape = shape_of(Routing::random);
  int64_t invalid = 0, total = 0;
  for (const RankData& data : generate(shape, 7)) {
    const int64_t* ids = data.topk_idx.as<int64_t>();
    for (int64_t token = 0; token < shape.tokens_per_rank; ++token) {
      std::set<int64_t> seen;
      for (int slot = 0; slot < shape.topk; ++slot) {
        const int64_t id = ids[token * shape.topk + slot];
        ++total;
        if (id == -1) {
          ++invalid;
          continue;
        }
        ASSERT_GE(id, 0);
        ASSERT_LT(id, shape.num_experts);
        EXPECT_TRUE(seen.insert(id).second) << "expert " << id << " twice in token " << token;
      }
    }
    for (int64_t i = 0; i < data.topk_weights.numel(); ++i) EXPECT_GT(data.topk_weights.as<float>()[i], 0.0f);
  }
  // About one in 16 (2048 slots: expect 128).
  EXPECT_GT(invalid, total / 40);
  EXPECT_LT(invalid, total / 8);
}

TEST(Workload, EdgeRoutingsDoWhatTheySay) {
  for (const RankData& data : generate(shape_of(Routing::all_invalid), 1)) {
    for (int64_t i = 0; i < data.topk_idx.numel(); ++i) EXPECT_EQ(data.topk_idx.as<int64_t>()[i], -1);
  }
  std::set<int64_t> experts;
  for (const RankData& data : generate(shape_of(Routing::one_expert), 1)) {
    for (int64_t token = 0; token < data.topk_idx.size(0); ++token) {
      experts.insert(data.topk_idx.as<int64_t>()[token * 8]);
      for (int slot = 1; slot < 8; ++slot) EXPECT_EQ(data.topk_idx.as<int64_t>()[token * 8 + slot], -1);
    }
  }
  EXPECT_EQ(experts.size(), 1u);
  EXPECT_GE(*experts.begin(), 0);

  int64_t on_rank0 = 0, total = 0;
  for (const RankData& data : generate(shape_of(Routing::skewed), 1)) {
    for (int64_t i = 0; i < data.topk_idx.numel(); ++i) {
      ++total;
      on_rank0 += data.topk_idx.as<int64_t>()[i] < 8 ? 1 : 0;
    }
  }
  EXPECT_GT(on_rank0, total / 2) << "skewed routing should favour rank 0's experts";
}

TEST(Workload, ValuesAreFiniteWithZerosAndNegatives) {
  int zeros = 0, negatives = 0;
  for (const RankData& data : generate(shape_of(Routing::random), 3)) {
    for (int64_t i = 0; i < data.x.numel(); ++i) {
      const float value = common::bf16_to_float(data.x.as<uint16_t>()[i]);
      ASSERT_TRUE(std::isfinite(value));
      ASSERT_LT(std::fabs(value), 4.0f);
      zeros += value == 0.0f;
      negatives += value < 0.0f;
    }
  }
  EXPECT_GT(zeros, 0);
  EXPECT_GT(negatives, 0);
  for (const RankData& data : generate(shape_of(Routing::random, DType::fp8_e4m3), 3)) {
    for (int64_t i = 0; i < data.x.numel(); ++i) {
      ASSERT_NE(data.x.as<uint8_t>()[i] & 0x7F, 0x7F) << "fp8 NaN at " << i;
    }
    ASSERT_EQ(data.x_scales.size(1), 2);
    for (int64_t i = 0; i < data.x_scales.numel(); ++i) ASSERT_GT(data.x_scales.as<float>()[i], 0.0f);
  }
}

TEST(Workload, SyntheticExpertScalesDequantisedRowsByRank) {
  Tensor x = Tensor::empty(DType::bf16, {1, 2});
  x.as<uint16_t>()[0] = common::float_to_bf16(1.0f);
  x.as<uint16_t>()[1] = common::float_to_bf16(-2.0f);
  Tensor y = synthetic_expert(x, TensorView(), 4);  // factor 1.5
  EXPECT_EQ(y.as<uint16_t>()[0], common::float_to_bf16(1.5f));
  EXPECT_EQ(y.as<uint16_t>()[1], common::float_to_bf16(-3.0f));

  Tensor q = Tensor::empty(DType::fp8_e4m3, {1, 256});
  std::memset(q.data(), 0x38, 256);  // 1.0
  Tensor scales = Tensor::empty(DType::f32, {1, 2});
  scales.as<float>()[0] = 0.5f;
  scales.as<float>()[1] = 0.25f;
  Tensor yq = synthetic_expert(q, scales, 8);  // factor 2
  EXPECT_EQ(yq.as<uint16_t>()[0], common::float_to_bf16(1.0f));
  EXPECT_EQ(yq.as<uint16_t>()[127], common::float_to_bf16(1.0f));
  EXPECT_EQ(yq.as<uint16_t>()[128], common::float_to_bf16(0.5f));
}

TEST(Workload, PoisonAndBitwiseEqualExplainTheFirstDifference) {
  Tensor a = Tensor::empty(DType::bf16, {3, 4});
  Tensor b = Tensor::empty(DType::bf16, {3, 4});
  poison(a);
  poison(b);
  EXPECT_EQ(a.as<uint8_t>()[0], 0xA5);
  std::string why;
  EXPECT_TRUE(bitwise_equal(a, b, &why));
  b.as<uint16_t>()[6] = common::float_to_bf16(1.0f);  // row 1, column 2
  EXPECT_FALSE(bitwise_equal(a, b, &why));
  EXPECT_NE(why.find("row 1, column 2"), std::string::npos) << why;
  EXPECT_NE(why.find("0x3f80"), std::string::npos) << why;
  EXPECT_NE(why.find("0xa5a5"), std::string::npos) << why;
  // Only the first row compared.
  EXPECT_TRUE(bitwise_equal(a, b, &why, 1));
  // Rows beyond the compared ones may differ in number too.
  Tensor longer = Tensor::empty(DType::bf16, {5, 4});
  poison(longer);
  EXPECT_TRUE(bitwise_equal(longer, a, &why, 1));
  EXPECT_FALSE(bitwise_equal(longer, a, &why));
  EXPECT_NE(why.find("shape"), std::string::npos) << why;
  Tensor other_dtype = Tensor::empty(DType::f32, {3, 2});
  EXPECT_FALSE(bitwise_equal(other_dtype, a, &why));
  EXPECT_NE(why.find("dtype"), std::string::npos) << why;
}

}  // namespace
}  // namespace switchyard::workload
