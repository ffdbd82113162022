#pragma once
// Phase stamps of the symmetric dispatch, a measurement aid: with SWITCHYARD_SYMMETRIC_STAMPS=1 in the
// environment when the backend is created, each block notes %globaltimer (one clock for every rank of
// a GPU) when it reaches each phase of every kSymmetricStampEvery-th call pair, into the engine's stamp
// records (the last kSymmetricStampSamples such calls). The engine prints them to stderr when it is
// destroyed, one line per block:
//   symstamp <call> <rank> <block> <start> <counted> <synced> <routed> <gathered> <seen> <passed> <loaded>
//            <tabled> <issued> <drained> <walked> <released>, then the same 13 phases' SM clock (cycles)
// (ns; 0 where the block has no such phase). scripts/symmetric_stamps.py turns them into each phase's
// spread relative to the call's first block start on any rank (bench/NOTES.md). Within a block it places
// the phases by the SM's clock, scaled to ns by the block's own first and last stamps: %globaltimer may
// tick in steps too coarse for the 1-3 us steps between the barrier and the first row (NOTES, session 40).
// Off, the kernel pays one predicate per phase.
#include <cstdint>

#include "cuda/symmetric/kernels.hpp"
#include "device/cross_rank_barrier.cuh"
#include "device/ptx.cuh"

namespace switchyard::cuda {

enum DispatchPhase : int {
  kPhaseStart,     // the block's first instruction (before its first global load)
  kPhaseCounted,   // a routing block: its routing warps counted their segment (warp 0's view), before the
                   // grid sync that hands the counts to the other routing blocks
  kPhaseSynced,    // routing in every block: that grid sync released (every block of the rank counted)
  kPhaseRouted,    // a routing block: its routing warps placed every route of its segment (warp 0's view)
  kPhaseGathered,  // the barrier's opening grid sync released (every block of the rank arrived)
  kPhaseSeen,      // block 0: every peer's signal word seen (the barrier's cross-rank part done)
  kPhasePassed,    // the cross-rank barrier passed (its closing grid sync released)
  kPhaseLoaded,   // the sources' records and the counts read (push: and the begins), before the tables' build
  kPhaseTabled,   // the row tables built from them
  kPhaseIssued,   // the producer issued its last load (push: before its first row)
  kPhaseDrained,  // the consumer's stores are complete (push: the producer warp's rows stored, before the
                  // walk)
  kPhaseWalked,   // push: the producer warp walked its share of the rows pushed here (src_info, src_slot)
  kPhaseReleased,  // the block left the release (the last block: after every peer's done word)
};
static_assert(kPhaseReleased + 1 == kSymmetricStampPhases, "a stamp record holds every phase");

// One thread of the block notes `phase` into its shared-memory record.
__device__ __forceinline__ void stamp(DispatchStampRecord& record, bool on, DispatchPhase phase) {
  if (on) {
    record.at[phase] = ptx::globaltimer_ns();
    record.cycles[phase] = static_cast<uint64_t>(clock64());
  }
}

// The cross-rank barrier's steps (device/cross_rank_barrier.cuh) as phases, for its on_step hook.
struct BarrierStamps {
  DispatchStampRecord* record;
  bool on;
  __device__ __forceinline__ void operator()(BarrierStep step) const {
    stamp(*record, on, step == BarrierStep::gathered ? kPhaseGathered : kPhaseSeen);
  }
};

// Thread 0, at the end of the block: the block's record into the engine's, for sampled calls.
__device__ __forceinline__ void keep_stamps(DispatchStampRecord& record, DispatchStampRecord* records,
                                            uint32_t sequence) {
  // Dispatch and combine share the sequence and mostly alternate: count in pairs of calls.
  const uint32_t pair = sequence / 2;
  if (records == nullptr || pair % kSymmetricStampEvery != 0 || blockIdx.x >= kSymmetricStampBlocks) return;
  const uint32_t sample = (pair / kSymmetricStampEvery) % kSymmetricStampSamples;
  record.sequence = sequence;
  records[sample * kSymmetricStampBlocks + blockIdx.x] = record;
}

}  // namespace switchyard::cuda
