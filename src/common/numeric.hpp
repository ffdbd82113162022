#pragma once
// Number formats, bit-exact and identical on host and device: bf16 and fp8 e4m3 are handled as raw
// bits so that the CPU and CUDA engines round the same way.
#include <cstring>

#include "common/host_device.hpp"

namespace switchyard::common {

SY_HD float bits_to_float(uint32_t bits) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(bits);
#else
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
#endif
}

SY_HD uint32_t float_to_bits(float value) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(value);
#else
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
#endif
}

SY_HD float bf16_to_float(uint16_t bits) {
  return bits_to_float(static_cast<uint32_t>(bits) << 16);
}

// Round to nearest, ties to even; NaN stays a (quiet) NaN. Matches __float2bfloat16_rn.
SY_HD uint16_t float_to_bf16(float value) {
  uint32_t bits = float_to_bits(value);
  if ((bits & 0x7f800000u) == 0x7f800000u && (bits & 0x007fffffu) != 0) {
    return static_cast<uint16_t>((bits >> 16) | 0x0040u);
  }
  uint32_t rounding_bias = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding_bias) >> 16);
}

// fp8 e4m3 (OCP "fn": no infinities, 0x7f/0xff are NaN, max finite 448).
SY_HD float fp8_e4m3_to_float(uint8_t bits) {
  uint32_t sign = (bits & 0x80u) << 24;
  uint32_t exponent = (bits >> 3) & 0xfu;
  uint32_t mantissa = bits & 0x7u;
  if (exponent == 0xf && mantissa == 0x7) return bits_to_float(sign | 0x7fc00000u);
  if (exponent == 0) {
    // Subnormal: mantissa * 2^-9.
    float magnitude = static_cast<float>(mantissa) * (1.0f / 512.0f);
    return sign ? -magnitude : magnitude;
  }
  return bits_to_float(sign | ((exponent + 120u) << 23) | (mantissa << 20));
}

constexpr float kFp8E4m3Max = 448.0f;

// Saturating (satfinite) round-to-nearest-even cast; NaN maps to NaN. Matches
// __nv_cvt_float_to_fp8(value, __NV_SATFINITE, __NV_E4M3).
SY_HD uint8_t float_to_fp8_e4m3(float value) {
  uint32_t bits = float_to_bits(value);
  uint8_t sign = static_cast<uint8_t>((bits >> 24) & 0x80u);
  uint32_t magnitude_bits = bits & 0x7fffffffu;
  if (magnitude_bits > 0x7f800000u) return static_cast<uint8_t>(sign | 0x7fu);  // NaN
  float magnitude = bits_to_float(magnitude_bits);
  if (magnitude >= kFp8E4m3Max) return static_cast<uint8_t>(sign | 0x7eu);  // saturate (inf too)
  uint32_t exponent = magnitude_bits >> 23;
  if (exponent < 121) {
    // Subnormal range (< 2^-6): quantum 2^-9. Round magnitude * 512 to nearest even integer.
    float scaled = magnitude * 512.0f;  // exact: power-of-two scaling
    uint32_t integer = static_cast<uint32_t>(scaled);
    float remainder = scaled - static_cast<float>(integer);
    if (remainder > 0.5f || (remainder == 0.5f && (integer & 1u))) integer += 1;
    return static_cast<uint8_t>(sign | integer);  // integer == 8 becomes the smallest normal
  }
  // Normal: keep 3 mantissa bits, round to nearest even on the 20 dropped bits.
  uint32_t mantissa = magnitude_bits & 0x7fffffu;
  uint32_t kept = mantissa >> 20;
  uint32_t dropped = mantissa & 0xfffffu;
  uint32_t result = ((exponent - 120u) << 3) | kept;
  if (dropped > 0x80000u || (dropped == 0x80000u && (kept & 1u))) result += 1;
  if (result > 0x7eu) result = 0x7eu;
  return static_cast<uint8_t>(sign | result);
}

}  // namespace switchyard::common
