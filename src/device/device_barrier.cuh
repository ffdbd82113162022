#pragma once
// A barrier of all ranks, run by one block per rank: each rank stores its arrival count into its word
// in every peer's heap (release), then waits for every peer's word in its own heap (acquire). Counts
// only grow (each rank counts its barriers on the device), so the words never need resetting.
#include "device/bounded_wait.cuh"
#include "device/peer_signal.cuh"

namespace switchyard::cuda {

// Every thread of the block calls this; returns false (in every thread) if some peer never arrived.
// `signature` (non-zero: a call's opening barrier, the plan's call signature): every peer must be opening a
// call with the same one (NormalHeapLayout::call_stamp_word), or false, the first peer that is not recorded
// as a call_signature failure (the host raises InvalidArgument) that aborts this call only; an opening
// barrier first ends the previous call's such abort, and the refused call's other barriers are skipped
// (number_barrier).
__device__ __forceinline__ bool block_barrier_all_ranks(const KernelContext& context,
                                                        uint64_t signature = 0) {
  __shared__ uint64_t epoch_of_block;
  __syncthreads();
  if (threadIdx.x == 0) epoch_of_block = number_barrier(context, signature);
  __syncthreads();
  const uint64_t epoch = epoch_of_block;
  if (epoch == 0) return false;  // a barrier of a refused call
  const uint64_t stamp = common::call_stamp(signature, epoch);
  bool arrived = true;
  uint64_t* my_word = context.layout.barrier_word(context.heap.base, context.rank);
  uint64_t* my_stamp = context.layout.call_stamp_word(context.heap.base, context.rank, epoch);
  for (int peer = threadIdx.x; peer < context.num_ranks; peer += blockDim.x) {
    if (signature != 0) *context.heap.map(my_stamp, peer) = stamp;
    // NOTES: the fence makes the block's earlier writes (ring resets, notify records, the stamp), ordered
    // before us by __syncthreads or program order, visible to every peer (system-wide, or GPU-wide where
    // every rank is on this GPU: device/peer_signal.cuh) before the peer sees our arrival.
    fence_before_peer_signal(context);
    st_release_peer(context, context.heap.map(my_word, peer), epoch);
  }
  for (int peer = threadIdx.x; peer < context.num_ranks; peer += blockDim.x) {
    WaitSite site{common::WaitRole::barrier, common::WaitTarget::peer_arrival, -1, peer};
    arrived =
        wait_at_least(context, context.layout.barrier_word(context.heap.base, peer), epoch, site) && arrived;
    // The peer wrote its stamp before the release of its arrival, which the wait acquired.
    const uint64_t theirs = *context.layout.call_stamp_word(context.heap.base, peer, epoch);
    if (arrived && signature != 0 && theirs != stamp) {
      record_call_mismatch(context, peer, stamp, theirs);
      arrived = false;
    }
  }
  return __syncthreads_and(arrived) != 0;
}

// The closing barrier of a call, held by the last block of the kernel that ends it (the in-place dispatch's
// gather, the in-place combine) instead of by a kernel of its own: one launch less a call. Every block of the
// grid calls it, whatever it did; each counts itself out in `blocks_done` (device memory of the engine, 0
// between calls) after its reads of peers' heaps are complete, and the last one to do so puts the count back
// to 0 (the next call's kernels run after this one ends) and holds the barrier, as a barrier kernel of its
// own did until session 32: after it no peer writes again what this rank read until this rank is done
// reading. A refused call skips it on every rank (number_barrier); a rank that gave up still arrives, and its
// waits end at once.
__device__ __forceinline__ void close_call_by_last_block(const KernelContext& context,
                                                         uint64_t* blocks_done) {
  __shared__ int is_last_block;
  __syncthreads();  // the block's reads are done
  if (threadIdx.x == 0) {
    // NOTES: acq_rel: the release orders this block's reads (ordered before it by __syncthreads) before its
    // count; the acquire lets the last block's barrier come after every other block's.
    is_last_block = ptx::atom_add_acq_rel_gpu_u64(blocks_done, 1) == gridDim.x - 1;
  }
  __syncthreads();
  if (!is_last_block) return;
  if (threadIdx.x == 0) *blocks_done = 0;
  block_barrier_all_ranks(context);
}

// Zeroes the head and tail of every ring this rank receives on (before the barrier that opens a call).
__device__ __forceinline__ void reset_own_rings(const KernelContext& context) {
  const int num_rings = context.num_channels * context.num_ranks;
  for (int index = threadIdx.x; index < num_rings; index += blockDim.x) {
    common::Ring ring =
        context.layout.ring(context.heap.base, index / context.num_ranks, index % context.num_ranks);
    *ring.tail() = 0;
    *ring.head() = 0;
  }
}

}  // namespace switchyard::cuda
