#pragma once
// The MoE layer's arithmetic per output element (docs/MOE.md, "Rounding points"): the reference and the
// CPU path both compute every element with these, in this order, so that they agree bit for bit. The
// CUDA path's GEMMs accumulate in their own order and are held to the tolerance docs/MOE.md derives.
#include <math.h>

#include "common/fp8_cast.hpp"
#include "common/host_device.hpp"
#include "common/numeric.hpp"

namespace switchyard::common {

// sum_k x[k] * w[k] over k ascending, in fp32 from +0.0, each step one fused multiply-add. A product of
// two bf16 values is exact in fp32 (8 x 8 significant bits) unless it underflows, so fused or not
// changes nothing in practice: the order of the additions decides the bits.
SY_HD float dot_bf16(const uint16_t* x, const uint16_t* w, int count) {
  float sum = 0.0f;
  for (int k = 0; k < count; ++k) sum = fmaf(bf16_to_float(x[k]), bf16_to_float(w[k]), sum);
  return sum;
}

// The fp8 recipe's block-scaled dot product (DeepGEMM's SM90 promotion): per block of 128 channels,
// ascending, a partial sum of the e4m3 products in fp32 from +0.0 (each product is exact in fp32), then
// sum = fma(partial, x_scale[b] * w_scale[b], sum). `count` is a multiple of 128; x_scales and w_scales
// hold count / 128 scales (w_scales: the block row of this output channel).
SY_HD float dot_fp8_blockwise(const uint8_t* x, const float* x_scales, const uint8_t* w,
                              const float* w_scales, int count) {
  float sum = 0.0f;
  for (int block = 0; block < count / kFp8CastBlock; ++block) {
    float partial = 0.0f;
    for (int k = block * kFp8CastBlock; k < (block + 1) * kFp8CastBlock; ++k) {
      partial = fmaf(fp8_e4m3_to_float(x[k]), fp8_e4m3_to_float(w[k]), partial);
    }
    sum = fmaf(partial, x_scales[block] * w_scales[block], sum);
  }
  return sum;
}

// silu(gate) * up in fp32, with the optional clamp (clamp > 0): gate = min(gate, clamp),
// up = clamp(up, -clamp, clamp). silu(g) = g / (1 + exp(-g)); expf is the one function whose bits a
// CUDA kernel need not share (its tolerance covers it).
SY_HD float swiglu(float gate, float up, float clamp) {
  if (clamp > 0.0f) {
    gate = gate < clamp ? gate : clamp;
    up = up < -clamp ? -clamp : (up > clamp ? clamp : up);
  }
  const float silu = gate / (1.0f + expf(-gate));
  return silu * up;
}

// The fp8 recipe's requantisation of one block of 128 fp32 activations: the dispatch's cast
// (common/fp8_cast.hpp: scale = max(amax, 1e-4) / 448, value = e4m3(a * (1 / scale))), on fp32
// values instead of bf16 ones. Returns the scale.
SY_HD float requantise_block_to_fp8(const float* values, uint8_t* fp8_values) {
  float amax = 0.0f;
  for (int i = 0; i < kFp8CastBlock; ++i) {
    const float magnitude = fabsf(values[i]);
    if (magnitude > amax) amax = magnitude;  // NaN ignored, as in block_amax
  }
  const float scale = fp8_block_scale(amax, false);
  const float inverse = 1.0f / scale;
  for (int i = 0; i < kFp8CastBlock; ++i) fp8_values[i] = float_to_fp8_e4m3(values[i] * inverse);
  return scale;
}

}  // namespace switchyard::common
