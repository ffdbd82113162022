#pragma once
// A barrier of all ranks for kernels whose every block takes part (DESIGN.md, "Symmetric engine"):
//   1. a grid sync within the rank (every block's writes so far are ordered before step 2);
//   2. block 0: one thread per peer adds into its own word in that peer's heap with
//      red.release.sys, then spins with ld.acquire.sys until every peer's word in its own heap has
//      arrived (bounded: a timeout names the rank that did not arrive);
//   3. a grid sync again (every block now sees what the peers wrote before their arrival).
//
// Signal words, [2 phases][R sources] int32 in every rank's heap, only ever changed by their source:
// barrier b uses phase b % 2 and adds +1 when (b / 2) is even, -1 when odd, so a word goes
// 0 -> 1 -> 0 -> ... and never needs resetting. A peer can be at most one barrier ahead (it cannot
// pass b + 1 before we arrive there, which we do only after passing b), and that barrier uses the
// other phase: a waiter never sees a word move past the value it waits for.
//
// Counters live on the device (grid arrivals, barriers passed), so a replayed CUDA graph continues
// the sequence instead of repeating the captured one.
//
// Co-residency: a grid sync spins until every block of the grid has arrived, so all blocks of a
// rank's grid must be resident at once, and with ranks sharing a GPU, all their grids together
// (a peer's grid that cannot start leaves ours spinning). The launcher sizes the grid from the
// occupancy for that (cuda/symmetric/kernels.hpp, symmetric_blocks_per_rank); anything else that
// occupies SMs meanwhile (other streams) can still starve a grid, which then times out, never hangs.
#include "device/bounded_wait.cuh"
#include "device/ptx.cuh"

namespace switchyard::cuda {

// One rank's grid: the arrival counter (device memory of that rank) only grows, by `num_blocks`
// per sync, so a sync's target follows from the value its arrival returns.
struct GridBarrier {
  uint64_t* arrivals;
  uint32_t num_blocks;
};

// The cross-rank barrier's signal words in a rank's heap: [2 phases][num_ranks sources] int32.
struct CrossRankSignals {
  int32_t* words;  // this rank's copy
  int num_ranks;

  __host__ __device__ static constexpr size_t bytes(int num_ranks) {
    return 2 * static_cast<size_t>(num_ranks) * sizeof(int32_t);
  }
  __device__ __forceinline__ int32_t* word(int phase, int source) const {
    return words + phase * num_ranks + source;
  }
};

struct CrossRankBarrier {
  GridBarrier grid;
  CrossRankSignals signals;
  uint64_t* passed;  // barriers this rank has passed (device memory), read and advanced by block 0
};

// Every thread of the grid calls this. Returns false (in every thread of the block) when the wait
// timed out here (after `timeout_ns`) or any wait of this rank failed; the failure is in the error
// block.
__device__ __forceinline__ bool grid_sync(const GridBarrier& grid, const KernelContext& context,
                                          common::WaitRole role, uint64_t timeout_ns) {
  int ok = 1;
  __syncthreads();
  if (threadIdx.x == 0) {
    // Release: the block's writes, ordered before this thread by __syncthreads, go with the arrival.
    const uint64_t arrived = ptx::atom_add_release_gpu_u64(grid.arrivals, 1);
    const uint64_t target = (arrived / grid.num_blocks + 1) * grid.num_blocks;
    uint64_t observed = ptx::ld_acquire_gpu_u64(grid.arrivals);
    if (observed < target) {
      const uint64_t start = ptx::globaltimer_ns();
      // NOTES: the clock and the abort flag are read every 64 polls, as in wait_at_least.
      for (uint32_t polls = 1;; ++polls) {
        observed = ptx::ld_acquire_gpu_u64(grid.arrivals);
        if (observed >= target) break;
        if ((polls & 63) != 0) continue;
        if (rank_aborted(context)) {
          ok = 0;
          break;
        }
        const uint64_t waited = ptx::globaltimer_ns() - start;
        if (waited > timeout_ns) {
          const WaitSite site{role, common::WaitTarget::grid_arrival, -1, -1};
          record_wait_failure(context, site, static_cast<int64_t>(target), static_cast<int64_t>(observed),
                              waited);
          ok = 0;
          break;
        }
      }
    }
    // Read once, here: every thread of the block must take the same way out.
    if (ok && rank_aborted(context)) ok = 0;
  }
  // Thread 0's verdict to the whole block (the others hold 1), with the closing barrier; no shared
  // variable, which a kernel calling this at several sites would reuse.
  return __syncthreads_and(ok) != 0;
}

// Spins (acquire, system scope) until `*word == expected`. `arrivals` is the barrier's index: on
// timeout the record says the peer had arrived at `arrivals` barriers, not `arrivals + 1`.
__device__ __forceinline__ bool wait_signal_equals(const KernelContext& context, const int32_t* word,
                                                   int32_t expected, uint64_t arrivals,
                                                   const WaitSite& site) {
  if (ptx::ld_acquire_sys_s32(word) == expected) return true;
  const uint64_t start = ptx::globaltimer_ns();
  for (uint32_t polls = 1;; ++polls) {
    if (ptx::ld_acquire_sys_s32(word) == expected) return true;
    if ((polls & 63) != 0) continue;
    if (rank_aborted(context)) return false;
    const uint64_t waited = ptx::globaltimer_ns() - start;
    if (waited > context.timeout_ns) {
      record_wait_failure(context, site, static_cast<int64_t>(arrivals + 1), static_cast<int64_t>(arrivals),
                          waited);
      return false;
    }
  }
}

// Every thread of the grid calls this, once per barrier, on every rank. `role` names the caller in
// a timeout report.
__device__ __forceinline__ bool cross_rank_barrier(const CrossRankBarrier& barrier,
                                                   const KernelContext& context, common::WaitRole role) {
  if (!grid_sync(barrier.grid, context, role, context.timeout_ns)) return false;
  if (blockIdx.x == 0) {
    __shared__ uint64_t index_of_barrier;
    if (threadIdx.x == 0) index_of_barrier = *barrier.passed;
    __syncthreads();
    const uint64_t index = index_of_barrier;
    const int phase = static_cast<int>(index & 1);
    const bool negative = ((index >> 1) & 1) != 0;
    const int32_t expected = negative ? 0 : 1;
    const CrossRankSignals& signals = barrier.signals;
    for (int peer = threadIdx.x; peer < signals.num_ranks; peer += blockDim.x) {
      // NOTES: the grid sync made every block's writes visible to this thread; the system-scope
      // fence and release carry them (and our peers' workspaces written through map()) to the peer.
      ptx::fence_acq_rel_sys();
      ptx::red_add_release_sys_s32(context.heap.map(signals.word(phase, context.rank), peer),
                                   negative ? -1 : 1);
    }
    bool arrived = true;
    for (int peer = threadIdx.x; peer < signals.num_ranks; peer += blockDim.x) {
      const WaitSite site{role, common::WaitTarget::peer_arrival, -1, peer};
      arrived = wait_signal_equals(context, signals.word(phase, peer), expected, index, site) && arrived;
    }
    if (__syncthreads_and(arrived) && threadIdx.x == 0) *barrier.passed = index + 1;
  }
  // Block 0 arrives here even after a failed wait, so the other blocks are not left spinning; the
  // abort flag then tells every block. NOTES: the other blocks wait here while block 0 waits for
  // the peers, so they give up later than it: a missing peer is reported as such, not as a missing
  // block 0.
  return grid_sync(barrier.grid, context, role, 2 * context.timeout_ns);
}

}  // namespace switchyard::cuda
