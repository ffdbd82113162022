#pragma once
// LogFMT-10: the low-latency combine's optional lossy format for the expert outputs (DeepEP's
// `use_logfmt`), specified here so that the reference, the CPU engine and the CUDA kernels agree bit
// for bit. Per block of 128 channels of one bf16 row:
//   amax, amin  = the largest and smallest |x| in the block (bf16 values as float)
//   log_amax    = log2(amax)
//   log_amin    = log_amax - 32 when amin is 0, else max(log2(amin), log_amax - 32)
//   cast        = log_amax < 0 and log_amin < log_amax, and no NaN or infinity in the block
// A block that is not cast keeps its bf16 values. A cast block stores per value a sign bit and a 9-bit
// code (10 bits instead of 16):
//   step  = (log_amax - log_amin) / 510,  step_inv = 1 / step
//   round = 2 - log2((1 + exp2(step)) / 2) * step_inv     (rounds in the linear domain, not the log one)
//   code  = 0 for x = 0, else min(511, floor(max(log2|x| * step_inv + round - log_amin * step_inv, 0)))
//   value = 0 for code 0, else exp2((code - 1) * step + log_amin), with x's sign
// and the combine accumulates `value` (a float, not rounded to bf16) where it would accumulate x.
// How a row travels (cast blocks as their 10-bit words and the two floats `value` needs, the rest as
// bf16) is common/logfmt_wire.hpp's; the reference applies logfmt_round_trip_row to the bf16 rows.
//
// NOTES: the hardware's log2/exp2 approximations (lg2.approx, ex2.approx) differ from the host's libm,
// so log2 and exp2 below are written out in IEEE operations with one rounding each (explicit
// multiply, add, divide and fused multiply-add), which round identically on the host and the GPU.
// About 1e-7 relative error, far below the format's own step.
#include <cmath>

#include "common/host_device.hpp"
#include "common/numeric.hpp"

