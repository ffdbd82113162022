#pragma once
// The reduction of the `symmetric` combine, shared by its two paths (DESIGN.md, expert-major
// combine): every warp of the grid takes (token, 256-channel chunk) items of this rank's tokens and
// sums the token's valid slots' rows, weighted, in increasing slot order with fmaf from +0 (or from
// the caller's biases: common/combine_bias.hpp), rounding
// to bf16 once: the CPU engine's arithmetic, bit for bit. The paths differ only in where a slot's
// row is: push reads this rank's combine buffer, pull the expert's rank's y (SlotsOf, below).
#include "common/numeric.hpp"
#include "cuda/symmetric/kernels.hpp"
#include "device/bf16x8.cuh"
#include "device/ptx.cuh"
#include "device/warp_group.cuh"

namespace switchyard::cuda {

// NOTES: a lane reduces 8 channels (one 16-byte load per slot), a warp 256; slots are loaded 8 at a
// time so that 8 loads per lane are in flight.
constexpr int kChannelsPerLane = 8;
constexpr int kChannelsPerChunk = 32 * kChannelsPerLane;
constexpr int kSlotBatch = 8;

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

struct ReduceShape {
  int64_t num_tokens;
  int hidden;
  int blocks;
  uint16_t* combined_x;   // [N, hidden]
  const uint16_t* bias0;  // [N, hidden] or null: the sums start at bias0 + bias1 (common/combine_bias.hpp)
  const uint16_t* bias1;
};

// Every warp of the grid. `slots_of(token)` (every lane; lane j answers for slot j, invalid past
// the token count) is called for the next item while the current item's rows are loaded, so each
// item costs one memory round trip.
template <typename SlotsOf>
__device__ void reduce_tokens(const ReduceShape& shape, SlotsOf&& slots_of) {
  const int lane = lane_id();
  const int hidden = shape.hidden;
  const int64_t chunks = common::ceil_div(hidden, kChannelsPerChunk);
  const int64_t items = shape.num_tokens * chunks;
  const int64_t warps = static_cast<int64_t>(shape.blocks) * kSymmetricWarps;
  int64_t item = static_cast<int64_t>(blockIdx.x) * kSymmetricWarps + threadIdx.x / 32;
  TokenSlots next = slots_of(item / chunks);
  for (; item < items; item += warps) {
    const int64_t token = item / chunks;
    const int channel = static_cast<int>(item % chunks) * kChannelsPerChunk + lane * kChannelsPerLane;
    const TokenSlots slots = next;
    next = slots_of((item + warps) / chunks);
    uint32_t remaining = __ballot_sync(0xffffffffu, slots.valid);
    float accumulator[kChannelsPerLane];
    const bool active = channel < hidden;
    if (active) {
      const size_t row = static_cast<size_t>(token) * hidden;
      start_bf16x8(accumulator, shape.bias0 ? shape.bias0 + row : nullptr,
                   shape.bias1 ? shape.bias1 + row : nullptr,
                   static_cast<uint32_t>(channel / kChannelsPerLane));
    }
    while (remaining != 0) {
      int slot[kSlotBatch];
      float weight[kSlotBatch];
      const uint8_t* row[kSlotBatch];
#pragma unroll
      for (int u = 0; u < kSlotBatch; ++u) {
        slot[u] = remaining != 0 ? __ffs(remaining) - 1 : -1;
        if (remaining != 0) remaining &= remaining - 1;
        const int source_lane = slot[u] < 0 ? 0 : slot[u];
        weight[u] = __shfl_sync(0xffffffffu, slots.weight, source_lane);
        row[u] = reinterpret_cast<const uint8_t*>(
            __shfl_sync(0xffffffffu, reinterpret_cast<unsigned long long>(slots.row), source_lane));
      }
      if (!active) continue;
      int4 rows[kSlotBatch];
#pragma unroll
      for (int u = 0; u < kSlotBatch; ++u) {
        rows[u] = make_int4(0, 0, 0, 0);
        if (slot[u] < 0) continue;
        rows[u] = ptx::ld_weak_no_allocate_v4(row[u] + static_cast<size_t>(channel) * 2);
      }
      // Increasing slot order: the batches, and the slots within one, come in order.
#pragma unroll
      for (int u = 0; u < kSlotBatch; ++u) {
        if (slot[u] >= 0) fma_row(accumulator, weight[u], rows[u]);
      }
    }
    if (!active) continue;
    uint32_t packed[kChannelsPerLane / 2];
#pragma unroll
    for (int i = 0; i < kChannelsPerLane / 2; ++i) {
      packed[i] = static_cast<uint32_t>(common::float_to_bf16(accumulator[2 * i])) |
                  (static_cast<uint32_t>(common::float_to_bf16(accumulator[2 * i + 1])) << 16);
    }
    *reinterpret_cast<int4*>(shape.combined_x + token * hidden + channel) =
        make_int4(static_cast<int>(packed[0]), static_cast<int>(packed[1]), static_cast<int>(packed[2]),
                  static_cast<int>(packed[3]));
  }
}

}  // namespace switchyard::cuda
