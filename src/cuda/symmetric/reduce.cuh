#pragma once
// The reduction of the `symmetric` combine, shared by its two paths (DESIGN.md, expert-major
// combine): every warp of the grid takes items of this rank's tokens (a token and a run of its
// 256-channel chunks) and sums the token's valid slots' rows, weighted, in increasing slot order with fmaf
// from +0 (or from the caller's biases: common/combine_bias.hpp), rounding to bf16 once: the CPU engine's
// arithmetic, bit for bit. The paths differ only in where a slot's row is: push reads this rank's combine
// buffer, pull the expert's rank's y (SlotsOf, below).
#include "common/numeric.hpp"
#include "cuda/symmetric/kernels.hpp"
#include "device/bf16x8.cuh"
#include "device/ptx.cuh"
#include "device/warp_group.cuh"

namespace switchyard::cuda {

// NOTES: a lane reduces 8 channels (one 16-byte load per slot), a warp 256 (a chunk); slots are loaded
// 8 at a time, for two chunks at once, so that 16 loads per lane are in flight (with one chunk and a slot
// lookup per chunk, the pull combine issued ~700 instructions per chunk and kept DRAM at 58 % busy).
constexpr int kChannelsPerLane = 8;
constexpr int kChannelsPerChunk = 32 * kChannelsPerLane;
constexpr int kSlotBatch = 8;
constexpr int kChunksPerStep = 2;

// A token's slots, as lane j holds slot j's (k <= 32): whether it is reduced, its weight, and where
// its row starts (channel 0).
struct TokenSlots {
  bool valid;
  float weight;
  const uint8_t* row;
};

__device__ __forceinline__ void fma_row(float (&accumulator)[kChannelsPerLane], float weight,
                                        const int4& packed) {
  const uint16_t* values = reinterpret_cast<const uint16_t*>(&packed);
#pragma unroll
  for (int i = 0; i < kChannelsPerLane; ++i)
    accumulator[i] = fmaf(weight, common::bf16_to_float(values[i]), accumulator[i]);
}

// Up to kSlotBatch of a token's valid slots, lowest first, taken out of `remaining`: every lane gets
// each one's weight and row (warp-uniform). The first `count` entries are the batch (slots are taken
// in order, so the batch is a prefix).
struct SlotBatch {
  int count;
  float weight[kSlotBatch];
  const uint8_t* row[kSlotBatch];

