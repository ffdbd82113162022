// LogFMT-10's wire form (src/common/logfmt_wire.hpp): a packed row decodes to exactly what
// logfmt_round_trip_row gives for the bf16 row, block kinds of every sort mixed (cast, all zeros,
// NaN or infinity, subnormals, zeros in a cast block, |x| >= 1, one magnitude), and a row's length
// is what the header documents.
#include "common/logfmt_wire.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "common/logfmt.hpp"
#include "common/numeric.hpp"

namespace switchyard::common {
namespace {

// One block of 128 bf16 values of kind `kind`.
std::vector<uint16_t> block_of_kind(std::mt19937& random, int kind) {
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  std::bernoulli_distribution negative(0.5);
  auto log_uniform = [&](float low, float high) {
    std::vector<uint16_t> block(kLogfmtBlock);
    for (uint16_t& value : block) {
      const float magnitude = std::exp2(low + (high - low) * unit(random));
      value = float_to_bf16(negative(random) ? -magnitude : magnitude);
    }
    return block;
  };
  switch (kind) {
    case 0: {  // cast: a random range below 1
      const float high = -0.01f - 20.0f * unit(random);
      return log_uniform(high - 0.5f - 40.0f * unit(random), high);
    }
    case 1:  // all zeros, some negative: not cast
      return std::vector<uint16_t>(kLogfmtBlock, negative(random) ? 0x8000u : 0u);
    case 2: {  // a NaN: not cast
      std::vector<uint16_t> block = log_uniform(-10.0f, -1.0f);
      block[random() % kLogfmtBlock] = negative(random) ? 0xffc1u : 0x7fc0u;
      return block;
    }
    case 3: {  // an infinity: not cast
      std::vector<uint16_t> block = log_uniform(-10.0f, -1.0f);
      block[random() % kLogfmtBlock] = negative(random) ? 0xff80u : 0x7f80u;
      return block;
    }
    case 4: {  // subnormal bf16 values among normal ones (amin subnormal, clipped to amax / 2^32)
      std::vector<uint16_t> block = log_uniform(-130.0f, -100.0f);
      for (int i = 0; i < 16; ++i)
        block[random() % kLogfmtBlock] = static_cast<uint16_t>(1 + random() % 0x7f);
      return block;
    }
    case 5: {  // all subnormal
      std::vector<uint16_t> block(kLogfmtBlock);
      for (uint16_t& value : block)
        value = static_cast<uint16_t>((negative(random) ? 0x8000u : 0u) | (1 + random() % 0x7f));
      return block;
    }
    case 6: {  // zeros in a cast block: amin = 0
      std::vector<uint16_t> block = log_uniform(-8.0f, -2.0f);
      block[random() % kLogfmtBlock] = 0;
      block[random() % kLogfmtBlock] = 0x8000u;
      return block;
    }
    case 7:  // log_amax >= 0: not cast
      return log_uniform(-6.0f, 3.0f);
    case 8:  // amax exactly 1: log_amax = 0, not cast
    {
      std::vector<uint16_t> block = log_uniform(-6.0f, -1.0f);
      block[random() % kLogfmtBlock] = float_to_bf16(-1.0f);
      return block;
    }
    case 9:  // one magnitude (amin = amax): not cast
      return std::vector<uint16_t>(kLogfmtBlock, float_to_bf16(-0.375f));
    default: {  // the largest bf16 below 1 beside its neighbour: the narrowest cast range there is
      std::vector<uint16_t> block(kLogfmtBlock, 0x3f7fu);
      block[random() % kLogfmtBlock] = 0x3f7eu;
      return block;
    }
  }
}
constexpr int kKinds = 11;
// Whether block_of_kind's blocks are cast: so the cases above cover what they say.
constexpr bool kKindIsCast[kKinds] = {true, false, false, false, true, true, true, false, false, false, true};

std::vector<uint16_t> random_row(std::mt19937& random, int blocks) {
  std::vector<uint16_t> row;
  for (int b = 0; b < blocks; ++b) {
    const std::vector<uint16_t> block = block_of_kind(random, static_cast<int>(random() % kKinds));
    row.insert(row.end(), block.begin(), block.end());
  }
  return row;
}

// The encoded row, in a buffer of the worst case's size plus a guard that must stay untouched.
std::vector<uint8_t> encode(const std::vector<uint16_t>& row, uint32_t* length) {
  const int hidden = static_cast<int>(row.size());
  std::vector<uint8_t> wire(logfmt_wire_max_row_bytes(hidden) + 64, 0xa5);
  *length = logfmt_wire_encode_row(row.data(), hidden, wire.data());
  for (size_t i = logfmt_wire_max_row_bytes(hidden); i < wire.size(); ++i) EXPECT_EQ(wire[i], 0xa5) << i;
  return wire;
}

TEST(LogfmtWire, EveryKindOfBlockDecodesBitForBitAsTheRoundTrip) {
  std::mt19937 random(23);
  for (int kind = 0; kind < kKinds; ++kind) {
    for (int trial = 0; trial < 50; ++trial) {
      const std::vector<uint16_t> row = block_of_kind(random, kind);
      uint32_t length = 0;
      const std::vector<uint8_t> wire = encode(row, &length);
      std::vector<float> expected(kLogfmtBlock), got(kLogfmtBlock);
      logfmt_round_trip_row(row.data(), kLogfmtBlock, expected.data());
      logfmt_wire_decode_row(wire.data(), kLogfmtBlock, got.data());
      const bool cast = logfmt_block_of(row.data(), kLogfmtBlock).cast;
      ASSERT_EQ(cast, kKindIsCast[kind]) << "kind " << kind;
      ASSERT_EQ(logfmt_wire_is_cast(wire.data(), 0), cast) << "kind " << kind;
      ASSERT_EQ(length, 16u + (cast ? kLogfmtWireCastBytes : kLogfmtWireRawBytes)) << "kind " << kind;
      for (int i = 0; i < kLogfmtBlock; ++i) {
        ASSERT_EQ(float_to_bits(got[i]), float_to_bits(expected[i]))
            << "kind " << kind << " trial " << trial << " value " << i << " bf16 " << row[i];
      }
    }
  }
}

TEST(LogfmtWire, MixedRowsDecodeBitForBitAsTheRoundTrip) {
  std::mt19937 random(29);
  for (int trial = 0; trial < 300; ++trial) {
    // Up to 256 blocks (H = 32768): the cast bits take up to 8 words.
    const int blocks = 1 + static_cast<int>(random() % (trial < 250 ? 70 : 256));
    const std::vector<uint16_t> row = random_row(random, blocks);
    const int hidden = blocks * kLogfmtBlock;
    uint32_t length = 0;
    const std::vector<uint8_t> wire = encode(row, &length);
    std::vector<float> expected(hidden), got(hidden);
    logfmt_round_trip_row(row.data(), hidden, expected.data());
    logfmt_wire_decode_row(wire.data(), hidden, got.data());
    uint32_t cast = 0;
    for (int b = 0; b < blocks; ++b) {
      const bool block_cast = logfmt_block_of(row.data() + b * kLogfmtBlock, kLogfmtBlock).cast;
      ASSERT_EQ(logfmt_wire_is_cast(wire.data(), b), block_cast) << "block " << b;
      cast += block_cast ? 1 : 0;
    }
    ASSERT_EQ(length, logfmt_wire_block_offset(blocks, blocks, cast));
    for (int i = 0; i < hidden; ++i) {
      ASSERT_EQ(float_to_bits(got[i]), float_to_bits(expected[i])) << "trial " << trial << " channel " << i;
    }
  }
}

TEST(LogfmtWire, ACastRowIsTheCastBitsAnd168BytesPerBlock) {
  std::mt19937 random(31);
  const int hidden = 7168;  // DeepSeek-V3: 56 blocks, two words of cast bits in a 16-byte area
  std::vector<uint16_t> row;
  for (int b = 0; b < hidden / kLogfmtBlock; ++b) {
    const std::vector<uint16_t> block = block_of_kind(random, 0);
    row.insert(row.end(), block.begin(), block.end());
  }
  uint32_t length = 0;
  const std::vector<uint8_t> wire = encode(row, &length);
  EXPECT_EQ(length, 16u + 56u * 168u);  // 9424 bytes, against 14336 as bf16
  EXPECT_EQ(logfmt_wire_load32(wire.data()), 0xffffffffu);
  EXPECT_EQ(logfmt_wire_load32(wire.data() + 4), 0x00ffffffu);
  EXPECT_EQ(logfmt_wire_max_row_bytes(hidden), 16u + 2u * hidden);
  EXPECT_EQ(logfmt_wire_max_row_bytes(32768), 32u + 2u * 32768);  // 256 blocks: two 16-byte lines of bits
  EXPECT_EQ(logfmt_wire_max_row_bytes(128), 16u + 256u);
}

// The 10 bits of eight values, packed and unpacked, by the pieces a CUDA lane moves.
TEST(LogfmtWire, EightWordsPackIntoEightLowBytesAndSixteenHighBits) {
  std::mt19937 random(37);
  for (int trial = 0; trial < 1000; ++trial) {
    uint32_t words[8];
    for (uint32_t& word : words) word = random() & 0x3ffu;
    const LogfmtWireEight eight = logfmt_wire_pack_eight(words);
    ASSERT_LT(eight.high, 1u << 16);
    for (int k = 0; k < 8; ++k) ASSERT_EQ(logfmt_wire_unpack(eight, k), words[k]) << k;
  }
}

}  // namespace
}  // namespace switchyard::common
