#pragma once
// One warp's 16-byte copy, for every engine's kernels: the caller names how its source is read
// (CopyLoad) and how many loads each lane keeps in flight (its register budget decides).
#include <cstdint>

#include "device/ptx.cuh"
#include "device/warp_group.cuh"

namespace switchyard::cuda {

// How a copy's 16-byte loads read the source.
enum class CopyLoad {
  // A generic, coherent load: global memory written during this kernel (by this rank, or by a peer
  // before a signal or barrier the caller acquired), where the non-coherent path is not allowed.
  plain,
  // The non-coherent path, not allocated in L1 (ptx::ld_weak_nc_v4): only for global memory that no
  // one writes during the kernel (the caller's inputs), which that path may otherwise serve stale.
  read_only,
  // read_only, allocated in L1 (ptx::ld_nc_v4): inputs that other warps of the block read again soon.
  read_only_shared_by_warps,
  // Coherent, not allocated in L1 (ptx::ld_weak_no_allocate_v4): rows a peer wrote before the signal
  // the caller acquired, read once, so they do not evict what the kernel reads again.
  no_allocate,
  // Shared memory through a generic pointer: a plain dereference (the loads above are global only).
  shared,
};

template <CopyLoad kLoad>
__device__ __forceinline__ int4 copy_load_v4(const int4* pointer) {
  if constexpr (kLoad == CopyLoad::read_only) {
    return ptx::ld_weak_nc_v4(pointer);
  } else if constexpr (kLoad == CopyLoad::read_only_shared_by_warps) {
    return ptx::ld_nc_v4(pointer);
  } else if constexpr (kLoad == CopyLoad::no_allocate) {
    return ptx::ld_weak_no_allocate_v4(pointer);
  } else {
    return *pointer;
  }
}

// A warp copies `bytes` (a multiple of 16, both sides 16-byte aligned) with 16-byte accesses: each
// lane issues kDepth loads (its vectors lane, lane + 32, ...) before their kDepth stores, 512 * kDepth
// bytes in flight per warp. Deeper hides more latency but holds 4 * kDepth more registers of data;
// each caller says why its depth.
// NOTES: every pass is predicated on the lane's vectors left, so the tail (fewer than kDepth left)
// still has all its loads in flight at once, not one vector at a time. Pointers that step, rather
// than a 32-bit index, let the unrolled accesses use immediate offsets (an index that may wrap cannot
// be folded), which keeps the copy in few registers. The values start at zero: a vector that a
// predicated-off load leaves undefined stays live around the loops (the caller's too), which cost up to
// 32 registers or spills at depth 8 (ptxas, sm_90a); a separate unpredicated main loop spilled more in
// the 64-register kernels than this one loop.
template <CopyLoad kLoad, int kDepth>
__device__ __forceinline__ void warp_copy(void* destination, const void* source, uint32_t bytes) {
  static_assert(kDepth >= 1, "a copy keeps at least one load in flight per lane");
  const int lane = lane_id();
  const int4* in = static_cast<const int4*>(source) + lane;
  int4* out = static_cast<int4*>(destination) + lane;
  int left = (static_cast<int>(bytes / 16) - lane + 31) / 32;  // this lane's vectors, 32 apart
  for (; left > 0; left -= kDepth, in += 32 * kDepth, out += 32 * kDepth) {
    int4 values[kDepth];
#pragma unroll
    for (int u = 0; u < kDepth; ++u) {
      values[u] = make_int4(0, 0, 0, 0);
      if (u < left) values[u] = copy_load_v4<kLoad>(in + 32 * u);
    }
#pragma unroll
    for (int u = 0; u < kDepth; ++u) {
      if (u < left) out[32 * u] = values[u];
    }
  }
}

}  // namespace switchyard::cuda
