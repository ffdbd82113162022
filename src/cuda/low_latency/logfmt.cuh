#pragma once
// LogFMT-10 in the CUDA low-latency combine (use_logfmt): a sending warp packs an expert output row
// into the wire form of common/logfmt_wire.hpp, and a receiving lane reads its 8 channels of a packed
// row back as common::logfmt_round_trip would give them. Lanes work in half-warps, one 128-channel
// block each, 8 channels a lane: the block's 16 lanes agree on its parameters through shuffles, and
// each lane's 8 values are one 8-byte piece of low bytes and one 2-byte piece of high bits.
#include <cuda_runtime.h>

#include "common/logfmt.hpp"
#include "common/logfmt_wire.hpp"
#include "common/numeric.hpp"
#include "cuda/low_latency/device.cuh"
#include "device/ptx.cuh"
#include "device/warp_copy.cuh"
#include "device/warp_group.cuh"

namespace switchyard::cuda::low_latency {

// The parameters of the 128-channel block that eight channels `packed` belong to, the block's 16
// chunks of 8 channels being the items of the 16 lanes of this half-warp, all active together: the
// same amax, amin and finiteness, hence the same block, as common::logfmt_block_of on the whole block.
__device__ __forceinline__ common::LogfmtBlock half_warp_logfmt_block(const int4& packed) {
  const uint32_t words[4] = {static_cast<uint32_t>(packed.x), static_cast<uint32_t>(packed.y),
                             static_cast<uint32_t>(packed.z), static_cast<uint32_t>(packed.w)};
  float amax = 0.0f;
  float amin = common::bits_to_float(0x7f800000u);
  bool finite = true;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const uint16_t magnitude_bits = static_cast<uint16_t>((words[i / 2] >> (16 * (i % 2))) & 0x7fffu);
    if ((magnitude_bits & 0x7f80u) == 0x7f80u) finite = false;  // NaN or infinity
    const float magnitude = common::bf16_to_float(magnitude_bits);
    if (magnitude > amax) amax = magnitude;
    if (magnitude < amin) amin = magnitude;
  }
  const unsigned half = (threadIdx.x & 16u) ? 0xffff0000u : 0x0000ffffu;
#pragma unroll
  for (int offset = 8; offset > 0; offset >>= 1) {
    const float other_max = __shfl_xor_sync(half, amax, offset, 16);
    const float other_min = __shfl_xor_sync(half, amin, offset, 16);
    if (other_max > amax) amax = other_max;
    if (other_min < amin) amin = other_min;
  }
  finite = __all_sync(half, finite);
  return common::logfmt_block(amax, amin, finite);
}

// One lane's 8 channels of a cast block, at `out` (the block's start), `chunk` the lane's place in the
// block (0..15); the lane of chunk 0 also stores the block's parameters.
__device__ __forceinline__ void store_cast_chunk(uint8_t* out, int chunk, const int4& values,
                                                 const common::LogfmtBlock& block) {
  const uint32_t halves[4] = {static_cast<uint32_t>(values.x), static_cast<uint32_t>(values.y),
                              static_cast<uint32_t>(values.z), static_cast<uint32_t>(values.w)};
  uint32_t words[8];
#pragma unroll
  for (int k = 0; k < 8; ++k) {
    words[k] = common::logfmt_wire_word(static_cast<uint16_t>(halves[k / 2] >> (16 * (k % 2))), block);
  }
  const common::LogfmtWireEight eight = common::logfmt_wire_pack_eight(words);
  *reinterpret_cast<uint2*>(out + 8 * chunk) = make_uint2(eight.low[0], eight.low[1]);
  *reinterpret_cast<uint16_t*>(out + common::kLogfmtWireLowBytes + 2 * chunk) =
      static_cast<uint16_t>(eight.high);
  if (chunk == 0) {
    *reinterpret_cast<float2*>(out + common::kLogfmtWireParamsOffset) =
        make_float2(block.log_amin, block.step);
  }
}

