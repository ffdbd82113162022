#pragma once
// Prefix sums across the lanes of a warp, for the per-call row tables the kernels build in shared memory
// (cuda/symmetric/tables.cuh, cuda/low_latency/device.cuh): a lane per entry and five shuffles, where one
// thread's loop over the entries costs a dependent shared-memory round trip each (NOTES, session 40: ~2.5 us
// for the symmetric dispatch's tables of 32 experts x 8 ranks); and segmented sums, where a warp sums several
// short lists side by side (NOTES, session 47: a full-warp scan per list of one entry was 20 % of a one-rank
// dispatch's instructions).
#include <cstdint>

#include "device/warp_group.cuh"

namespace switchyard::cuda {

// Every lane of the warp, with the lanes in segments of `width` (a power of two, 1..32) that sum apart: the
// sum of `value` over the lanes of this lane's segment up to this one. log2(width) shuffles, none for
// width 1.
__device__ __forceinline__ int32_t segment_inclusive_sum(int32_t value, int width) {
  const int lane_in_segment = lane_id() & (width - 1);
  for (int offset = 1; offset < width; offset <<= 1) {
    const int32_t lower = __shfl_up_sync(0xffffffffu, value, offset, width);
    if (lane_in_segment >= offset) value += lower;
  }
  return value;
}

// Every lane of the warp: the sum of `value` over lanes 0..this one (the whole warp as one segment).
__device__ __forceinline__ int32_t warp_inclusive_sum(int32_t value) {
  return segment_inclusive_sum(value, 32);
}

// The smallest power of two >= n, for 1 <= n <= 32: the segment width that gives each of n entries a lane.
__device__ __forceinline__ int segment_width_for(int n) {
  int width = 1;
  while (width < n) width <<= 1;
  return width;
}

// Every lane of the warp, over entries 0..n-1 taken 32 at a time (entry i in lane i % 32): calls
// `store(i, exclusive)` with the sum of entries 0..i-1 for each entry, where `value(i)` gives entry i, and
// returns the sum of all n (in every lane).
template <typename Value, typename Store>
__device__ __forceinline__ int32_t warp_exclusive_scan(int n, Value&& value, Store&& store) {
  const int lane = lane_id();
  int32_t carry = 0;
  for (int first = 0; first < n; first += 32) {
    const int i = first + lane;
    const int32_t entry = i < n ? value(i) : 0;
    const int32_t inclusive = warp_inclusive_sum(entry);
    if (i < n) store(i, carry + inclusive - entry);
    carry += __shfl_sync(0xffffffffu, inclusive, 31);
  }
  return carry;
}

}  // namespace switchyard::cuda
