#pragma once
// Seeded synthetic expert weights for the MoE layer (switchyard/moe.hpp, docs/MOE.md), shared by the
// tests and the bench. Host tensors.
#include <cstdint>

#include "switchyard/moe.hpp"
#include "switchyard/tensor.hpp"

namespace switchyard::workload {

// One rank's experts, owning their storage; weights() views them as the layer takes them.
struct MoeExpertWeights {
  Tensor w1, w1_scales, w2, w2_scales;
  MoeWeights weights() const { return {w1, w1_scales, w2, w2_scales}; }
};

// W1 [L, 2I, H] and W2 [L, H, I] with values uniform in (-1, 1) / sqrt(fan-in), deterministic in
// (shape, dtype, seed, rank). bf16: the values rounded to bf16. fp8_e4m3: quantised as a checkpoint
// is, one f32 scale per 128 x 128 block (amax / 448), the values cast to e4m3 (H and I multiples of 128).
MoeExpertWeights generate_moe_weights(int local_experts, int hidden, int intermediate, DType dtype,
                                      uint64_t seed, int rank);

}  // namespace switchyard::workload
