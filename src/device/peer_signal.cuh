#pragma once
// Signal words between ranks (barrier arrivals, done words, the low_latency counts, the normal rings' tails
// and heads): a release store into a peer's heap and an acquire load of our own, at the narrowest scope that
// holds every rank. Ranks on other GPUs (or the host) need system scope; words the host reads (mapped host
// memory) keep it always. When every rank's heap is on this GPU
// (KernelContext::peers_on_this_gpu: ranks as threads, or as processes under MPS, on one device), every
// peer thread runs on this GPU and GPU scope orders the same writes: the fence then waits for this GPU's
// L2, not for the system (NOTES, session 41, measures both). The peers' heaps are mapped at addresses
// of their own (IPC), but on one device each is the same physical memory behind the same L2, as the
// system-scope path also relies on.
// The GPU-scope forms (device/ptx.cuh) name the global state space: every such word is in a heap.
#include <cstdint>

#include "common/atomics.hpp"
#include "device/kernel_context.hpp"
#include "device/ptx.cuh"

namespace switchyard::cuda {

// Orders this thread's earlier writes (and those it acquired) before its later signal stores.
__device__ __forceinline__ void fence_before_peer_signal(const KernelContext& context) {
  if (context.peers_on_this_gpu) {
    ptx::fence_acq_rel_gpu();
  } else {
    ptx::fence_acq_rel_sys();
  }
}

__device__ __forceinline__ void st_release_peer(const KernelContext& context, uint64_t* word,
                                                uint64_t value) {
  if (context.peers_on_this_gpu) {
    ptx::st_release_gpu_u64(word, value);
  } else {
    common::st_release_sys(word, value);
  }
}

__device__ __forceinline__ uint64_t ld_acquire_peer(const KernelContext& context, const uint64_t* word) {
  if (context.peers_on_this_gpu) return ptx::ld_acquire_gpu_u64(word);
  return common::ld_acquire_sys(word);
}

}  // namespace switchyard::cuda
