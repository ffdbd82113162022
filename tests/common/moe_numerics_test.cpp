// The MoE layer's arithmetic (common/moe_numerics.hpp, docs/MOE.md): each element function on values
// worked out by hand, and the reference layer against an independent evaluation of the same recipe in
// double precision (another summation order, as a GPU kernel has), which must lie within the tolerance
// docs/MOE.md derives, while an evaluation with a wrong expert output must not.
#include "common/moe_numerics.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "common/fp8_cast.hpp"
#include "common/numeric.hpp"
#include "support/test_seed.hpp"
#include "switchyard/reference.hpp"
#include "workload/moe_weights.hpp"
#include "workload/workload.hpp"

namespace switchyard::testing {
namespace {

using common::bf16_to_float;
using common::float_to_bf16;

TEST(MoeNumerics, Bf16DotSumsInOrderFromPositiveZero) {
  // 2^24 + 1 - 2^24: in order, 2^24 + 1 rounds to 2^24 (ties to even), so the sum is 0, not 1.
  const uint16_t x[3] = {float_to_bf16(1.0f), float_to_bf16(1.0f), float_to_bf16(1.0f)};
  const uint16_t w[3] = {float_to_bf16(16777216.0f), float_to_bf16(1.0f), float_to_bf16(-16777216.0f)};
  EXPECT_EQ(common::dot_bf16(x, w, 3), 0.0f);
  const uint16_t negative_zero[1] = {0x8000};
  EXPECT_FALSE(std::signbit(common::dot_bf16(negative_zero, x, 1))) << "+0.0 + (-0.0) is +0.0";
  EXPECT_EQ(common::dot_bf16(x, w, 0), 0.0f);
}

TEST(MoeNumerics, Fp8DotScalesEachBlocksPartialSumOnce) {
  // Two blocks of 128: every x = 1.0 (0x38), w = 0.5 (0x30); partials 64, scales 2 * 3 and 0.25 * 1.
  std::vector<uint8_t> x(256, 0x38), w(256, 0x30);
  const float x_scales[2] = {2.0f, 0.25f}, w_scales[2] = {3.0f, 1.0f};
  ASSERT_EQ(common::fp8_e4m3_to_float(0x38), 1.0f);
  ASSERT_EQ(common::fp8_e4m3_to_float(0x30), 0.5f);
  EXPECT_EQ(common::dot_fp8_blockwise(x.data(), x_scales, w.data(), w_scales, 256),
            64.0f * 6.0f + 64.0f * 0.25f);
}

TEST(MoeNumerics, HIsRoundedToBf16NearestEven) {
  EXPECT_EQ(common::round_h(1.0f), 1.0f);
  EXPECT_EQ(common::round_h(1.0f + 0x1p-8f), 1.0f) << "a tie goes to the even neighbour";
  EXPECT_EQ(common::round_h(1.0f + 3 * 0x1p-8f), 1.0f + 0x1p-6f) << "a tie goes to the even neighbour";
  EXPECT_EQ(common::round_h(1.0f + 0x1p-8f + 0x1p-20f), 1.0f + 0x1p-7f);
  EXPECT_EQ(common::round_h(-1.0f - 0x1p-7f - 0x1p-9f), -1.0f - 0x1p-7f);
  EXPECT_TRUE(std::isnan(common::round_h(std::nanf(""))));
}

TEST(MoeNumerics, SwigluIsSiluOfGateTimesUpWithTheOptionalClamp) {
  EXPECT_EQ(common::swiglu(0.0f, 5.0f, 0.0f), 0.0f);
  EXPECT_FLOAT_EQ(common::swiglu(1.0f, 2.0f, 0.0f), 2.0f / (1.0f + std::exp(-1.0f)));
  EXPECT_FLOAT_EQ(common::swiglu(-2.0f, 3.0f, 0.0f), 3.0f * -2.0f / (1.0f + std::exp(2.0f)));
  // Clamped at 1: gate 5 -> 1, up 7 -> 1, up -7 -> -1; a gate below the clamp stays.
  EXPECT_FLOAT_EQ(common::swiglu(5.0f, 7.0f, 1.0f), 1.0f / (1.0f + std::exp(-1.0f)));
  EXPECT_FLOAT_EQ(common::swiglu(5.0f, -7.0f, 1.0f), -1.0f / (1.0f + std::exp(-1.0f)));
  EXPECT_FLOAT_EQ(common::swiglu(-3.0f, 0.5f, 1.0f), 0.5f * -3.0f / (1.0f + std::exp(3.0f)));
}

TEST(MoeNumerics, RequantisationIsTheDispatchCastOnFp32Values) {
  std::vector<float> values(128);
  for (int i = 0; i < 128; ++i) values[i] = (i % 2 ? -1.0f : 1.0f) * static_cast<float>(i) / 64.0f;
  std::vector<uint8_t> fp8(128);
  const float scale = common::requantise_block_to_fp8(values.data(), fp8.data());
  EXPECT_EQ(scale, (127.0f / 64.0f) / 448.0f);  // amax / 448
  EXPECT_EQ(fp8[127], common::float_to_fp8_e4m3(-448.0f)) << "amax maps to the largest e4m3";
  for (int i = 0; i < 128; ++i) {
    EXPECT_EQ(fp8[i], common::float_to_fp8_e4m3(values[i] * (1.0f / scale))) << i;
  }
  // An all-zero block takes the floor on amax: a finite scale, every value +0.
  std::vector<float> zeros(128, 0.0f);
  EXPECT_EQ(common::requantise_block_to_fp8(zeros.data(), fp8.data()), common::kFp8AmaxFloor / 448.0f);
  EXPECT_EQ(fp8[0], 0);
}

// ---- the reference against an independent evaluation in double ---------------------------------------

// The layer's recipe evaluated in double (sums in double, so in effect in another order than the
// reference's fp32), rounding h, a, o and y where the recipe does. `drop_slot`: a slot left out of every
// token's sum (-1: none), to show that the tolerance catches a wrong output.
std::vector<Tensor> double_evaluation(const std::vector<workload::RankData>& data,
                                      const std::vector<workload::MoeExpertWeights>& weights, int num_experts,
                                      float clamp, int drop_slot) {
  const bool fp8 = weights[0].w1.dtype() == DType::fp8_e4m3;
  const int local_experts = num_experts / static_cast<int>(weights.size());
  const int hidden = static_cast<int>(weights[0].w1.size(2)),
            intermediate = static_cast<int>(weights[0].w1.size(1) / 2);
  // Dequantised weight element of a [L, rows, cols] tensor (and its [L, rows/128, cols/128] scales).
  auto weight = [&](const Tensor& w, const Tensor& scales, int local, int64_t row, int64_t col) -> double {
    const int64_t rows = w.size(1), cols = w.size(2);
    const int64_t at = (local * rows + row) * cols + col;
    if (!fp8) return bf16_to_float(w.as<const uint16_t>()[at]);
    const float scale =
        scales.as<const float>()[(local * (rows / 128) + row / 128) * (cols / 128) + col / 128];
    return static_cast<double>(common::fp8_e4m3_to_float(w.as<const uint8_t>()[at])) * scale;
  };
  std::vector<Tensor> out;
  for (const workload::RankData& rank : data) {
    const int64_t num_tokens = rank.x.size(0), topk = rank.topk_idx.size(1);
    Tensor y = Tensor::empty(DType::bf16, {num_tokens, hidden});
    for (int64_t t = 0; t < num_tokens; ++t) {
      std::vector<double> x(hidden);
      const uint16_t* row = rank.x.as<const uint16_t>() + t * hidden;
      if (fp8) {  // the dispatch's cast: shared by every path
        std::vector<uint8_t> q(hidden);
        std::vector<float> s(hidden / 128);
        common::cast_row_to_fp8(row, hidden, false, q.data(), s.data());
        for (int k = 0; k < hidden; ++k)
          x[k] = static_cast<double>(common::fp8_e4m3_to_float(q[k])) * s[k / 128];
      } else {
        for (int k = 0; k < hidden; ++k) x[k] = bf16_to_float(row[k]);
      }
      std::vector<double> sum(hidden, 0.0);
      for (int64_t j = 0; j < topk; ++j) {
        const int64_t expert = rank.topk_idx.as<const int64_t>()[t * topk + j];
        if (expert < 0 || j == drop_slot) continue;
        const workload::MoeExpertWeights& w = weights[expert / local_experts];
        const int local = static_cast<int>(expert % local_experts);
        std::vector<double> a(intermediate);
        for (int n = 0; n < intermediate; ++n) {
          double gate = 0, up = 0;
          for (int k = 0; k < hidden; ++k) {
            gate += x[k] * weight(w.w1, w.w1_scales, local, n, k);
            up += x[k] * weight(w.w1, w.w1_scales, local, intermediate + n, k);
          }
          // h is stored in bf16 (rounding point 2).
          gate = bf16_to_float(float_to_bf16(static_cast<float>(gate)));
          up = bf16_to_float(float_to_bf16(static_cast<float>(up)));
          if (clamp > 0) {
            gate = std::fmin(gate, clamp);
            up = std::fmax(-clamp, std::fmin(up, clamp));
          }
          a[n] = gate / (1.0 + std::exp(-gate)) * up;
        }
        for (int block = 0; block < intermediate / 128 && fp8; ++block) {
          double amax = 0;
          for (int n = block * 128; n < (block + 1) * 128; ++n) amax = std::fmax(amax, std::fabs(a[n]));
          const double scale = std::fmax(amax, 1e-4) / 448.0;
          for (int n = block * 128; n < (block + 1) * 128; ++n) {
            a[n] = common::fp8_e4m3_to_float(common::float_to_fp8_e4m3(static_cast<float>(a[n] / scale))) *
                   scale;
          }
        }
        if (!fp8) {
          for (double& value : a) value = bf16_to_float(float_to_bf16(static_cast<float>(value)));
        }
        const double gate_weight = rank.topk_weights.as<const float>()[t * topk + j];
        for (int m = 0; m < hidden; ++m) {
          double o = 0;
          for (int n = 0; n < intermediate; ++n) o += a[n] * weight(w.w2, w.w2_scales, local, m, n);
          sum[m] += gate_weight * bf16_to_float(float_to_bf16(static_cast<float>(o)));
        }
      }
      for (int m = 0; m < hidden; ++m)
        y.as<uint16_t>()[t * hidden + m] = float_to_bf16(static_cast<float>(sum[m]));
    }
    out.push_back(y);
  }
  return out;
}

class MoeTolerance : public ::testing::TestWithParam<DType> {};

TEST_P(MoeTolerance, AnotherSummationOrderIsWithinItAndAWrongOutputIsNot) {
  const DType dtype = GetParam();
  const bool fp8 = dtype == DType::fp8_e4m3;
  const uint64_t seed = seed_for(std::string("moe_tolerance/") + dtype_name(dtype));
  workload::Shape shape;
  shape.topology = Topology::single_node(2);
  // NOTES: large enough that some element of y rounds differently in the two orders (in bf16).
  // With h rounded to bf16 (which absorbs most of GEMM 1's order), 28 tokens left y bit-identical.
  shape.tokens_per_rank_list = {64, 48};
  shape.hidden = 512;
  shape.topk = 2;
  shape.num_experts = 4;
  const int intermediate = 256;
  const float clamp = 0.0f;
  const std::vector<workload::RankData> data = workload::generate(shape, seed);
  std::vector<workload::MoeExpertWeights> weights;
  std::vector<MoeWeights> views;
  std::vector<reference::RankInputs> inputs;
  for (int rank = 0; rank < 2; ++rank) {
    weights.push_back(workload::generate_moe_weights(2, shape.hidden, intermediate, dtype, seed, rank));
    views.push_back(weights.back().weights());
    inputs.push_back(data[rank].inputs());
  }
  std::vector<Tensor> scales;
  const std::vector<Tensor> y = reference::moe_layer(inputs, views, 4, shape.topology, clamp, &scales);
  const std::vector<Tensor> exact = double_evaluation(data, weights, 4, clamp, -1);
  const std::vector<Tensor> wrong = double_evaluation(data, weights, 4, clamp, 1);
  int64_t differing = 0;
  for (int rank = 0; rank < 2; ++rank) {
    std::string why;
    EXPECT_TRUE(reference::within_moe_tolerance(exact[rank], y[rank], scales[rank], dtype, &why))
        << "rank " << rank << ": " << why << " (seed " << seed << ")";
    EXPECT_FALSE(reference::within_moe_tolerance(wrong[rank], y[rank], scales[rank], dtype))
        << "rank " << rank << ": leaving slot 1 out stayed within the tolerance (seed " << seed << ")";
    for (int64_t i = 0; i < y[rank].numel(); ++i) {
      differing += exact[rank].as<const uint16_t>()[i] != y[rank].as<const uint16_t>()[i];
    }
  }
  // In bf16 the comparison is not vacuous: the two evaluations do not simply agree bit for bit. (In fp8
  // they may: e4m3 products and their 128-term block sums are exact in fp32, and what is left of the
  // order's effect rarely survives the rounding of o to bf16.)
  if (!fp8) {
    EXPECT_GT(differing, 0) << "seed " << seed;
  }
}

INSTANTIATE_TEST_SUITE_P(Recipes, MoeTolerance, ::testing::Values(DType::bf16, DType::fp8_e4m3),
                         [](const ::testing::TestParamInfo<DType>& info) {
                           return std::string(dtype_name(info.param));
                         });

}  // namespace
}  // namespace switchyard::testing
