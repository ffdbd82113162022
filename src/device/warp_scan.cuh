#pragma once
// Prefix sums across the lanes of a warp, for the per-call row tables the kernels build in shared memory
// (cuda/symmetric/tables.cuh, cuda/low_latency/device.cuh): a lane per entry and five shuffles, where one
// thread's loop over the entries costs a dependent shared-memory round trip each (NOTES, session 40: ~2.5 us
// for the symmetric dispatch's tables of 32 experts x 8 ranks).
#include <cstdint>

#include "device/warp_group.cuh"

namespace switchyard::cuda {

// Every lane of the warp: the sum of `value` over lanes 0..this one.
__device__ __forceinline__ int32_t warp_inclusive_sum(int32_t value) {
  const int lane = lane_id();
#pragma unroll
  for (int offset = 1; offset < 32; offset <<= 1) {
    const int32_t lower = __shfl_up_sync(0xffffffffu, value, offset);
    if (lane >= offset) value += lower;
  }
  return value;
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
