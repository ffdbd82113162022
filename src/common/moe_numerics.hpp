#pragma once
// The MoE layer's arithmetic per output element (docs/MOE.md, "Rounding points"): the reference and the
// CPU path both compute every element with these, in this order, so that they agree bit for bit. The
// CUDA path's GEMMs accumulate in their own order and are held to the tolerance docs/MOE.md derives.
#include <math.h>

#if defined(__CUDACC__)
#include <cuda_bf16.h>
#endif

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

// Rounding point 2: each element of h (GEMM 1's fp32 sum) stored in bf16, round to nearest even, as the
// GEMMs' epilogues round; SwiGLU reads it back as fp32. Returns the rounded value as fp32.
SY_HD float round_h(float sum) {
#if defined(__CUDA_ARCH__)
  // The hardware's cvt.rn.bf16.f32: one instruction where float_to_bf16's bit arithmetic takes five (the
  // SwiGLU epilogue rounds 64 values a tile a thread), the same rounding, and the conversion CUTLASS's
  // epilogue applies when the separate path stores h.
  return __bfloat162float(__float2bfloat16_rn(sum));
#else
  return bf16_to_float(float_to_bf16(sum));
#endif
}

// Rounding point 3's optional clamp (clamp > 0): gate = min(gate, clamp), up = clamp(up, -clamp, clamp).
SY_HD void clamp_gate_up(float& gate, float& up, float clamp) {
  if (clamp > 0.0f) {
    gate = gate < clamp ? gate : clamp;
    up = up < -clamp ? -clamp : (up > clamp ? clamp : up);
  }
}

// silu(gate) * up in fp32, after clamp_gate_up. silu(g) = g / (1 + exp(-g)); its exp and division are the
// one place whose bits a CUDA kernel need not share with the CPU (the tolerance covers it).
SY_HD float swiglu(float gate, float up, float clamp) {
  clamp_gate_up(gate, up, clamp);
#if defined(__CUDA_ARCH__)
  // On the GPU: the hardware's exp2 and reciprocal (ex2.approx, rcp.approx: about 2 ulp each), every GPU
  // path alike (the SwiGLU kernel, GEMM 1's SwiGLU epilogue), so they keep one another's bits. IEEE
  // division and the precise expf cost ~30 instructions an element, which made the SwiGLU kernel
  // issue-bound once h came in bf16 (bench/NOTES.md, session 23); the tolerance covers the difference.
  // gate / inf (exp overflowing for a very negative gate) still gives -0 (x * rcp(inf)).
  const float silu = __fdividef(gate, 1.0f + __expf(-gate));
#else
  const float silu = gate / (1.0f + expf(-gate));
#endif
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
