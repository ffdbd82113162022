#pragma once
// The bench's expert weights, a pure function of (seed, rank, tensor, element), so that the GPU makes
// them where they live (11 GB of fp8 for DeepSeek-V3's 256 experts: too many to draw on the host and
// upload) and the host makes again exactly the few experts its reference check needs.
//   bf16: w = bf16(u / sqrt(fan_in)), u uniform in [-1, 1).
//   fp8:  w = e4m3(u * 416), one f32 scale per 128 x 128 block of (0.5 + v / 2) / (448 sqrt(fan_in)),
//         v uniform in [0, 1) per block: dequantised, about the bf16 weights' range.
#include <cstdint>

#include "common/fp8_cast.hpp"
#include "common/host_device.hpp"
#include "common/moe_layout.hpp"
#include "common/numeric.hpp"
#include "switchyard/moe.hpp"

namespace switchyard::moe_bench {

// The weights, and the operands of the GEMMs the bench times alone (synthetic activations: A of GEMM 1
// and of GEMM 2, and their scales), each its own stream of numbers.
enum class WeightTensor : uint32_t {
  w1 = 1,
  w2 = 2,
  w1_scales = 3,
  w2_scales = 4,
  gemm1_a = 5,
  gemm2_a = 6,
  gemm1_a_scales = 7,
  gemm2_a_scales = 8
};

SY_HD uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Uniform in [-1, 1) for element `index` of `tensor` on `rank`.
SY_HD float synthetic_uniform(uint64_t seed, int rank, WeightTensor tensor, uint64_t index) {
  const uint64_t key =
      mix64(seed ^ (static_cast<uint64_t>(rank) << 40) ^ (static_cast<uint64_t>(tensor) << 56));
  const uint64_t bits = mix64(key ^ index) >> 40;  // 24 bits
  return static_cast<float>(bits) * (2.0f / 16777216.0f) - 1.0f;
}

// The fan-in of a weight tensor: W1's is H, W2's is I.
SY_HD int fan_in(const common::MoeWeightLayout& layout, WeightTensor tensor) {
  return tensor == WeightTensor::w1 || tensor == WeightTensor::w1_scales ? layout.hidden
                                                                         : layout.intermediate;
}

SY_HD uint16_t synthetic_bf16(uint64_t seed, int rank, WeightTensor tensor, uint64_t index,
                              float inverse_sqrt_fan_in) {
  return common::float_to_bf16(synthetic_uniform(seed, rank, tensor, index) * inverse_sqrt_fan_in);
}
SY_HD uint8_t synthetic_e4m3(uint64_t seed, int rank, WeightTensor tensor, uint64_t index) {
  return common::float_to_fp8_e4m3(synthetic_uniform(seed, rank, tensor, index) * 416.0f);
}
SY_HD float synthetic_scale(uint64_t seed, int rank, WeightTensor scales, uint64_t index,
                            float inverse_sqrt_fan_in) {
  const float v = 0.5f * (synthetic_uniform(seed, rank, scales, index) + 1.0f);
  return (0.5f + 0.5f * v) * inverse_sqrt_fan_in / 448.0f;
}

// Fills one rank's W1, W2 (and scales) on the device, on `stream`.
void fill_weights_on_device(const MoeWeights& weights, const common::MoeWeightLayout& layout,
                            int local_experts, bool fp8, uint64_t seed, int rank, void* stream);

// Fills a GEMM's A operand (and its per-row, per-128-K scales when fp8) with synthetic activations on
// the device, on `stream`: the numbers a cast row holds (bf16: u, |u| < 1; fp8: e4m3(u * 416) with
// scales (0.5 + v / 2) / 448), never zeros, so that the GEMMs timed alone draw the power the layer's do
// (tensor cores on zeros run cooler and faster). `scales` is empty for bf16.
void fill_activations_on_device(const TensorView& a, const TensorView& scales, WeightTensor which,
                                WeightTensor which_scales, uint64_t seed, int rank, void* stream);

// Fills expert `local` of one rank's host tensors (full shape; the other experts are not touched).
void fill_expert_on_host(const MoeWeights& weights, const common::MoeWeightLayout& layout, int local,
                         bool fp8, uint64_t seed, int rank);

}  // namespace switchyard::moe_bench
