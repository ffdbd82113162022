#pragma once
// How a `low_latency` kernel reaches its peers (the device counterpart of cpu/low_latency/link.hpp):
// a peer of this rank's node by stores at its mapped address, exactly as on one node; a peer of
// another node only through the device transport (transport/device_transport.cuh): puts, puts with
// a signal add, signal adds. Nothing here loads a remote node's memory.
//
// The kernels are templates over the transport. With SingleNode every peer is in the node and the
// across-nodes branches (`if constexpr (kAcrossNodes<Transport>)`) are compiled away, so the one-node
// kernels are today's.
//
// Across nodes, per row (common/low_latency_protocol.hpp):
//   dispatch: put(message: row + scales) and put_signal(16-byte source fields, rows landed + 1)
//   combine:  put_signal(bf16 row, rows landed + 1)
// then per (expert, peer) one count signal from the send kernel's last block, an add onto a word
// that this rank's next send kernel zeroes after the receive kernel has read it (reset_other_half).
#include <type_traits>

#include "common/low_latency_protocol.hpp"
#include "cuda/low_latency/device.cuh"
#include "cuda/low_latency/kernels.hpp"
#include "device/bounded_wait.cuh"
#include "transport/device_transport.cuh"
#include "transport/loopback_device.cuh"

namespace switchyard::cuda::low_latency {

template <typename Transport>
constexpr bool kAcrossNodes = !std::is_same<Transport, SingleNode>::value;

// A one-node kernel's stand-in for a transport session: constructed, never used.
struct NoSession {
  __device__ __forceinline__ NoSession(const SingleNode&, const common::SymHeap&, uint32_t) {}
};

template <typename Transport>
using Session = std::conditional_t<kAcrossNodes<Transport>, transport::WarpSession<Transport>, NoSession>;

// This warp's index in the grid: its session id (distinct per warp, as GIN contexts want).
__device__ __forceinline__ uint32_t grid_warp() {
  return blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
}

// Whether `peer` shares this rank's node (a load/store domain).
__device__ __forceinline__ bool in_my_node(const KernelContext& context, int ranks_per_node, int peer) {
  return context.rank / ranks_per_node == peer / ranks_per_node;
}

// Send kernels of call `sequence` (half `half`): zero every signal word of the other half (counts
// and rows landed). The receive kernel of the previous call, which read them, has finished (stream
// order), and no peer adds to them again before call sequence + 1 has been received from this rank,
// which the caller's last block signals only after every block's writes (finish_send_block), these
// included. The words are spread over the grid's warps.
template <typename Transport>
__device__ __forceinline__ void reset_other_half(const common::LowLatencyLayout& layout,
                                                 Session<Transport>& session, int half) {
  const int other = (half + 1) % common::kLowLatencyHalves;
  const uint32_t words = layout.signals_per_half();
  const uint32_t warps = gridDim.x * (blockDim.x / 32);
  const uint32_t per_warp = (words + warps - 1) / warps;
  const uint32_t begin = grid_warp() * per_warp;
  if (begin < words)
    session.reset_signals(layout.first_signal_id(other) + begin, min(per_warp, words - begin));
}

// Lane-parallel bounded waits on transport signals (each lane its own word). `read` returns the
// word (acquire). Both return false after recording a TimeoutError, when another wait of the rank
// failed for good, or when the call was refused for a peer's other shape (`refusal`).

// Until the count signal of call `sequence` (its tag) is there; its count in `count`.
template <typename Read>
__device__ __forceinline__ bool wait_for_count_signal(const KernelContext& context, const Read& read,
                                                      uint32_t sequence, const WaitSite& site,
                                                      const ShapeRefusal& refusal, int64_t& count) {
  uint64_t observed = read();
  if (!common::low_latency_signal_is_for(observed, sequence)) {
    const uint64_t start = ptx::globaltimer_ns();
    // NOTES: the clock and abort flag are read every 64 polls, as in wait_at_least.
    for (uint32_t polls = 1;; ++polls) {
      observed = read();
      if (common::low_latency_signal_is_for(observed, sequence)) break;
      if (common::low_latency_signal_of_other_shape(observed, sequence)) {
        record_other_shape(context, site, sequence, observed, refusal);
        return false;
      }
      if ((polls & 63) == 0) {
        if (rank_aborted(context) || refusal.raised()) return false;
        if (context.mask.masked(site.peer)) {
          count = kPeerMasked;
          return true;
        }
        const uint64_t waited = ptx::globaltimer_ns() - start;
        if (waited > context.timeout_ns) {
          count = peer_timed_out(context, site, sequence & common::kLowLatencySequenceMask,
                                 static_cast<int64_t>((observed >> 32) & common::kLowLatencySequenceMask),
                                 waited);
          return count == kPeerMasked;
        }
      }
    }
  }
  count = common::low_latency_signal_count(observed);
  return true;
}

// Until `rows` rows have landed (the counter's adds come with the puts: RDMA's one ordering).
template <typename Read>
__device__ __forceinline__ bool wait_for_rows_landed(const KernelContext& context, const Read& read,
                                                     int64_t rows, const WaitSite& site,
                                                     const ShapeRefusal& refusal) {
  uint64_t observed = read();
  if (observed >= static_cast<uint64_t>(rows)) return true;
  const uint64_t start = ptx::globaltimer_ns();
  for (uint32_t polls = 1;; ++polls) {
    observed = read();
    if (observed >= static_cast<uint64_t>(rows)) return true;
    if ((polls & 63) == 0) {
      if (rank_aborted(context) || refusal.raised()) return false;
      if (context.mask.masked(site.peer)) return true;  // the caller rereads the mask: left out
      const uint64_t waited = ptx::globaltimer_ns() - start;
      if (waited > context.timeout_ns)
        return peer_timed_out(context, site, rows, static_cast<int64_t>(observed), waited) == kPeerMasked;
    }
  }
}

// One lane: the count of (count word, rows-landed word) from a peer of another node, once all its
// rows have landed; -1 when a wait failed.
template <typename Transport>
__device__ __forceinline__ int64_t wait_across_nodes(const KernelContext& context,
                                                     const Session<Transport>& session,
                                                     const common::LowLatencyLayout& layout,
                                                     size_t count_offset, size_t landed_offset,
                                                     uint32_t sequence, const WaitSite& site,
                                                     const ShapeRefusal& refusal) {
  const transport::SignalId count_id = layout.signal_id(count_offset);
  const transport::SignalId landed_id = layout.signal_id(landed_offset);
  int64_t count = 0;
  if (!wait_for_count_signal(
          context, [&] { return session.read_signal(count_id); }, sequence, site, refusal, count)) {
    return -1;
  }
  if (count == kPeerMasked) return kPeerMasked;
  if (count > 0 && !wait_for_rows_landed(
                       context, [&] { return session.read_signal(landed_id); }, count, site, refusal)) {
    return -1;
  }
  return context.mask.masked(site.peer) ? kPeerMasked : count;
}

}  // namespace switchyard::cuda::low_latency
