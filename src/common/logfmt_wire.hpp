#pragma once
// LogFMT-10 on the wire: how the low-latency combine's sender packs a bf16 row of expert outputs into
// its home rank's combine row, and how the receiver reads it back. common/logfmt.hpp decides which
// blocks are cast and into which codes; this file only says where the bytes go, for the CPU engine
// and the CUDA kernels alike.
//
// A row of H channels (a multiple of 128) has B = H / 128 blocks and travels as
//   [cast bits]   bit b (least significant first, in little-endian uint32 words) says block b is
//                 cast; ceil(B / 32) words, the area rounded up to 16 bytes (the padding is neither
//                 written nor read)
//   [block 0][block 1]...[block B-1], each right after the one before it:
//     cast, 168 bytes:  [128 B] the low 8 bits of each value's 10-bit word (sign << 9 | code),
//                               value i at byte i
//                       [ 32 B] the words' high 2 bits, value i at bits 2 (i % 4) of byte i / 4
//                       [  8 B] log_amin and step (f32): all that decoding a code needs
//     not cast, 256 bytes: the block's 128 bf16 values
// so block b starts at the cast bits' area + 256 b - 88 (cast blocks before b), found from the cast
// bits alone; every block starts 8-aligned. A row of cast blocks only is the area + 168 B, e.g.
// 9424 bytes at H = 7168 instead of 14336 as bf16; at worst (no block cast) the area + 2 H.
//
// NOTES: log_amin and step rather than amax and amin (as DeepEP sends): the receiver then never
// redoes the block's log2/exp2 parameters, and its value is logfmt_value of the same floats, so the
// decoded values are bit for bit logfmt_round_trip's. Eight consecutive values of a block are one
// 8-byte piece of the low bytes and one 2-byte piece of the high bits: a lane of a half-warp encodes
// or decodes 8 channels with one access each.
#include "common/host_device.hpp"
#include "common/logfmt.hpp"
#include "common/numeric.hpp"

