#pragma once
// Rank masks in device code (common/rank_mask.hpp, Buffer::update_mask): whom a kernel signals and
// waits for, and, per block, whom a call works with. The kernels read the mask words when they run, so
// a captured CUDA graph follows later updates.
//   - A rank reaches a peer when neither is masked in its view: a rank masked in its own view reaches
//     no one (it sends nothing, waits for no one and receives nothing).
//   - wait_for_peer: a bounded wait that skips a peer masked before or during it and, under
//     Config::mask_ranks_on_timeout, masks the peer on timeout instead of failing.
//   - PeerBits: a block's copy of whom the call works with, in shared memory, read once where the
//     kernel decides (the send side before its barrier, the receive side after it), and consulted per
//     (token, slot) where a global load each would cost (the low_latency and symmetric kernels alike).
#include "common/sym_heap.hpp"
#include "device/bounded_wait.cuh"
#include "device/peer_signal.cuh"

namespace switchyard::cuda {

// Whether this rank signals, writes to and waits for `peer` now.
__device__ __forceinline__ bool reaches(const KernelContext& context, int peer) {
  return !context.mask.masked(context.rank) && !context.mask.masked(peer);
}

enum class PeerWait {
  arrived,   // the word reached the target
  left_out,  // the peer is masked (before, during, or by this wait's timeout): go on without it
  failed,    // timed out (recorded), or another wait of this rank failed
};

// Spins until *word >= target (acquire) for site.peer, unless this rank does not reach it (then, or
// once it stops reaching it, left_out). On timeout: under context.mask_on_timeout the peer is masked
// (no failure is recorded and the rank goes on); otherwise the timeout is recorded. The clock, the
// abort flag and the mask are read every 64 polls, as in wait_at_least.
__device__ __forceinline__ PeerWait wait_for_peer(const KernelContext& context, const uint64_t* word,
                                                  uint64_t target, const WaitSite& site,
                                                  OnRankFailure on_failure = OnRankFailure::give_up) {
  if (!reaches(context, site.peer)) return PeerWait::left_out;
  uint64_t observed = ld_acquire_peer(context, word);
  if (observed >= target) return PeerWait::arrived;
  const uint64_t start = ptx::globaltimer_ns();
  for (uint32_t polls = 1;; ++polls) {
    observed = ld_acquire_peer(context, word);
    if (observed >= target) return PeerWait::arrived;
    if ((polls & 63) != 0) continue;
    if (on_failure == OnRankFailure::give_up && rank_aborted(context)) return PeerWait::failed;
    if (!reaches(context, site.peer)) return PeerWait::left_out;
    const uint64_t waited = ptx::globaltimer_ns() - start;
    if (waited > context.timeout_ns) {
      if (context.mask_on_timeout) {
        context.mask.mask(site.peer);
        return PeerWait::left_out;
      }
      record_wait_failure(context, site, static_cast<int64_t>(target), static_cast<int64_t>(observed),
                          waited);
      return PeerWait::failed;
    }
  }
}

// A set of ranks in shared memory, bit r of word r / 32 for rank r.
struct PeerBits {
  uint32_t words[common::kMaxMappedRanks / 32];

  // The ranks this rank reaches now (and that `within` holds, if given): every thread of the block
  // calls it; ends with __syncthreads. Warp 0 reads the mask words at once, a rank per lane, and
  // ballots them: one thread reading them in turn (two dependent loads per rank) put a dozen L2 round
  // trips before every receive half.
  __device__ void load(const KernelContext& context, const PeerBits* within = nullptr) {
    if (threadIdx.x < 32) {
      const bool self_in = !context.mask.masked(context.rank);
      for (int word = 0; word < common::kMaxMappedRanks / 32; ++word) {
        const int rank = word * 32 + static_cast<int>(threadIdx.x);
        const bool peer_in = rank < context.num_ranks && !context.mask.masked(rank);
        const uint32_t bits = __ballot_sync(0xffffffffu, self_in && peer_in);
        if (threadIdx.x == 0) words[word] = within != nullptr ? bits & within->words[word] : bits;
      }
    }
    __syncthreads();
  }
  // Empty: every thread of the block calls it; ends with __syncthreads.
  __device__ void clear() {
    for (int word = threadIdx.x; word < common::kMaxMappedRanks / 32; word += blockDim.x) words[word] = 0;
    __syncthreads();
  }
  // One thread adds `rank` (atomic: many threads may add at once).
  __device__ void add(int rank) { atomicOr(&words[rank / 32], 1u << (rank % 32)); }
  __device__ bool in(int rank) const { return (words[rank / 32] >> (rank % 32)) & 1u; }
  // Whether every rank below `num_ranks` is in: the kernels' fast path where nobody is masked, which
  // skips the per-slot rank lookups (and their divisions) in their hottest loops.
  __device__ bool covers(int num_ranks) const {
    for (int word = 0; word * 32 < num_ranks; ++word) {
      const int here = num_ranks - word * 32;
      const uint32_t want = here >= 32 ? 0xffffffffu : (1u << here) - 1u;
      if ((words[word] & want) != want) return false;
    }
    return true;
  }
};

}  // namespace switchyard::cuda
