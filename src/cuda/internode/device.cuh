#pragma once
// Device pieces shared by the hierarchical `normal` kernels: the barrier across nodes and the
// opening of a call (resets), over the device transport.
#include "cuda/internode/kernels.hpp"
#include "device/bounded_wait.cuh"
#include "device/warp_group.cuh"
#include "transport/device_transport.cuh"

namespace switchyard::cuda {

__device__ __forceinline__ bool same_node(int rank, int peer, int ranks_per_node) {
  return rank / ranks_per_node == peer / ranks_per_node;
}

// A barrier of all ranks, run by one whole block per rank. Peers of our node get our arrival count
// stored into their word for us (as block_barrier_all_ranks does); peers of other nodes get a
// transport signal adding one. Every normal call of a multi-node buffer opens with this barrier, so
// both kinds of word count the same barriers. `before_remote_arrival(session, peer)` runs
// (warp-collective) before our signal to a remote peer, in the same session: what it puts lands
// before the peer sees us arrive. Returns false in every thread if some peer never arrived.
// `signature` (non-zero: a call's opening barrier): every peer must be opening a call with the same one
// (NormalHeapLayout::call_stamp_word: stored into the peers of our node, put ahead of the signal to the
// others), or false, each peer that is not recorded as a call_signature failure (as
// block_barrier_all_ranks does on one node).
template <typename Transport, typename BeforeRemoteArrival>
__device__ bool internode_barrier(const KernelContext& context, const Transport& barrier_transport,
                                  int ranks_per_node, const BeforeRemoteArrival& before_remote_arrival,
                                  uint64_t signature = 0) {
  __shared__ uint64_t epoch_of_block;
  __syncthreads();
  if (threadIdx.x == 0) {
    epoch_of_block = number_barrier(context, signature);
    // Our own word for us: the source of the puts to the other nodes (no peer writes it).
    if (signature != 0) {
      *context.layout.call_stamp_word(context.heap.base, context.rank, epoch_of_block) =
          common::call_stamp(signature, epoch_of_block);
    }
  }
  __syncthreads();
  const uint64_t epoch = epoch_of_block;
  if (epoch == 0) return false;  // a barrier of a refused call (number_barrier)
  const uint64_t stamp = common::call_stamp(signature, epoch);
  uint64_t* my_stamp = context.layout.call_stamp_word(context.heap.base, context.rank, epoch);
  const size_t my_stamp_offset =
      static_cast<size_t>(reinterpret_cast<uint8_t*>(my_stamp) - context.heap.base);
  const int warp = static_cast<int>(threadIdx.x / 32);
  const int warps = static_cast<int>(blockDim.x / 32);
  uint64_t* my_word = context.layout.barrier_word(context.heap.base, context.rank);
  transport::WarpSession<Transport> session(barrier_transport, context.heap, static_cast<uint32_t>(warp));
  for (int peer = warp; peer < context.num_ranks; peer += warps) {
    if (same_node(context.rank, peer, ranks_per_node)) {
      if (lane_id() == 0) {
        if (signature != 0) *context.heap.map(my_stamp, peer) = stamp;
        // NOTES: the block's earlier writes (resets, records, the stamp), ordered before us by
        // __syncthreads or program order, become visible system-wide before the peer sees our arrival.
        ptx::fence_acq_rel_sys();
        common::st_release_sys(context.heap.map(my_word, peer), epoch);
      }
      __syncwarp();
    } else {
      before_remote_arrival(session, peer);
      if (signature != 0) session.put(peer, my_stamp_offset, my_stamp_offset, sizeof(uint64_t));
      session.signal(peer, static_cast<transport::SignalId>(context.rank), 1);
    }
  }
  session.flush();
  bool arrived = true;
  for (int peer = warp; peer < context.num_ranks; peer += warps) {
    const WaitSite site{common::WaitRole::barrier, common::WaitTarget::peer_arrival, -1, peer};
    if (same_node(context.rank, peer, ranks_per_node)) {
      if (lane_id() == 0) {
        arrived = wait_at_least(context, context.layout.barrier_word(context.heap.base, peer), epoch, site) &&
                  arrived;
      }
      __syncwarp();
    } else {
      arrived = session.wait_signal(context, static_cast<transport::SignalId>(peer), epoch, site) && arrived;
    }
    // The peer stored or put its stamp ahead of the arrival the wait acquired.
    if (signature != 0 && lane_id() == 0 && arrived) {
      const uint64_t theirs = *context.layout.call_stamp_word(context.heap.base, peer, epoch);
      if (theirs != stamp) {
        record_call_mismatch(context, peer, stamp, theirs);
        arrived = false;
      }
    }
  }
  return __syncthreads_and(arrived) != 0;
}

// Zeroes every intranode ring this rank receives on and every RDMA counter it owns (before the
// barrier that opens a call). The whole block calls it.
template <typename Transport>
__device__ void reset_internode_call(const KernelContext& context,
                                     const InternodeTransports<Transport>& transports,
                                     const InternodeShape& shape) {
  const int num_rings = context.num_channels * context.num_ranks;
  for (int index = threadIdx.x; index < num_rings; index += blockDim.x) {
    common::Ring ring =
        context.layout.ring(context.heap.base, index / context.num_ranks, index % context.num_ranks);
    *ring.tail() = 0;
    *ring.head() = 0;
  }
  const int warp = static_cast<int>(threadIdx.x / 32);
  const int warps = static_cast<int>(blockDim.x / 32);
  transport::WarpSession<Transport> session(transports.rdma, context.heap, static_cast<uint32_t>(warp));
  const int num_signals = 3 * shape.rdma.num_channels * shape.num_nodes;
  for (int signal = warp; signal < num_signals; signal += warps) {
    session.reset_signal(static_cast<transport::SignalId>(signal));
  }
}

}  // namespace switchyard::cuda
