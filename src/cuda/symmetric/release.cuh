#pragma once
// The end of a symmetric kernel whose peers read this rank's memory in place (the zero-copy dispatch
// reads x; common/symmetric_protocol.hpp): the kernel must not complete while a peer may still read,
// since the caller may overwrite that memory right after it on its stream.
//   every block, once its own reads of peers are complete, counts itself out (acq_rel);
//   the last block releases the call into its done word in every peer's heap, then, if this rank's
//   memory was read in place, waits (bounded) until every peer has released the call into ours.
// Every block reaches it, after a failed wait too: the done words must advance so that no peer waits
// for us, and a peer that passed the barrier before we gave up may still be reading.
// Masked peers (device/rank_mask.cuh) get no done word and are not awaited; under
// Config::mask_ranks_on_timeout a peer whose done word does not come in time is masked and the kernel
// ends without it. Unlike the CPU engine (whose leases withdraw the memory), nothing then stops such a
// peer, should it be alive but slower than the timeout, from reading what the caller writes next.
#include "common/symmetric_protocol.hpp"
#include "cuda/symmetric/kernels.hpp"
#include "device/bounded_wait.cuh"
#include "device/peer_signal.cuh"
#include "device/ptx.cuh"
#include "device/rank_mask.cuh"

namespace switchyard::cuda {

// Every thread of every block, after the block's reads of peers' memory are complete (TMA loads
// consumed). `read_in_place`: peers read this rank's memory during the call, so the last block waits
// for their done words (a timeout names `role` and `target`: what the peers read). `advance_calls`: the
// last block also counts the call (for kernels with no barrier after which block 0 may).
__device__ __forceinline__ void release_call(const KernelContext& context, SymmetricDeviceState* state,
                                             const common::SymmetricLayout& layout, uint64_t sequence,
                                             bool read_in_place, common::WaitRole role,
                                             common::WaitTarget target, bool advance_calls) {
  __shared__ int last;
  // The block's bulk (async-proxy) reads are complete: order them before the generic release below.
  ptx::fence_proxy_async_global();
  __syncthreads();
  if (threadIdx.x == 0) {
    const uint64_t finished = ptx::atom_add_acq_rel_gpu_u64(&state->pull_exits, 1);
    last = finished + 1 == gridDim.x;
  }
  __syncthreads();
  if (!last) return;
  const common::SymHeap& heap = context.heap;
  for (int peer = threadIdx.x; peer < context.num_ranks; peer += blockDim.x) {
    if (reaches(context, peer))
      st_release_peer(context, heap.map(layout.pull_done(heap.base, context.rank), peer), sequence);
  }
  if (read_in_place) {
    for (int source = threadIdx.x; source < context.num_ranks; source += blockDim.x) {
      // Keeps waiting after another failure: a peer that got further than us may still be reading.
      wait_for_peer(context, layout.pull_done(heap.base, source), sequence,
                    WaitSite{role, target, -1, source}, OnRankFailure::keep_waiting);
    }
  }
  __syncthreads();
  // Only this block is left; the next call's blocks start after this kernel (stream order).
  if (threadIdx.x == 0) {
    state->pull_exits = 0;
    if (advance_calls) state->calls = static_cast<uint32_t>(sequence);
  }
}

}  // namespace switchyard::cuda