// One warp packs `row` (bf16, `hidden` channels, a multiple of 128) into `target` in the wire form,
// two blocks at a time, in order: where a block starts follows from the cast bits of those before it,
// which every lane learns from one ballot per pair. Only the packed bytes are stored. Returns the
// row's length (every lane).
__device__ __forceinline__ uint32_t pack_logfmt_row(uint8_t* target, const uint16_t* row, int hidden) {
  const int lane = lane_id();
  const int chunk = lane & 15;
  const int blocks = hidden / common::kLogfmtBlock;
  const int4* in = reinterpret_cast<const int4*>(row);
  uint32_t offset = common::logfmt_wire_cast_area_bytes(blocks);
  uint32_t cast_word = 0;  // lane w keeps word w of the cast bits
  for (int first = 0; first < blocks; first += 2) {
    const int block = first + (lane >> 4);
    const bool present = block < blocks;  // the last pair may have one block only
    int4 values = make_int4(0, 0, 0, 0);
    common::LogfmtBlock params;
    if (present) {
      values = copy_load_v4<CopyLoad::read_only>(in + block * 16 + chunk);
      params = half_warp_logfmt_block(values);
    }
    const uint32_t cast = __ballot_sync(kFullWarp, present && params.cast);
    const uint32_t first_bytes = (cast & 1u) ? common::kLogfmtWireCastBytes : common::kLogfmtWireRawBytes;
    const uint32_t second_bytes = first + 1 >= blocks ? 0u
                                  : (cast >> 16) & 1u ? common::kLogfmtWireCastBytes
                                                      : common::kLogfmtWireRawBytes;
    if (present) {
      uint8_t* out = target + offset + (lane >> 4 ? first_bytes : 0u);
      if (params.cast) {
        store_cast_chunk(out, chunk, values, params);
      } else {
        uint2* raw = reinterpret_cast<uint2*>(out + 16 * chunk);  // blocks start 8-aligned
        raw[0] = make_uint2(static_cast<uint32_t>(values.x), static_cast<uint32_t>(values.y));
        raw[1] = make_uint2(static_cast<uint32_t>(values.z), static_cast<uint32_t>(values.w));
      }
    }
    if (lane == first / 32) cast_word |= ((cast & 1u) | (((cast >> 16) & 1u) << 1)) << (first % 32);
    offset += first_bytes + second_bytes;
  }
  if (lane < common::logfmt_wire_cast_words(blocks)) reinterpret_cast<uint32_t*>(target)[lane] = cast_word;
  return offset;
}

// Where block `block` of a packed row of `blocks` starts, with bit 0 set when the block is cast (a
// block starts 8-aligned): from the cast bits of the blocks before it.
__device__ __forceinline__ uint32_t logfmt_block_place(const uint8_t* row, int blocks, int block) {
  const uint32_t* words = reinterpret_cast<const uint32_t*>(row);
  uint32_t before = 0;
  for (int w = 0; w < block / 32; ++w) before += __popc(ptx::ld_weak_no_allocate_u32(words + w));
  const uint32_t own = ptx::ld_weak_no_allocate_u32(words + block / 32);
  const uint32_t bit = static_cast<uint32_t>(block % 32);
  before += __popc(own & ((1u << bit) - 1u));
  return common::logfmt_wire_block_offset(blocks, block, before) | ((own >> bit) & 1u);
}

// One lane's 8 channels of a packed block as loaded: the low bytes and high bits with the block's
// parameters when it is cast, else the 8 bf16 values.
struct LogfmtChunk {
  uint2 first;    // cast: the low bytes; raw: values 0..3
  uint2 second;   // cast: log_amin and step (f32 bits); raw: values 4..7
  uint32_t high;  // cast: the high bits
};

// The chunk `chunk` (0..15) of the block at `place` (logfmt_block_place) of `row`: 18 bytes when the
// block is cast (the parameters' 8 shared by the block's lanes), 16 when not.
__device__ __forceinline__ LogfmtChunk load_logfmt_chunk(const uint8_t* row, uint32_t place, int chunk) {
  const uint8_t* block = row + (place & ~1u);
  LogfmtChunk loaded;
  if (place & 1u) {
    loaded.first = ptx::ld_weak_no_allocate_v2(block + 8 * chunk);
    loaded.second = ptx::ld_weak_no_allocate_v2(block + common::kLogfmtWireParamsOffset);
    loaded.high = ptx::ld_weak_no_allocate_u16(block + common::kLogfmtWireLowBytes + 2 * chunk);
  } else {
    loaded.first = ptx::ld_weak_no_allocate_v2(block + 16 * chunk);
    loaded.second = ptx::ld_weak_no_allocate_v2(block + 16 * chunk + 8);
    loaded.high = 0;
  }
  return loaded;
}

// The 8 values a chunk stands for: logfmt_round_trip of the bf16 values the sender packed.
__device__ __forceinline__ void decode_logfmt_chunk(const LogfmtChunk& loaded, bool cast, float values[8]) {
  if (cast) {
    const common::LogfmtWireEight eight{{loaded.first.x, loaded.first.y}, loaded.high};
    const common::LogfmtWireParams params{common::bits_to_float(loaded.second.x),
                                          common::bits_to_float(loaded.second.y)};
#pragma unroll
    for (int k = 0; k < 8; ++k)
      values[k] = common::logfmt_wire_value(common::logfmt_wire_unpack(eight, k), params);
    return;
  }
  const uint32_t words[4] = {loaded.first.x, loaded.first.y, loaded.second.x, loaded.second.y};
#pragma unroll
  for (int k = 0; k < 8; ++k)
    values[k] = common::bf16_to_float(static_cast<uint16_t>(words[k / 2] >> (16 * (k % 2))));
}

}  // namespace switchyard::cuda::low_latency
