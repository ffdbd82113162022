#pragma once
// Bounded spin-waits for one thread. On timeout the thread records who waited for what in the
// host-mapped error block (first failure wins), raises the rank's abort flag and returns false, so
// its warp group can leave the kernel together instead of hanging or trapping.
#include "common/atomics.hpp"
#include "device/kernel_context.hpp"
#include "device/peer_signal.cuh"
#include "device/ptx.cuh"

namespace switchyard::cuda {

struct WaitSite {
  common::WaitRole role;
  common::WaitTarget target;
  int channel;
  int peer;
};

// The rank's abort flag (KernelContext::abort_flag): 0, or why its kernels give up.
// - kAbortedForGood: a wait failed, so the protocol is broken: the host refuses every later call.
// - kAbortedThisCall: the ranks opened calls that differ (a call_signature failure), so every rank refuses
//   this call and writes nothing; the next call's opening barrier clears it (number_barrier), in stream
//   order, so the Buffer stays usable, as on the CPU backend.
constexpr int32_t kAbortedForGood = 1;
constexpr int32_t kAbortedThisCall = 2;

__device__ __forceinline__ void record_failure(const KernelContext& context, const WaitSite& site,
                                               int64_t expected, int64_t observed, uint64_t waited_ns,
                                               int32_t abort) {
  common::DeviceErrorBlock* error = context.error;
  // For good overrides this call; this call never overrides for good.
  if (abort == kAbortedForGood) atomicExch(context.abort_flag, kAbortedForGood);
  if (abort == kAbortedThisCall) atomicCAS(context.abort_flag, 0, kAbortedThisCall);
  // NOTES: the claim is a device-memory atomic; atomics on host-mapped memory are not supported
  // everywhere (compute-sanitizer rejects them on PCIe-attached hosts).
  if (atomicCAS(context.error_claim, 0, 1) == 0) {
    error->rank = context.rank;
    error->role = static_cast<int32_t>(site.role);
    error->target = static_cast<int32_t>(site.target);
    error->channel = site.channel;
    error->peer = site.peer;
    error->expected = expected;
    error->observed = observed;
    error->waited_ns = waited_ns;
    error->call = context.call_index;
    error->barriers = *context.barrier_epoch;
    error->claimed = 1;
    __threadfence_system();
    *reinterpret_cast<volatile int32_t*>(&error->complete) = 1;
  }
  // After the record (when this failure won the claim), so that the host, seeing gave_up, finds the record
  // complete unless another failure holds the claim.
  if (abort == kAbortedForGood) {
    __threadfence_system();
    *reinterpret_cast<volatile int32_t*>(&error->gave_up) = 1;
  }
}

// `abort_rank`: stop this rank's other waits for good (a failed wait); false for bad input found on the
// device, where the protocol can still complete.
__device__ __forceinline__ void record_wait_failure(const KernelContext& context, const WaitSite& site,
                                                    int64_t expected, int64_t observed, uint64_t waited_ns,
                                                    bool abort_rank = true) {
  record_failure(context, site, expected, observed, waited_ns, abort_rank ? kAbortedForGood : 0);
}

// A peer opened a call that differs from ours (its stamp, `theirs`, is not our `stamp`): this call is
// refused on this rank, and the next call may go ahead.
__device__ __forceinline__ void record_call_mismatch(const KernelContext& context, int peer, uint64_t stamp,
                                                     uint64_t theirs) {
  const WaitSite site{common::WaitRole::barrier, common::WaitTarget::call_signature, -1, peer};
  record_failure(context, site, static_cast<int64_t>(stamp), static_cast<int64_t>(theirs), 0,
                 kAbortedThisCall);
}

// By one thread of the block that holds a barrier of all ranks, as it starts: the barrier's number (one
// more than the last, *context.barrier_epoch), or 0 where the barrier is skipped.
// - An opening barrier (non-zero `signature`) first ends the previous call's refusal: every kernel of
//   that call ran before this one (one stream), so none of them sees the flag cleared.
// - Any other barrier of a refused call is skipped, numbered or not: the ranks' refused calls differ, so
//   their later barriers differ in number (a closing barrier on one rank, none on another), and counting
//   them would leave the ranks' barrier numbers apart for every later call. Every rank refuses at the same
//   opening barrier (each finds some peer's stamp differs), so all skip alike.
__device__ __forceinline__ uint64_t number_barrier(const KernelContext& context, uint64_t signature) {
  if (signature != 0) {
    atomicCAS(context.abort_flag, kAbortedThisCall, 0);
  } else if (*reinterpret_cast<volatile int32_t*>(context.abort_flag) == kAbortedThisCall) {
    return 0;
  }
  return ++*context.barrier_epoch;
}

// Whether this rank gave up for good (kAbortedForGood): what every wait watches. A refused call's abort
// (kAbortedThisCall) is not: no wait runs after a refused opening (its kernels return at their start, by
// call_stopped), and the expert-major engines, whose calls have no such opening, must not read a `normal`
// call's refusal as their own.
__device__ __forceinline__ bool rank_aborted(const KernelContext& context) {
  return *reinterpret_cast<volatile int32_t*>(context.abort_flag) == kAbortedForGood;
}

// Whether this call must not go on: refused at its opening (kAbortedThisCall), or the rank gave up. The
// `normal` engines' kernels after the opening read it first and write nothing.
__device__ __forceinline__ bool call_stopped(const KernelContext& context) {
  return *reinterpret_cast<volatile int32_t*>(context.abort_flag) != 0;
}

// Whether a wait gives up as soon as another wait of this rank failed (the usual), or keeps waiting
// until its own timeout: a wait that keeps memory alive for peers (symmetric_release.cuh) must not
// end early, since a peer that got further than us may still be reading it.
enum class OnRankFailure { give_up, keep_waiting };

// Spins until load() >= target. Returns false on timeout or, unless told to keep waiting, when
// another wait of this rank already failed. A timeout is recorded (the rank's first failure wins).
template <typename Load>
__device__ __forceinline__ bool wait_until_at_least(const KernelContext& context, Load load, uint64_t target,
                                                    const WaitSite& site, OnRankFailure on_failure) {
  uint64_t observed = load();
  if (observed >= target) return true;
  const uint64_t start = ptx::globaltimer_ns();
  // NOTES: the clock and abort flag are read every 64 polls; a poll is a few hundred ns.
  for (uint32_t polls = 1;; ++polls) {
    observed = load();
    if (observed >= target) return true;
    if ((polls & 63) == 0) {
      if (on_failure == OnRankFailure::give_up && rank_aborted(context)) return false;
      uint64_t waited = ptx::globaltimer_ns() - start;
      if (waited > context.timeout_ns) {
        record_wait_failure(context, site, static_cast<int64_t>(target), static_cast<int64_t>(observed),
                            waited);
        return false;
      }
    }
  }
}

// Spins until *word >= target (acquire: a word in this rank's heap that a peer writes; system scope, or GPU
// scope where every rank is on this GPU, device/peer_signal.cuh).
__device__ __forceinline__ bool wait_at_least(const KernelContext& context, const uint64_t* word,
                                              uint64_t target, const WaitSite& site,
                                              OnRankFailure on_failure = OnRankFailure::give_up) {
  return wait_until_at_least(
      context, [&context, word] { return ld_acquire_peer(context, word); }, target, site, on_failure);
}

// Spins until the shared-memory *word >= target (acquire, CTA scope: a word another warp of this
// block keeps, e.g. its copy of a peer's tail). Bounded like wait_at_least, and recorded under `site`.
__device__ __forceinline__ bool wait_shared_at_least(const KernelContext& context, const uint64_t* word,
                                                     uint64_t target, const WaitSite& site) {
  return wait_until_at_least(
      context, [word] { return ptx::atom_load_acquire_cta_shared_u64(word); }, target, site,
      OnRankFailure::give_up);
}

}  // namespace switchyard::cuda
