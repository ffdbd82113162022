#pragma once
// A barrier of all ranks for kernels whose every block takes part (DESIGN.md, "Symmetric engine"):
//   1. a grid sync within the rank (every block's writes so far are ordered before step 2);
//   2. block 0: one thread per peer stores the barrier's number into its own word in that peer's heap
//      with st.release.sys, then spins with ld.acquire.sys until every peer's word in its own heap has
//      reached it (bounded: a timeout names the rank that did not arrive);
//   3. a grid sync again (every block now sees what the peers wrote before their arrival).
//
// Signal words, [R sources] u64 in every rank's heap (common/symmetric_protocol.hpp), only ever
// written by their source: the number of the last barrier it arrived at, so they never need
// resetting, and a peer one barrier ahead (it cannot pass b + 1 before we arrive there) only makes
// its word larger. Every rank numbers its barriers alike, arriving or not, so a rank that skipped
// barriers while masked is in step again at the first one it arrives at.
//
// Rank masks (device/rank_mask.cuh): masked peers are neither signalled nor awaited, a rank masked in
// its own view signals and awaits no one, and under Config::mask_ranks_on_timeout a peer that does not
// arrive in time is masked. All of that happens in block 0 before the closing grid sync, so every
// block that reads the mask after the barrier sees the same ranks.
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
#include "device/peer_signal.cuh"
#include "device/ptx.cuh"
#include "device/rank_mask.cuh"

namespace switchyard::cuda {

// One rank's grid: the arrival counter (device memory of that rank) only grows, by `num_blocks`
// per sync, so a sync's target follows from the value its arrival returns.
struct GridBarrier {
  uint64_t* arrivals;
  uint32_t num_blocks;
};

// The cross-rank barrier's signal words in a rank's heap: [num_ranks sources] u64.
struct CrossRankSignals {
  uint64_t* words;  // this rank's copy
  int num_ranks;

  __host__ __device__ static constexpr size_t bytes(int num_ranks) {
    return static_cast<size_t>(num_ranks) * sizeof(uint64_t);
  }
  __device__ __forceinline__ uint64_t* word(int source) const { return words + source; }
};

struct CrossRankBarrier {
  GridBarrier grid;
  CrossRankSignals signals;
  uint64_t* passed;  // barriers this rank has reached (device memory), read and advanced by block 0
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

// The cross-rank part of a barrier, by every thread of one block: the barrier's number (one more than
// `passed`) stored into our word in every peer's heap, then every peer's word awaited. A failed wait is
// recorded (and raises the abort flag). `passed` advances arriving or not, failed or not: the numbers
// stay alike on every rank.
__device__ __forceinline__ void signal_and_await_peers(const CrossRankSignals& signals, uint64_t* passed,
                                                       const KernelContext& context, common::WaitRole role) {
  __shared__ uint64_t index_of_barrier;
  if (threadIdx.x == 0) index_of_barrier = *passed;
  __syncthreads();
  const uint64_t number = index_of_barrier + 1;
  for (int peer = threadIdx.x; peer < signals.num_ranks; peer += blockDim.x) {
    if (!reaches(context, peer)) continue;
    // NOTES: the grid sync (or the block's __syncthreads) made the writes before the barrier visible to
    // this thread; the fence and release (system scope, or GPU scope where every rank is on this GPU:
    // device/peer_signal.cuh) carry them (and our peers' workspaces written through map()) to the peer.
    fence_before_peer_signal(context);
    st_release_peer(context, context.heap.map(signals.word(context.rank), peer), number);
  }
  for (int peer = threadIdx.x; peer < signals.num_ranks; peer += blockDim.x) {
    const WaitSite site{role, common::WaitTarget::peer_arrival, -1, peer};
    wait_for_peer(context, signals.word(peer), number, site);
  }
  __syncthreads();
  if (threadIdx.x == 0) *passed = number;
}

// The steps of a cross-rank barrier that a caller may note (a measurement aid: the symmetric dispatch's
// phase stamps), each seen by thread 0 of the block.
enum class BarrierStep {
  gathered,    // the opening grid sync released: every block of this rank has arrived
  peers_seen,  // block 0 only: every peer's signal word has reached this barrier's number
};
struct NoBarrierSteps {
  __device__ __forceinline__ void operator()(BarrierStep) const {}
};

// Every thread of the grid calls this, once per barrier, on every rank. `role` names the caller in
// a timeout report; `on_step` is called by thread 0 after each BarrierStep.
template <typename OnStep = NoBarrierSteps>
__device__ __forceinline__ bool cross_rank_barrier(const CrossRankBarrier& barrier,
                                                   const KernelContext& context, common::WaitRole role,
                                                   OnStep on_step = {}) {
  if (!grid_sync(barrier.grid, context, role, context.timeout_ns)) return false;
  if (threadIdx.x == 0) on_step(BarrierStep::gathered);
  if (blockIdx.x == 0) {
    signal_and_await_peers(barrier.signals, barrier.passed, context, role);
    if (threadIdx.x == 0) on_step(BarrierStep::peers_seen);
  }
  // Block 0 arrives here even after a failed wait, so the other blocks are not left spinning; the
  // abort flag then tells every block. NOTES: the other blocks wait here while block 0 waits for
  // the peers, so they give up later than it: a missing peer is reported as such, not as a missing
  // block 0.
  return grid_sync(barrier.grid, context, role, 2 * context.timeout_ns);
}

}  // namespace switchyard::cuda
