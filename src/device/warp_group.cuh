#pragma once
// Warp groups: the warps of a block that serve one peer. A group of G warps splits a ring's slots
// (slot i goes to warp i % G) and meets at a named barrier before flow-control updates.
#include <cstdint>

#include "device/ptx.cuh"

namespace switchyard::cuda {

// A block has at most 32 warps, and the engines aim at 16 or 24: with G > 1 there are at most 12 groups
// (24 warps in pairs), so ids 1..12 stay within the 16 named barriers and never clash with
// __syncthreads' id 0.
struct WarpGroup {
  int index;          // the peer it serves
  int warp_in_group;  // 0..size-1
  int size;           // G

  __device__ __forceinline__ void sync() const {
    if (size == 1) {
      __syncwarp();
    } else {
      asm volatile("bar.sync %0, %1;" ::"r"(index + 1), "r"(size * 32) : "memory");
    }
  }
  __device__ __forceinline__ bool leader() const { return warp_in_group == 0 && (threadIdx.x % 32) == 0; }
};

__device__ __forceinline__ WarpGroup warp_group_of_this_warp(int warps_per_group) {
  int warp = static_cast<int>(threadIdx.x / 32);
  return WarpGroup{warp / warps_per_group, warp % warps_per_group, warps_per_group};
}

__device__ __forceinline__ int lane_id() {
  return static_cast<int>(threadIdx.x % 32);
}

}  // namespace switchyard::cuda
