// LogFMT-10 (src/common/logfmt.hpp): its log2 and exp2 against the host's libm, and the format's rules
// on blocks a test builds: which blocks are cast, the codes' range and order, the error of a round trip
// within one step, signs and zeros, and values that are never cast (NaN, infinity, |x| >= 1).
#include "common/logfmt.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "common/numeric.hpp"

namespace switchyard::common {
namespace {

uint16_t bf16(float value) {
  return float_to_bf16(value);
}

TEST(LogfmtMath, Log2IsWithinAFewUlpOfLibmFromSubnormalsToLargeValues) {
  std::mt19937 random(7);
  std::uniform_int_distribution<uint32_t> bits(1, 0x7f7fffffu);  // every positive finite float
  for (int i = 0; i < 200000; ++i) {
    const float x = bits_to_float(bits(random));
    const double exact = std::log2(static_cast<double>(x));
    const double got = logfmt_log2(x);
    // Absolute error near log2 = 0, relative elsewhere.
    ASSERT_LE(std::abs(got - exact), 4e-7 * std::max(1.0, std::abs(exact))) << "x = " << x;
  }
}

TEST(LogfmtMath, Log2IsExactOnPowersOfTwoAndHandlesTheEnds) {
  for (int k = -149; k <= 127; ++k) {
    EXPECT_EQ(logfmt_log2(std::ldexp(1.0f, k)), static_cast<float>(k)) << "2^" << k;
  }
  EXPECT_EQ(logfmt_log2(0.0f), -INFINITY);
  EXPECT_EQ(logfmt_log2(INFINITY), INFINITY);
  EXPECT_TRUE(std::isnan(logfmt_log2(-1.0f)));
  EXPECT_TRUE(std::isnan(logfmt_log2(NAN)));
}

TEST(LogfmtMath, Exp2IsWithinAFewUlpOfLibmAndExactOnIntegers) {
  std::mt19937 random(11);
  std::uniform_real_distribution<float> exponent(-149.0f, 127.9f);
  for (int i = 0; i < 200000; ++i) {
    const float y = exponent(random);
    const double exact = std::exp2(static_cast<double>(y));
    const double got = logfmt_exp2(y);
    // Subnormal results carry fewer bits: compare those against their own spacing.
    const double tolerance = std::max(4e-7 * exact, std::ldexp(1.0, -149));
    ASSERT_LE(std::abs(got - exact), tolerance) << "y = " << y;
  }
  for (int k = -149; k <= 127; ++k) EXPECT_EQ(logfmt_exp2(static_cast<float>(k)), std::ldexp(1.0f, k)) << k;
  EXPECT_EQ(logfmt_exp2(-200.0f), 0.0f);
  EXPECT_EQ(logfmt_exp2(128.0f), INFINITY);
  EXPECT_TRUE(std::isnan(logfmt_exp2(NAN)));
}

// A block of 128 values drawn uniformly in log space from [2^low, 2^high), signs random.
std::vector<uint16_t> log_uniform_block(std::mt19937& random, float low, float high) {
  std::uniform_real_distribution<float> exponent(low, high);
  std::bernoulli_distribution negative(0.5);
  std::vector<uint16_t> block(kLogfmtBlock);
  for (uint16_t& value : block) value = bf16((negative(random) ? -1.0f : 1.0f) * std::exp2(exponent(random)));
  return block;
}

TEST(LogfmtBlock, BlocksBelowOneAreCastAndEachValueComesBackWithinOneStep) {
  std::mt19937 random(3);
  for (int trial = 0; trial < 2000; ++trial) {
    const float high = -0.01f - 20.0f * std::uniform_real_distribution<float>(0, 1)(random);
    const float width = 0.5f + 40.0f * std::uniform_real_distribution<float>(0, 1)(random);
    const std::vector<uint16_t> block = log_uniform_block(random, high - width, high);
    const LogfmtBlock params = logfmt_block_of(block.data(), kLogfmtBlock);
    ASSERT_TRUE(params.cast) << "trial " << trial;
    ASSERT_GT(params.step, 0.0f);
    for (uint16_t value : block) {
      const float x = bf16_to_float(value);
      const float magnitude = std::abs(x);
      const float back = logfmt_round_trip(value, params);
      ASSERT_EQ(std::signbit(back), std::signbit(x));
      if (magnitude < std::exp2(params.log_amin)) {
        // Under the clipped range: zero or the smallest code.
        ASSERT_LE(std::abs(back), std::exp2(params.log_amin + params.step) * 1.0001f) << x;
        continue;
      }
      // One code spans a factor 2^step; rounding in the linear domain stays within it.
      const float ratio = std::abs(back) / magnitude;
      ASSERT_LE(ratio, std::exp2(params.step) * 1.0001f) << "x " << x << " back " << back;
      ASSERT_GE(ratio, std::exp2(-params.step) / 1.0001f) << "x " << x << " back " << back;
    }
  }
}

TEST(LogfmtBlock, CodesStayInNineBitsAndGrowWithTheMagnitude) {
  std::mt19937 random(5);
  const std::vector<uint16_t> block = log_uniform_block(random, -30.0f, -0.5f);
  const LogfmtBlock params = logfmt_block_of(block.data(), kLogfmtBlock);
  ASSERT_TRUE(params.cast);
  uint32_t previous = 0;
  uint32_t largest = 0;
  for (float magnitude = std::exp2(-40.0f); magnitude < 1.0f; magnitude *= 1.01f) {
    const uint32_t code = logfmt_code(magnitude, params);
    ASSERT_LE(code, kLogfmtMaxCode);
    ASSERT_GE(code, previous) << magnitude;
    previous = code;
    largest = std::max(largest, code);
  }
  EXPECT_EQ(largest, kLogfmtMaxCode);  // the block's amax reaches the top code
  EXPECT_EQ(logfmt_code(0.0f, params), 0u);
  EXPECT_EQ(logfmt_value(0, false, params), 0.0f);
  EXPECT_TRUE(std::signbit(logfmt_value(0, true, params)));
}

TEST(LogfmtBlock, BlocksThatAreNotCastKeepTheirBf16Values) {
  std::mt19937 random(9);
  std::vector<std::vector<uint16_t>> blocks;
  blocks.push_back(log_uniform_block(random, -10.0f, 2.0f));            // amax >= 1
  blocks.push_back(std::vector<uint16_t>(kLogfmtBlock, 0));             // all zeros
  blocks.push_back(std::vector<uint16_t>(kLogfmtBlock, bf16(-0.25f)));  // amin == amax
  std::vector<uint16_t> with_nan = log_uniform_block(random, -10.0f, -1.0f);
  with_nan[17] = 0x7fc0u;
  blocks.push_back(with_nan);
  std::vector<uint16_t> with_infinity = log_uniform_block(random, -10.0f, -1.0f);
  with_infinity[90] = 0xff80u;
  blocks.push_back(with_infinity);
  for (size_t b = 0; b < blocks.size(); ++b) {
    const LogfmtBlock params = logfmt_block_of(blocks[b].data(), kLogfmtBlock);
    EXPECT_FALSE(params.cast) << "block " << b;
    std::vector<float> values(kLogfmtBlock);
    logfmt_round_trip_row(blocks[b].data(), kLogfmtBlock, values.data());
    for (int i = 0; i < kLogfmtBlock; ++i) {
      const float expected = bf16_to_float(blocks[b][i]);
      if (std::isnan(expected)) {
        EXPECT_TRUE(std::isnan(values[i]));
      } else {
        EXPECT_EQ(float_to_bits(values[i]), float_to_bits(expected)) << "block " << b << " value " << i;
      }
    }
  }
}

TEST(LogfmtBlock, ZerosInACastBlockClipTheRangeTo32BinadesBelowAmax) {
  std::mt19937 random(13);
  std::vector<uint16_t> block = log_uniform_block(random, -8.0f, -2.0f);
  block[0] = 0;
  block[1] = 0x8000u;  // -0
  const LogfmtBlock params = logfmt_block_of(block.data(), kLogfmtBlock);
  ASSERT_TRUE(params.cast);
  float amax = 0;
  for (uint16_t value : block) amax = std::max(amax, std::abs(bf16_to_float(value)));
  EXPECT_FLOAT_EQ(params.log_amin, logfmt_log2(amax) - kLogfmtMinClip);
  EXPECT_EQ(logfmt_round_trip(block[0], params), 0.0f);
  EXPECT_TRUE(std::signbit(logfmt_round_trip(block[1], params)));
}

// Each block of a row is decided on its own.
TEST(LogfmtBlock, ARowIsCastBlockByBlock) {
  std::mt19937 random(17);
  std::vector<uint16_t> row = log_uniform_block(random, -12.0f, -1.0f);
  const std::vector<uint16_t> large = log_uniform_block(random, -3.0f, 3.0f);
  row.insert(row.end(), large.begin(), large.end());
  std::vector<float> values(row.size());
  logfmt_round_trip_row(row.data(), static_cast<int>(row.size()), values.data());
  const LogfmtBlock first = logfmt_block_of(row.data(), kLogfmtBlock);
  ASSERT_TRUE(first.cast);
  for (int i = 0; i < kLogfmtBlock; ++i) {
    EXPECT_EQ(float_to_bits(values[i]), float_to_bits(logfmt_round_trip(row[i], first)));
  }
  for (int i = kLogfmtBlock; i < 2 * kLogfmtBlock; ++i) {
    EXPECT_EQ(float_to_bits(values[i]), float_to_bits(bf16_to_float(row[i])));
  }
}

}  // namespace
}  // namespace switchyard::common
