#pragma once
// The CPU path's GEMMs of one local expert (docs/MOE.md): out[r, n] = sum_k a[r, k] * w[n, k] for every
// received row r and output channel n, each element by common/moe_numerics.hpp in its order, so that
// the result is the reference's bit for bit. fp32 results; the caller rounds or requantises them.
#include <cstdint>

#include "common/moe_layout.hpp"

namespace switchyard::cpu {

// a: bf16 [rows, k]; w: bf16 [n, k]; out: f32 [rows, n].
void gemm_bf16(const uint16_t* a, int64_t rows, const uint16_t* w, int64_t n, int k, float* out);

// a: e4m3 [rows, k] with a_scales f32 [rows, k / 128]; w: e4m3 [n, k] with w_scales f32 [n / 128, k / 128]
// (one per 128 x 128 block); out: f32 [rows, n]. k and n are multiples of 128. With `w1` given, w is W1 in
// that layout and its row s takes scale row w1->w1_scale_row_of_stored(s) (MoeGateUp::interleaved moves
// rows in 64-row blocks); without, row s takes s / 128.
void gemm_fp8_blockwise(const uint8_t* a, const float* a_scales, int64_t rows, const uint8_t* w,
                        const float* w_scales, int64_t n, int k, float* out,
                        const common::MoeWeightLayout* w1 = nullptr);

}  // namespace switchyard::cpu