namespace switchyard::common {

constexpr int kLogfmtBlock = 128;         // channels that share amax and amin
constexpr uint32_t kLogfmtMaxCode = 511;  // 9 magnitude bits; code 0 is zero
constexpr float kLogfmtSteps = 510.0f;    // codes 1..511 span [log_amin, log_amax]
constexpr float kLogfmtMinClip = 32.0f;   // log_amin >= log_amax - 32

// One IEEE rounding each, on both sides (nvcc would otherwise contract a * b + c into a fused
// multiply-add; the host compilers here do not, as x86-64 without -mfma has none).
SY_HD float ieee_mul(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
SY_HD float ieee_add(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
SY_HD float ieee_div(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}
SY_HD float ieee_fma(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
  return __fmaf_rn(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}

// log2(x) for x >= 0: -inf at 0, +inf at +inf, NaN for NaN or negative x.
SY_HD float logfmt_log2(float x) {
  if (!(x >= 0.0f)) return bits_to_float(0x7fc00000u);
  if (x == 0.0f) return bits_to_float(0xff800000u);
  uint32_t bits = float_to_bits(x);
  if ((bits & 0x7f800000u) == 0x7f800000u) return x;  // +inf
  int exponent = 0;
  if ((bits & 0x7f800000u) == 0) {                  // subnormal: scale into the normal range (exact)
    bits = float_to_bits(ieee_mul(x, 8388608.0f));  // 2^23
    exponent = -23;
  }
  exponent += static_cast<int>((bits >> 23) & 0xffu) - 127;
  float mantissa = bits_to_float((bits & 0x007fffffu) | 0x3f800000u);  // [1, 2)
  if (mantissa > 1.41421356f) {
    mantissa = ieee_mul(mantissa, 0.5f);  // [0.707, 1.414]: the series below converges fast
    exponent += 1;
  }
  // ln(m) = 2 atanh(t) = 2 (t + t^3/3 + t^5/5 + ...), t = (m - 1) / (m + 1), |t| <= 0.172.
  const float t = ieee_div(ieee_add(mantissa, -1.0f), ieee_add(mantissa, 1.0f));
  const float t2 = ieee_mul(t, t);
  float series = 1.0f / 13.0f;
  series = ieee_fma(series, t2, 1.0f / 11.0f);
  series = ieee_fma(series, t2, 1.0f / 9.0f);
  series = ieee_fma(series, t2, 1.0f / 7.0f);
  series = ieee_fma(series, t2, 1.0f / 5.0f);
  series = ieee_fma(series, t2, 1.0f / 3.0f);
  series = ieee_fma(series, t2, 1.0f);
  const float ln_mantissa = ieee_mul(ieee_mul(2.0f, t), series);
  constexpr float kInverseLn2 = 1.44269504f;
  return ieee_fma(ln_mantissa, kInverseLn2, static_cast<float>(exponent));
}

// 2^y: 0 below 2^-160 (under the smallest subnormal), +inf from 2^128, NaN for NaN.
SY_HD float logfmt_exp2(float y) {
  if (y != y) return y;
  if (y < -160.0f) return 0.0f;
  if (y >= 128.0f) return bits_to_float(0x7f800000u);
  // y = n + f with n an integer and |f| <= 1/2; 2^f = e^(f ln 2) by its Taylor series.
  const float n = floorf(ieee_add(y, 0.5f));
  const float f = ieee_add(y, -n);
  constexpr float kLn2 = 0.693147181f;
  const float g = ieee_mul(f, kLn2);
  float series = 1.0f / 40320.0f;
  series = ieee_fma(series, g, 1.0f / 5040.0f);
  series = ieee_fma(series, g, 1.0f / 720.0f);
  series = ieee_fma(series, g, 1.0f / 120.0f);
  series = ieee_fma(series, g, 1.0f / 24.0f);
  series = ieee_fma(series, g, 1.0f / 6.0f);
  series = ieee_fma(series, g, 0.5f);
  series = ieee_fma(series, g, 1.0f);
  series = ieee_fma(series, g, 1.0f);
  // Times 2^n, built from its bits; below the normal range in two exact-then-rounded steps.
  const int power = static_cast<int>(n);
  if (power > 127) return ieee_mul(ieee_mul(series, bits_to_float(254u << 23)), 2.0f);  // y near 128
  if (power >= -126) return ieee_mul(series, bits_to_float(static_cast<uint32_t>(power + 127) << 23));
  return ieee_mul(ieee_mul(series, bits_to_float(static_cast<uint32_t>(power + 64 + 127) << 23)),
                  bits_to_float(static_cast<uint32_t>(-64 + 127) << 23));
}

// A block's parameters, from its largest and smallest |x|.
struct LogfmtBlock {
  bool cast = false;
  float log_amin = 0.0f;
  float step = 0.0f;
  float step_inv = 0.0f;
  float offset = 0.0f;  // round - log_amin * step_inv
};

SY_HD LogfmtBlock logfmt_block(float amax, float amin, bool finite) {
  LogfmtBlock block;
  const float log_amax = logfmt_log2(amax);
  const float floor_log = ieee_add(log_amax, -kLogfmtMinClip);
  float log_amin = floor_log;
  if (amin != 0.0f) {
    const float log_of_amin = logfmt_log2(amin);
    log_amin = log_of_amin > floor_log ? log_of_amin : floor_log;
  }
  block.cast = finite && log_amax < 0.0f && log_amin < log_amax;
  if (!block.cast) return block;
  block.log_amin = log_amin;
  block.step = ieee_div(ieee_add(log_amax, -log_amin), kLogfmtSteps);
  block.step_inv = ieee_div(1.0f, block.step);
  const float midpoint = ieee_mul(ieee_add(1.0f, logfmt_exp2(block.step)), 0.5f);
  const float round = ieee_fma(-logfmt_log2(midpoint), block.step_inv, 2.0f);
  block.offset = ieee_fma(-log_amin, block.step_inv, round);
  return block;
}

// The block of `count` bf16 values starting at `values`: its parameters.
SY_HD LogfmtBlock logfmt_block_of(const uint16_t* values, int count) {
  float amax = 0.0f;
  float amin = bits_to_float(0x7f800000u);
  bool finite = true;
  for (int i = 0; i < count; ++i) {
    const uint16_t magnitude_bits = static_cast<uint16_t>(values[i] & 0x7fffu);
    if ((magnitude_bits & 0x7f80u) == 0x7f80u) finite = false;  // NaN or infinity
    const float magnitude = bf16_to_float(magnitude_bits);
    if (magnitude > amax) amax = magnitude;
    if (magnitude < amin) amin = magnitude;
  }
  return logfmt_block(amax, amin, finite);
}

// The 9-bit code of |x| in a cast block.
SY_HD uint32_t logfmt_code(float magnitude, const LogfmtBlock& block) {
  if (magnitude == 0.0f) return 0;
  const float scaled = ieee_fma(logfmt_log2(magnitude), block.step_inv, block.offset);
  if (!(scaled > 0.0f)) return 0;
  const float code = floorf(scaled);
  return code >= static_cast<float>(kLogfmtMaxCode) ? kLogfmtMaxCode : static_cast<uint32_t>(code);
}

// The value a code stands for in a cast block, with the sign given.
SY_HD float logfmt_value(uint32_t code, bool negative, const LogfmtBlock& block) {
  const float magnitude =
      code == 0 ? 0.0f : logfmt_exp2(ieee_fma(static_cast<float>(code - 1), block.step, block.log_amin));
  return negative ? -magnitude : magnitude;
}

// What the combine accumulates for one bf16 value of a block: its LogFMT value when the block is
// cast, else the value itself.
SY_HD float logfmt_round_trip(uint16_t bf16_value, const LogfmtBlock& block) {
  if (!block.cast) return bf16_to_float(bf16_value);
  const uint32_t code = logfmt_code(bf16_to_float(static_cast<uint16_t>(bf16_value & 0x7fffu)), block);
  return logfmt_value(code, (bf16_value & 0x8000u) != 0, block);
}

// A row of `hidden` channels (a multiple of kLogfmtBlock) as the combine accumulates it.
SY_HD void logfmt_round_trip_row(const uint16_t* row, int hidden, float* values) {
  for (int begin = 0; begin < hidden; begin += kLogfmtBlock) {
    const LogfmtBlock block = logfmt_block_of(row + begin, kLogfmtBlock);
    for (int i = begin; i < begin + kLogfmtBlock; ++i) values[i] = logfmt_round_trip(row[i], block);
  }
}

}  // namespace switchyard::common