  __device__ __forceinline__ void take(uint32_t& remaining, const TokenSlots& slots) {
    count = 0;
#pragma unroll
    for (int u = 0; u < kSlotBatch; ++u) {
      const int slot = remaining != 0 ? __ffs(remaining) - 1 : 0;
      count += remaining != 0 ? 1 : 0;
      if (remaining != 0) remaining &= remaining - 1;
      weight[u] = __shfl_sync(0xffffffffu, slots.weight, slot);
      row[u] = reinterpret_cast<const uint8_t*>(
          __shfl_sync(0xffffffffu, reinterpret_cast<unsigned long long>(slots.row), slot));
    }
  }
};

// The batch's rows at `channel` of kChunksPerStep chunks (all loads issued before any is used), added
// to each chunk's sums in the batch's slot order.
__device__ __forceinline__ void accumulate_batch(const SlotBatch& batch, const int (&channel)[kChunksPerStep],
                                                 const bool (&active)[kChunksPerStep],
                                                 float (&accumulator)[kChunksPerStep][kChannelsPerLane]) {
  int4 rows[kChunksPerStep][kSlotBatch];
#pragma unroll
  for (int c = 0; c < kChunksPerStep; ++c) {
#pragma unroll
    for (int u = 0; u < kSlotBatch; ++u) {
      rows[c][u] = make_int4(0, 0, 0, 0);
      if (u < batch.count && active[c])
        rows[c][u] = ptx::ld_weak_no_allocate_v4(batch.row[u] + static_cast<size_t>(channel[c]) * 2);
    }
  }
#pragma unroll
  for (int c = 0; c < kChunksPerStep; ++c) {
#pragma unroll
    for (int u = 0; u < kSlotBatch; ++u) {
      if (u < batch.count) fma_row(accumulator[c], batch.weight[u], rows[c][u]);
    }
  }
}

struct ReduceShape {
  int64_t num_tokens;
  int hidden;
  int blocks;
  uint16_t* combined_x;   // [N, hidden]
  const uint16_t* bias0;  // [N, hidden] or null: the sums start at bias0 + bias1 (common/combine_bias.hpp)
  const uint16_t* bias1;
};

// Every warp of the grid takes items: a token and a run of its chunks (the whole row, or a share of it
// when the tokens are fewer than the warps, so that every warp has work). The token's slots are looked
// up and spread over the warp once per item, not per chunk; `slots_of(token)` (every lane; lane j answers
// for slot j, invalid past the token count) is called for the next item before this one's rows are
// loaded. Within an item, a step takes two chunks: every lane's 16 loads of the first batch of slots are
// in flight together. The sums are the same at every step: increasing slot order, one fmaf each.
template <typename SlotsOf>
__device__ void reduce_tokens(const ReduceShape& shape, SlotsOf&& slots_of) {
  const int lane = lane_id();
  const int hidden = shape.hidden;
  const int chunks = static_cast<int>(common::ceil_div(hidden, kChannelsPerChunk));
  const int64_t warps = static_cast<int64_t>(shape.blocks) * kSymmetricWarps;
  // Runs per token: as many as make the items cover the warps, in whole steps, at most one per step.
  const int64_t steps_per_token = common::ceil_div(chunks, kChunksPerStep);
  int64_t runs = shape.num_tokens > 0 ? warps / shape.num_tokens : 1;
  runs = runs < 1 ? 1 : (runs > steps_per_token ? steps_per_token : runs);
  const int chunks_per_run = static_cast<int>(common::ceil_div(steps_per_token, runs)) * kChunksPerStep;
  const int64_t items = shape.num_tokens * runs;
  int64_t item = static_cast<int64_t>(blockIdx.x) * kSymmetricWarps + threadIdx.x / 32;
  TokenSlots next = slots_of(item / runs);
  for (; item < items; item += warps) {
    const int64_t token = item / runs;
    const int first_chunk = static_cast<int>(item % runs) * chunks_per_run;
    const int end_chunk = first_chunk + chunks_per_run < chunks ? first_chunk + chunks_per_run : chunks;
    const TokenSlots slots = next;
    next = slots_of((item + warps) / runs);
    const uint32_t valid = __ballot_sync(0xffffffffu, slots.valid);
    uint32_t after_first = valid;
    SlotBatch first;
    first.take(after_first, slots);
    const size_t token_row = static_cast<size_t>(token) * hidden;
    for (int chunk = first_chunk; chunk < end_chunk; chunk += kChunksPerStep) {
      int channel[kChunksPerStep];
      bool active[kChunksPerStep];
      float accumulator[kChunksPerStep][kChannelsPerLane];
#pragma unroll
      for (int c = 0; c < kChunksPerStep; ++c) {
        channel[c] = (chunk + c) * kChannelsPerChunk + lane * kChannelsPerLane;
        active[c] = chunk + c < end_chunk && channel[c] < hidden;
        if (active[c]) {
          start_bf16x8(accumulator[c], shape.bias0 ? shape.bias0 + token_row : nullptr,
                       shape.bias1 ? shape.bias1 + token_row : nullptr,
                       static_cast<uint32_t>(channel[c] / kChannelsPerLane));
        } else {
#pragma unroll
          for (int i = 0; i < kChannelsPerLane; ++i) accumulator[c][i] = 0.0f;  // summed, never stored
        }
      }
      accumulate_batch(first, channel, active, accumulator);
      // More than kSlotBatch slots (k > 8): the later ones, in order, one at a time (few registers left
      // beside the first batch's; no caller of DeepSeek-V3's top-8 takes this path).
      for (uint32_t remaining = after_first; remaining != 0; remaining &= remaining - 1) {
        const int slot = __ffs(remaining) - 1;
        const float weight = __shfl_sync(0xffffffffu, slots.weight, slot);
        const uint8_t* row = reinterpret_cast<const uint8_t*>(
            __shfl_sync(0xffffffffu, reinterpret_cast<unsigned long long>(slots.row), slot));
#pragma unroll
        for (int c = 0; c < kChunksPerStep; ++c) {
          if (active[c])
            fma_row(accumulator[c], weight,
                    ptx::ld_weak_no_allocate_v4(row + static_cast<size_t>(channel[c]) * 2));
        }
      }
#pragma unroll
      for (int c = 0; c < kChunksPerStep; ++c) {
        if (active[c]) {
          *reinterpret_cast<int4*>(shape.combined_x + token_row + channel[c]) = round_bf16x8(accumulator[c]);
        }
      }
    }
  }
}

}  // namespace switchyard::cuda
