#pragma once
// One warp copies a row from global memory to global memory through its own staging buffer in shared
// memory, with TMA bulk copies, for kernels whose warps each move whole rows (the `normal` dispatch's
// receivers, the cached dispatch's gather). The source may be a mapped peer's heap: a bulk load reads
// it without the registers a 16-byte copy loop would hold per byte in flight.
//
// Lane 0 does the copying: for each piece of at most `staging_bytes`, it waits until the previous
// store has read the staging buffer, loads the piece (global -> shared, completing on the warp's
// mbarrier), waits for it and stores it (shared -> global). Stores stay in flight: the caller waits
// for them (ptx::tma_store_wait_all) before the rows must be visible.
#include <cstdint>

#include "device/ptx.cuh"
#include "device/warp_group.cuh"

namespace switchyard::cuda {

struct StagedRowCopy {
  uint8_t* staging;        // this warp's buffer in shared memory, 16-byte aligned
  uint32_t staging_bytes;  // a multiple of 16
  uint64_t* barrier;       // this warp's mbarrier, initialised with an arrival count of 1
  uint32_t phase;          // the mbarrier's next parity; every lane keeps the same value

  // Run by every lane of the warp. `bytes`, `source` and `destination` 16-byte aligned. A source
  // written by the generic proxy (a peer's stores, acquired) needs ptx::fence_proxy_async_global
  // before the first copy that reads it.
  __device__ __forceinline__ void copy(uint8_t* destination, const uint8_t* source, uint32_t bytes) {
    const bool leader = lane_id() == 0;
    for (uint32_t offset = 0; offset < bytes; offset += staging_bytes) {
      const uint32_t piece = min(staging_bytes, bytes - offset);
      if (leader) {
        ptx::tma_store_wait_read();  // the previous piece has left the staging buffer
        ptx::mbarrier_arrive_expect_tx(barrier, piece);
        ptx::tma_load_1d(staging, source + offset, piece, barrier);
        // A bulk load always completes (or the kernel faults), so this wait needs no bound.
        while (!ptx::mbarrier_try_wait_parity(barrier, phase)) {
        }
        ptx::tma_store_1d(destination + offset, staging, piece);
        ptx::tma_store_commit();
      }
      phase ^= 1;
    }
  }
};

}  // namespace switchyard::cuda
