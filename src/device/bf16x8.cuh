#pragma once
// Eight bf16 channels in one 16-byte word: the fp32 accumulate and the single rounding that every
// combine reduction of the normal engines uses (DESIGN.md, Combine: fp32 from +0, or from the biases, rounded
// once).
#include <cstdint>

#include "common/combine_bias.hpp"
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

// Eight bf16 channels as fp32 (the MoE layer's SwiGLU reads h this way).
__device__ __forceinline__ void unpack_bf16x8(float (&out)[8], int4 packed) {
  const uint32_t words[4] = {static_cast<uint32_t>(packed.x), static_cast<uint32_t>(packed.y),
                             static_cast<uint32_t>(packed.z), static_cast<uint32_t>(packed.w)};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    out[2 * i] = common::bf16_to_float(static_cast<uint16_t>(words[i] & 0xffffu));
    out[2 * i + 1] = common::bf16_to_float(static_cast<uint16_t>(words[i] >> 16));
  }
}

// The fp32 start of eight channels of a combine sum: bias0 + bias1 at 16-byte chunk `chunk` of the
// token's [H] bias rows, +0.0 for an absent (null) one (common/combine_bias.hpp).
__device__ __forceinline__ void start_bf16x8(float (&sum)[8], const uint16_t* bias0_row,
                                             const uint16_t* bias1_row, uint32_t chunk) {
  const int4 zero = make_int4(0, 0, 0, 0);
  const int4 first = bias0_row ? __ldg(reinterpret_cast<const int4*>(bias0_row) + chunk) : zero;
  const int4 second = bias1_row ? __ldg(reinterpret_cast<const int4*>(bias1_row) + chunk) : zero;
  // The channels are taken from the loaded words by shifts: indexing them through the words' address
  // puts both 16-byte words in local memory (two local stores per 8 channels, biases or not; the
  // low_latency combine's receive kernel spilled for it, bench/NOTES.md, session 12).
  const uint32_t first_words[4] = {static_cast<uint32_t>(first.x), static_cast<uint32_t>(first.y),
                                   static_cast<uint32_t>(first.z), static_cast<uint32_t>(first.w)};
  const uint32_t second_words[4] = {static_cast<uint32_t>(second.x), static_cast<uint32_t>(second.y),
                                    static_cast<uint32_t>(second.z), static_cast<uint32_t>(second.w)};
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const uint16_t first_value = static_cast<uint16_t>(first_words[i / 2] >> (16 * (i % 2)));
    const uint16_t second_value = static_cast<uint16_t>(second_words[i / 2] >> (16 * (i % 2)));
    sum[i] =
        common::combine_bias_start(bias0_row != nullptr, first_value, bias1_row != nullptr, second_value);
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
