#pragma once
// The CPU path's activation of one local expert's rows (docs/MOE.md): h [rows, 2I] bf16, in W1's stored
// row order (`layout.gate_up`: the gate and up halves, or 128-channel blocks interleaved), to
// a = silu(gate) * up, rounded to bf16 (bf16 recipe) or requantised to e4m3 per 128 channels with an f32
// scale (fp8 recipe), by common/moe_numerics.hpp.
#include <cstdint>

#include "common/moe_layout.hpp"

namespace switchyard::cpu {

// a: bf16 [rows, I].
void swiglu_to_bf16(const common::MoeWeightLayout& layout, const uint16_t* h, int64_t rows, float clamp,
                    uint16_t* a);
// a: e4m3 [rows, I] with a_scales f32 [rows, I / 128]; I a multiple of 128.
void swiglu_to_fp8(const common::MoeWeightLayout& layout, const uint16_t* h, int64_t rows, float clamp,
                   uint8_t* a, float* a_scales);

}  // namespace switchyard::cpu
