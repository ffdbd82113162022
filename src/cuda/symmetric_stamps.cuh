#pragma once
// Phase stamps of the symmetric dispatch, for measurement builds only (cmake
// -DSWITCHYARD_SYMMETRIC_STAMPS=ON; compiled out otherwise). Each block notes %globaltimer (one clock
// for every rank of a GPU) when it reaches each phase, and every kSymmetricStampEvery-th call prints
// one line per block:
//   symstamp <call> <rank> <block> <start> <routed> <barrier> <issued> <drained> <released>
// (ns; 0 where the block has no such phase). scripts/symmetric_stamps.py turns them into each phase's
// spread relative to the first rank's start: where the fixed cost of a call goes (bench/NOTES.md).
#include <cstdint>
#include <cstdio>

#include "cuda/ptx.cuh"

namespace switchyard::cuda {

#ifdef SWITCHYARD_SYMMETRIC_STAMPS
constexpr bool kSymmetricStamps = true;
#else
constexpr bool kSymmetricStamps = false;
#endif
constexpr uint32_t kSymmetricStampEvery = 16;

enum DispatchPhase : int {
  kPhaseStart,     // the block's first instruction after its setup
  kPhaseRouted,    // block 0: its routing warps wrote every route and count (warp 0's view)
  kPhasePassed,    // the cross-rank barrier passed
  kPhaseIssued,    // the producer issued its last load
  kPhaseDrained,   // the consumer's stores are complete
  kPhaseReleased,  // the block left the release (the last block: after every peer's done word)
  kNumDispatchPhases
};

struct DispatchStamps {
  uint64_t at[kNumDispatchPhases];
};

// One thread of the block notes `phase` (a no-op unless stamps are built in).
__device__ __forceinline__ void stamp(DispatchStamps& stamps, DispatchPhase phase) {
  if constexpr (kSymmetricStamps) stamps.at[phase] = ptx::globaltimer_ns();
}

__device__ __forceinline__ void clear_stamps(DispatchStamps& stamps) {
  if constexpr (kSymmetricStamps) {
    for (int phase = 0; phase < kNumDispatchPhases; ++phase) stamps.at[phase] = 0;
  }
}

// Thread 0, at the end of the block.
__device__ __forceinline__ void print_stamps(const DispatchStamps& stamps, uint32_t sequence, int rank) {
  if constexpr (kSymmetricStamps) {
    if (sequence % kSymmetricStampEvery != 0) return;
    printf("symstamp %u %d %d %llu %llu %llu %llu %llu %llu\n", sequence, rank, static_cast<int>(blockIdx.x),
           static_cast<unsigned long long>(stamps.at[kPhaseStart]), static_cast<unsigned long long>(stamps.at[kPhaseRouted]),
           static_cast<unsigned long long>(stamps.at[kPhasePassed]), static_cast<unsigned long long>(stamps.at[kPhaseIssued]),
           static_cast<unsigned long long>(stamps.at[kPhaseDrained]),
           static_cast<unsigned long long>(stamps.at[kPhaseReleased]));
  }
}

}  // namespace switchyard::cuda
