// The low-latency FP8 cast shared by host and device (src/common/fp8_cast.hpp), against values
// computed by hand.
#include "common/fp8_cast.hpp"

#include <gtest/gtest.h>

#include <vector>

namespace switchyard::common {
namespace {

std::vector<uint16_t> bf16_block(float fill) {
  return std::vector<uint16_t>(kFp8CastBlock, float_to_bf16(fill));
}

TEST(Fp8Cast, ScaleIsAmaxOver448WithAFloor) {
  EXPECT_EQ(fp8_block_scale(448.0f, false), 1.0f);
  EXPECT_EQ(fp8_block_scale(896.0f, false), 2.0f);
  EXPECT_EQ(fp8_block_scale(3.0f, false), 3.0f / 448.0f);
  // An all-zero block gets the floor, not a zero scale.
  EXPECT_EQ(fp8_block_scale(0.0f, false), 1e-4f / 448.0f);
}

TEST(Fp8Cast, RoundScaleRoundsUpToAPowerOfTwo) {
  EXPECT_EQ(round_scale_up_to_power_of_two(1.0f), 1.0f);  // already a power of two
  EXPECT_EQ(round_scale_up_to_power_of_two(0.25f), 0.25f);
  EXPECT_EQ(round_scale_up_to_power_of_two(1.5f), 2.0f);
  EXPECT_EQ(round_scale_up_to_power_of_two(0.3f), 0.5f);
  EXPECT_EQ(round_scale_up_to_power_of_two(bits_to_float(0x3f800001u)), 2.0f);  // just above 1
  // 300 / 448 = 0.67 -> 1; 1e-4 / 448 = 2.2e-7 -> 2^-22.
  EXPECT_EQ(fp8_block_scale(300.0f, true), 1.0f);
  EXPECT_EQ(fp8_block_scale(0.0f, true), bits_to_float(0x34800000u));
}

TEST(Fp8Cast, PowerOfTwoScaleCastsExactly) {
  // amax 896 -> scale 2 exactly; x / 2 is then exact in e4m3 for these values.
  std::vector<uint16_t> block = bf16_block(1.0f);
  block[0] = float_to_bf16(896.0f);
  block[1] = float_to_bf16(-3.0f);
  block[2] = float_to_bf16(0.0f);
  std::vector<uint8_t> fp8(kFp8CastBlock);
  float scale = 0;
  cast_row_to_fp8(block.data(), kFp8CastBlock, false, fp8.data(), &scale);
  EXPECT_EQ(scale, 2.0f);
  EXPECT_EQ(fp8[0], 0x7e);  // 448, the largest finite e4m3
  EXPECT_EQ(fp8[1], 0xbc);  // -1.5
  EXPECT_EQ(fp8[2], 0x00);
  EXPECT_EQ(fp8[3], 0x30);  // 0.5
}

TEST(Fp8Cast, ValuesBeyondTheScaleSaturate) {
  const std::vector<uint16_t> block = {float_to_bf16(1000.0f), float_to_bf16(-1000.0f), float_to_bf16(448.0f),
                                       float_to_bf16(-0.0f)};
  std::vector<uint8_t> fp8(block.size());
  cast_block_to_fp8(block.data(), static_cast<int>(block.size()), 1.0f, fp8.data());
  EXPECT_EQ(fp8[0], 0x7e);
  EXPECT_EQ(fp8[1], 0xfe);
  EXPECT_EQ(fp8[2], 0x7e);
  EXPECT_EQ(fp8[3], 0x80);
}

TEST(Fp8Cast, RoundedScaleOfABlock) {
  // amax 3 -> 3/448 = 0.0067 -> 2^-7; 3 * 128 = 384 is exact in e4m3 (0x7c).
  std::vector<uint16_t> row = bf16_block(0.0f);
  row[5] = float_to_bf16(-3.0f);
  std::vector<uint8_t> fp8(kFp8CastBlock);
  float scale = 0;
  cast_row_to_fp8(row.data(), kFp8CastBlock, true, fp8.data(), &scale);
  EXPECT_EQ(scale, 1.0f / 128.0f);
  EXPECT_EQ(fp8[5], 0xfc);
  EXPECT_EQ(ue8m0_exponent(scale), 127 - 7);
}

TEST(Fp8Cast, Ue8m0PacksFourExponentsPerWordLittleEndian) {
  const float scales[5] = {1.0f, 2.0f, 0.5f, 1.0f / 1024.0f, 4.0f};
  int32_t words[2] = {-1, -1};
  ASSERT_EQ(ue8m0_words(5), 2);
  ASSERT_EQ(ue8m0_words(4), 1);
  pack_ue8m0(scales, 5, words);
  EXPECT_EQ(static_cast<uint32_t>(words[0]), 0x757e807fu);
  EXPECT_EQ(static_cast<uint32_t>(words[1]), 0x00000081u);  // zero-padded
}

}  // namespace
}  // namespace switchyard::common