namespace switchyard::common {

constexpr uint32_t kLogfmtWireLowBytes = kLogfmtBlock;       // one byte per value
constexpr uint32_t kLogfmtWireHighBytes = kLogfmtBlock / 4;  // two bits per value
constexpr uint32_t kLogfmtWireParamsOffset = kLogfmtWireLowBytes + kLogfmtWireHighBytes;  // 160
constexpr uint32_t kLogfmtWireCastBytes = kLogfmtWireParamsOffset + 8;                    // 168
constexpr uint32_t kLogfmtWireRawBytes = kLogfmtBlock * 2;                                // 256
constexpr uint32_t kLogfmtWireSignBit = 1u << 9;

// What decoding a cast block's codes needs (the fields logfmt_value reads).
struct LogfmtWireParams {
  float log_amin;
  float step;
};

SY_HD int logfmt_wire_cast_words(int blocks) {
  return (blocks + 31) / 32;
}
SY_HD uint32_t logfmt_wire_cast_area_bytes(int blocks) {
  return static_cast<uint32_t>(align_up(static_cast<size_t>(logfmt_wire_cast_words(blocks)) * 4, 16));
}
// Where block `block` of a row of `blocks` starts, given how many blocks before it are cast.
SY_HD uint32_t logfmt_wire_block_offset(int blocks, int block, uint32_t cast_before) {
  return logfmt_wire_cast_area_bytes(blocks) + static_cast<uint32_t>(block) * kLogfmtWireRawBytes -
         cast_before * (kLogfmtWireRawBytes - kLogfmtWireCastBytes);
}
// The most bytes a row of `hidden` channels (a multiple of 128) takes: no block cast.
SY_HD uint32_t logfmt_wire_max_row_bytes(int hidden) {
  return logfmt_wire_block_offset(hidden / kLogfmtBlock, hidden / kLogfmtBlock, 0);
}

SY_HD uint32_t popcount32(uint32_t x) {
#if defined(__CUDA_ARCH__)
  return static_cast<uint32_t>(__popc(x));
#else
  return static_cast<uint32_t>(__builtin_popcount(x));
#endif
}

// A value of a cast block as its 10-bit word.
SY_HD uint32_t logfmt_wire_word(uint16_t bf16_value, const LogfmtBlock& block) {
  const uint32_t code = logfmt_code(bf16_to_float(static_cast<uint16_t>(bf16_value & 0x7fffu)), block);
  return ((bf16_value & 0x8000u) != 0 ? kLogfmtWireSignBit : 0u) | code;
}
// The value a 10-bit word stands for: logfmt_round_trip's for the bf16 value it was made from.
SY_HD float logfmt_wire_value(uint32_t word, const LogfmtWireParams& params) {
  LogfmtBlock block;
  block.cast = true;
  block.log_amin = params.log_amin;
  block.step = params.step;
  return logfmt_value(word & kLogfmtMaxCode, (word & kLogfmtWireSignBit) != 0, block);
}

// Values 8g..8g+7 of a cast block: bytes 8g..8g+7 of the low bytes (two little-endian words) and the
// 16-bit piece at byte 2g of the high bits.
struct LogfmtWireEight {
  uint32_t low[2];
  uint32_t high;  // 16 bits
};
SY_HD LogfmtWireEight logfmt_wire_pack_eight(const uint32_t words[8]) {
  LogfmtWireEight eight{{0u, 0u}, 0u};
  for (int k = 0; k < 8; ++k) {
    eight.low[k / 4] |= (words[k] & 0xffu) << (8 * (k % 4));
    eight.high |= (words[k] >> 8) << (2 * k);
  }
  return eight;
}
SY_HD uint32_t logfmt_wire_unpack(const LogfmtWireEight& eight, int k) {
  return ((eight.low[k / 4] >> (8 * (k % 4))) & 0xffu) | (((eight.high >> (2 * k)) & 0x3u) << 8);
}

// ---- whole rows, byte by byte (the CPU engine's sender and receiver, and the tests) ----------------

SY_HD void logfmt_wire_store32(uint8_t* at, uint32_t value) {
  for (int i = 0; i < 4; ++i) at[i] = static_cast<uint8_t>(value >> (8 * i));
}
SY_HD uint32_t logfmt_wire_load32(const uint8_t* at) {
  uint32_t value = 0;
  for (int i = 0; i < 4; ++i) value |= static_cast<uint32_t>(at[i]) << (8 * i);
  return value;
}
SY_HD bool logfmt_wire_is_cast(const uint8_t* wire, int block) {
  return ((wire[block / 8] >> (block % 8)) & 1u) != 0;
}

// Packs `row` (`hidden` channels, a multiple of 128) into `wire`; returns the row's length (where its
// last block ends), logfmt_wire_max_row_bytes(hidden) at most.
SY_HD uint32_t logfmt_wire_encode_row(const uint16_t* row, int hidden, uint8_t* wire) {
  const int blocks = hidden / kLogfmtBlock;
  for (int i = 0; i < 4 * logfmt_wire_cast_words(blocks); ++i) wire[i] = 0;
  uint32_t offset = logfmt_wire_cast_area_bytes(blocks);
  for (int b = 0; b < blocks; ++b) {
    const uint16_t* values = row + b * kLogfmtBlock;
    uint8_t* out = wire + offset;
    const LogfmtBlock block = logfmt_block_of(values, kLogfmtBlock);
    if (!block.cast) {
      for (int i = 0; i < kLogfmtBlock; ++i) {
        out[2 * i] = static_cast<uint8_t>(values[i] & 0xffu);
        out[2 * i + 1] = static_cast<uint8_t>(values[i] >> 8);
      }
      offset += kLogfmtWireRawBytes;
      continue;
    }
    wire[b / 8] = static_cast<uint8_t>(wire[b / 8] | (1u << (b % 8)));
    for (int g = 0; g < kLogfmtBlock / 8; ++g) {
      uint32_t words[8];
      for (int k = 0; k < 8; ++k) words[k] = logfmt_wire_word(values[8 * g + k], block);
      const LogfmtWireEight eight = logfmt_wire_pack_eight(words);
      logfmt_wire_store32(out + 8 * g, eight.low[0]);
      logfmt_wire_store32(out + 8 * g + 4, eight.low[1]);
      out[kLogfmtWireLowBytes + 2 * g] = static_cast<uint8_t>(eight.high & 0xffu);
      out[kLogfmtWireLowBytes + 2 * g + 1] = static_cast<uint8_t>(eight.high >> 8);
    }
    logfmt_wire_store32(out + kLogfmtWireParamsOffset, float_to_bits(block.log_amin));
    logfmt_wire_store32(out + kLogfmtWireParamsOffset + 4, float_to_bits(block.step));
    offset += kLogfmtWireCastBytes;
  }
  return offset;
}

// The row a sender packed, as the combine accumulates it: logfmt_round_trip_row of the bf16 row.
SY_HD void logfmt_wire_decode_row(const uint8_t* wire, int hidden, float* values) {
  const int blocks = hidden / kLogfmtBlock;
  uint32_t offset = logfmt_wire_cast_area_bytes(blocks);
  for (int b = 0; b < blocks; ++b) {
    const uint8_t* in = wire + offset;
    float* out = values + b * kLogfmtBlock;
    if (!logfmt_wire_is_cast(wire, b)) {
      for (int i = 0; i < kLogfmtBlock; ++i) {
        out[i] = bf16_to_float(static_cast<uint16_t>(in[2 * i] | (in[2 * i + 1] << 8)));
      }
      offset += kLogfmtWireRawBytes;
      continue;
    }
    const LogfmtWireParams params{bits_to_float(logfmt_wire_load32(in + kLogfmtWireParamsOffset)),
                                  bits_to_float(logfmt_wire_load32(in + kLogfmtWireParamsOffset + 4))};
    for (int g = 0; g < kLogfmtBlock / 8; ++g) {
      LogfmtWireEight eight;
      eight.low[0] = logfmt_wire_load32(in + 8 * g);
      eight.low[1] = logfmt_wire_load32(in + 8 * g + 4);
      eight.high = static_cast<uint32_t>(in[kLogfmtWireLowBytes + 2 * g]) |
                   (static_cast<uint32_t>(in[kLogfmtWireLowBytes + 2 * g + 1]) << 8);
      for (int k = 0; k < 8; ++k) out[8 * g + k] = logfmt_wire_value(logfmt_wire_unpack(eight, k), params);
    }
    offset += kLogfmtWireCastBytes;
  }
}

}  // namespace switchyard::common
