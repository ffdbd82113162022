#pragma once
// The device side of the fp8 cast (common/fp8_cast.hpp), for every engine's kernels: e4m3 by the
// hardware instruction, bit for bit the shared software cast that the CPU engines and the reference
// use (checked on every float by tests/cuda/device_fp8_cast_check.cu), at one instruction per two
// values instead of the software's ~30 per value.
#include <cuda_runtime.h>

#include <cstdint>

#include "common/numeric.hpp"

namespace switchyard::cuda {

// Two floats to e4m3 by the hardware (satfinite, round to nearest even): `low` in the low byte.
// Bit for bit common::float_to_fp8_e4m3, which keeps a NaN's sign (the instruction's NaN is not
// specified to), so NaNs are set explicitly.
__device__ __forceinline__ uint32_t fp8x2_e4m3(float low, float high) {
  uint16_t packed;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(packed) : "f"(high), "f"(low));
  uint32_t result = packed;
  if (isnan(low)) result = (result & 0xff00u) | ((common::float_to_bits(low) >> 24) & 0x80u) | 0x7fu;
  if (isnan(high))
    result = (result & 0x00ffu) | ((((common::float_to_bits(high) >> 24) & 0x80u) | 0x7fu) << 8);
  return result;
}

// Four floats times `inverse`, to four e4m3 bytes (v[0] in the low byte), as common's cast of each.
__device__ __forceinline__ uint32_t fp8x4_e4m3(const float (&v)[4], float inverse) {
  return fp8x2_e4m3(v[0] * inverse, v[1] * inverse) | (fp8x2_e4m3(v[2] * inverse, v[3] * inverse) << 16);
}

// Eight bf16 values (one int4) times `inverse`, to eight e4m3 bytes, as common::cast_block_to_fp8.
__device__ __forceinline__ uint2 cast_eight_to_fp8(const int4& values, float inverse) {
  auto pair = [inverse](int32_t word) {
    const uint32_t bits = static_cast<uint32_t>(word);
    return fp8x2_e4m3(common::bf16_to_float(static_cast<uint16_t>(bits & 0xffffu)) * inverse,
                      common::bf16_to_float(static_cast<uint16_t>(bits >> 16)) * inverse);
  };
  return make_uint2(pair(values.x) | (pair(values.y) << 16), pair(values.z) | (pair(values.w) << 16));
}

// The largest magnitude of eight bf16 values; NaNs are ignored, as in common::block_amax.
__device__ __forceinline__ float amax_of_eight(const int4& values) {
  float amax = 0.0f;
  const int32_t words[4] = {values.x, values.y, values.z, values.w};
#pragma unroll
  for (int w = 0; w < 4; ++w) {
    const uint32_t bits = static_cast<uint32_t>(words[w]);
    amax = fmaxf(amax, common::bf16_to_float(static_cast<uint16_t>(bits & 0x7fffu)));
    amax = fmaxf(amax, common::bf16_to_float(static_cast<uint16_t>((bits >> 16) & 0x7fffu)));
  }
  return amax;
}

}  // namespace switchyard::cuda
