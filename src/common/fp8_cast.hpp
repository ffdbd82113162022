#pragma once
// The low-latency engine's FP8 cast, per token and per 128 channels, shared by the CPU engine, the
// CUDA kernels and the reference so that all three agree bit for bit:
//   amax  = max |x| over the block (bf16 values as float; NaN is ignored, as fmaxf ignores it)
//   scale = max(amax, 1e-4) / 448, optionally rounded UP to a power of two (by bit manipulation,
//           never log2/exp2, so host and device agree)
//   value = float_to_fp8_e4m3(x * (1 / scale))   (satfinite, round to nearest even)
// UE8M0 stores only the biased exponent byte of a power-of-two scale, four per int32 (little-endian).
#include "common/host_device.hpp"
#include "common/numeric.hpp"

namespace switchyard::common {

// Channels that share one scale.
constexpr int kFp8CastBlock = 128;
// UE8M0 exponent bytes packed into one int32.
constexpr int kUe8m0PerWord = 4;
// NOTES: DeepEP's floor on amax, so an all-zero block gets a finite, non-zero scale.
constexpr float kFp8AmaxFloor = 1e-4f;

// The smallest power of two >= scale, for positive finite scales: a non-zero mantissa bumps the
// exponent and is cleared.
SY_HD float round_scale_up_to_power_of_two(float scale) {
  uint32_t bits = float_to_bits(scale);
  if ((bits & 0x007fffffu) != 0) bits = (bits + 0x00800000u) & 0xff800000u;
  return bits_to_float(bits);
}

SY_HD float fp8_block_scale(float amax, bool round_scale) {
  float scale = (amax > kFp8AmaxFloor ? amax : kFp8AmaxFloor) / kFp8E4m3Max;
  return round_scale ? round_scale_up_to_power_of_two(scale) : scale;
}

// The UE8M0 byte of a power-of-two scale: its biased exponent.
SY_HD uint8_t ue8m0_exponent(float scale) {
  return static_cast<uint8_t>(float_to_bits(scale) >> 23);
}

SY_HD float block_amax(const uint16_t* bf16_values, int count) {
  float amax = 0.0f;
  for (int i = 0; i < count; ++i) {
    float magnitude = bf16_to_float(static_cast<uint16_t>(bf16_values[i] & 0x7fffu));
    if (magnitude > amax) amax = magnitude;
  }
  return amax;
}

// Casts `count` bf16 values (one block) to e4m3 with the given scale.
SY_HD void cast_block_to_fp8(const uint16_t* bf16_values, int count, float scale, uint8_t* fp8_values) {
  const float inverse = 1.0f / scale;
  for (int i = 0; i < count; ++i) fp8_values[i] = float_to_fp8_e4m3(bf16_to_float(bf16_values[i]) * inverse);
}

// Casts one row of `hidden` channels (a multiple of 128): hidden / 128 scales.
SY_HD void cast_row_to_fp8(const uint16_t* row, int hidden, bool round_scale, uint8_t* fp8_row,
                           float* scales) {
  for (int block = 0; block < hidden / kFp8CastBlock; ++block) {
    const uint16_t* values = row + block * kFp8CastBlock;
    const float scale = fp8_block_scale(block_amax(values, kFp8CastBlock), round_scale);
    cast_block_to_fp8(values, kFp8CastBlock, scale, fp8_row + block * kFp8CastBlock);
    scales[block] = scale;
  }
}

// Words of packed UE8M0 scales for `num_scales` scales (the last word zero-padded).
SY_HD int ue8m0_words(int num_scales) {
  return (num_scales + kUe8m0PerWord - 1) / kUe8m0PerWord;
}

// Packs power-of-two scales as UE8M0, byte i of word w holding scale 4w + i; bytes past
// `num_scales` are 0.
SY_HD void pack_ue8m0(const float* scales, int num_scales, int32_t* words) {
  for (int word = 0; word < ue8m0_words(num_scales); ++word) {
    uint32_t packed = 0;
    for (int byte = 0; byte < kUe8m0PerWord; ++byte) {
      int index = word * kUe8m0PerWord + byte;
      if (index < num_scales) packed |= static_cast<uint32_t>(ue8m0_exponent(scales[index])) << (8 * byte);
    }
    words[word] = static_cast<int32_t>(packed);
  }
}

}  // namespace switchyard::common
