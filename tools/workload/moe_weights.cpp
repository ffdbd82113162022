#include "workload/moe_weights.hpp"

#include <cmath>
#include <random>
#include <vector>

#include "common/moe_layout.hpp"
#include "common/numeric.hpp"
#include "switchyard/errors.hpp"

namespace switchyard::workload {

namespace {

// A value uniform in (-bound, bound) from 24 random bits: the same stream on every standard library
// (std::uniform_real_distribution is implementation-defined).
float draw_uniform(std::mt19937_64& rng, float bound) {
  const float unit = static_cast<float>(rng() >> 40) * (1.0f / 16777216.0f);  // [0, 1)
  return (2.0f * unit - 1.0f) * bound;
}

// `rows` x `cols` weights of expert matrices [experts, rows, cols], drawn and stored.
struct Matrix {
  int64_t experts, rows, cols;
};

Tensor bf16_weights(const Matrix& m, std::mt19937_64& rng) {
  Tensor w = Tensor::empty(DType::bf16, {m.experts, m.rows, m.cols});
  const float bound = 1.0f / std::sqrt(static_cast<float>(m.cols));
  uint16_t* values = w.as<uint16_t>();
  for (int64_t i = 0; i < w.numel(); ++i) values[i] = common::float_to_bf16(draw_uniform(rng, bound));
  return w;
}

// e4m3 weights and their [experts, rows / 128, cols / 128] block scales.
void fp8_weights(const Matrix& m, std::mt19937_64& rng, Tensor& w, Tensor& scales) {
  constexpr int kBlock = common::kMoeScaleBlock;
  w = Tensor::empty(DType::fp8_e4m3, {m.experts, m.rows, m.cols});
  scales = Tensor::empty(DType::f32, {m.experts, m.rows / kBlock, m.cols / kBlock});
  const float bound = 1.0f / std::sqrt(static_cast<float>(m.cols));
  std::vector<float> values(static_cast<size_t>(m.rows * m.cols));
  for (int64_t expert = 0; expert < m.experts; ++expert) {
    for (float& value : values) value = draw_uniform(rng, bound);
    for (int64_t block_row = 0; block_row < m.rows / kBlock; ++block_row) {
      for (int64_t block_col = 0; block_col < m.cols / kBlock; ++block_col) {
        float amax = 0.0f;
        for (int64_t r = block_row * kBlock; r < (block_row + 1) * kBlock; ++r) {
          for (int64_t c = block_col * kBlock; c < (block_col + 1) * kBlock; ++c) {
            amax = std::fmax(amax, std::fabs(values[r * m.cols + c]));
          }
        }
        const float scale = amax > 0.0f ? amax / common::kFp8E4m3Max : 1.0f;
        scales.as<float>()[(expert * (m.rows / kBlock) + block_row) * (m.cols / kBlock) + block_col] = scale;
        for (int64_t r = block_row * kBlock; r < (block_row + 1) * kBlock; ++r) {
          for (int64_t c = block_col * kBlock; c < (block_col + 1) * kBlock; ++c) {
            w.as<uint8_t>()[(expert * m.rows + r) * m.cols + c] =
                common::float_to_fp8_e4m3(values[r * m.cols + c] / scale);
          }
        }
      }
    }
  }
}

uint64_t mix(uint64_t value) {
  value += 0x9E3779B97F4A7C15ull;
  value = (value ^ (value >> 30)) * 0xBF58476D1CE4E5B9ull;
  value = (value ^ (value >> 27)) * 0x94D049BB133111EBull;
  return value ^ (value >> 31);
}

}  // namespace

MoeExpertWeights generate_moe_weights(int local_experts, int hidden, int intermediate, DType dtype,
                                      uint64_t seed, int rank) {
  if (dtype != DType::bf16 && dtype != DType::fp8_e4m3) {
    throw InvalidArgument(std::string("dtype: expected bf16 or fp8_e4m3, got ") + dtype_name(dtype));
  }
  const bool fp8 = dtype == DType::fp8_e4m3;
  if (fp8 && (hidden % common::kMoeScaleBlock != 0 || intermediate % common::kMoeScaleBlock != 0)) {
    throw InvalidArgument("hidden, intermediate: expected multiples of 128 for fp8 weights, got " +
                          std::to_string(hidden) + " and " + std::to_string(intermediate));
  }
  std::mt19937_64 rng(mix(mix(seed) ^ static_cast<uint64_t>(rank)));
  const Matrix w1{local_experts, 2 * static_cast<int64_t>(intermediate), hidden};
  const Matrix w2{local_experts, hidden, intermediate};
  MoeExpertWeights out;
  if (fp8) {
    fp8_weights(w1, rng, out.w1, out.w1_scales);
    fp8_weights(w2, rng, out.w2, out.w2_scales);
  } else {
    out.w1 = bf16_weights(w1, rng);
    out.w2 = bf16_weights(w2, rng);
  }
  return out;
}

}  // namespace switchyard::workload
