#pragma once
// Eight bf16 channels in one 16-byte word: the fp32 accumulate and the single rounding that every
// combine reduction of the normal engines uses (DESIGN.md, Combine: fp32 from +0, rounded once).
#include <cstdint>

#include "common/numeric.hpp"

namespace switchyard::cuda {

__device__ __forceinline__ void add_bf16x8(float (&sum)[8], int4 packed) {
  const uint32_t words[4] = {static_cast<uint32_t>(packed.x), static_cast<uint32_t>(packed.y),
                             static_cast<uint32_t>(packed.z), static_cast<uint32_t>(packed.w)};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    sum[2 * i] += common::bf16_to_float(static_cast<uint16_t>(words[i] & 0xffffu));
    sum[2 * i + 1] += common::bf16_to_float(static_cast<uint16_t>(words[i] >> 16));
  }
}

__device__ __forceinline__ int4 round_bf16x8(const float (&sum)[8]) {
  uint32_t words[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    words[i] = static_cast<uint32_t>(common::float_to_bf16(sum[2 * i])) |
               (static_cast<uint32_t>(common::float_to_bf16(sum[2 * i + 1])) << 16);
  }
  return make_int4(static_cast<int>(words[0]), static_cast<int>(words[1]), static_cast<int>(words[2]),
                   static_cast<int>(words[3]));
}

}  // namespace switchyard::cuda
