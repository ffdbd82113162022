#pragma once
// The hierarchical (across nodes) `normal` engine's protocol, as types. It adds an RDMA region to
// the intranode heap layout of normal_protocol.hpp; the intranode rings are reused as the NVLink
// stage. The CPU engine (host threads over a loopback Transport) and a future CUDA engine share it.
//
// Ranks n*P .. n*P+P-1 form node n. Rank r's "RDMA peer" in node m is m*P + r%P: the only rank of
// node m that r talks to through the transport. Every RDMA object is keyed by (channel, peer node).
//
// RDMA region of each rank, after the intranode layout:
//   [counters: one RdmaCounters per (channel, peer node)]   signal words, written by transport adds
//   [receive rings: per (channel, peer node)]               written by the peer's puts only
//   [send buffers: per (channel, peer node)]                staged locally, put to the peer's ring
// A send buffer mirrors the peer's receive ring slot for slot, so one put moves a contiguous chunk.
//
// Dispatch: the RDMA sender stages each token once per destination node (InternodeDispatchMessage),
// the coordinator puts chunks and adds to the peer's recv_tail; the forwarder on the peer pushes the
// token into the intranode ring (index: source rank) of every rank of its node in the mask, and adds
// the freed slots to the sender's send_head. Combine: NVLink senders push rows to the forwarder of
// their node that serves the home rank (intranode ring index: combine_ring_index), the forwarder
// reduces them to one bf16 partial per node and its coordinator puts it to the home rank, whose
// RDMA receiver sums the partials in node order.
#include "common/normal_protocol.hpp"

namespace switchyard::common {

// Up to kMaxMappedRanks (128) ranks per node.
constexpr int kRankMaskWords = 2;

// Which ranks of a node (by local index) want a token.
struct RankMask {
  uint64_t words[kRankMaskWords];

  SY_HD void clear() {
    for (int i = 0; i < kRankMaskWords; ++i) words[i] = 0;
  }
  SY_HD void set(int local_rank) { words[local_rank / 64] |= uint64_t{1} << (local_rank % 64); }
  SY_HD bool test(int local_rank) const { return (words[local_rank / 64] >> (local_rank % 64)) & 1u; }
  SY_HD bool any() const {
    for (int i = 0; i < kRankMaskWords; ++i) {
      if (words[i]) return true;
    }
    return false;
  }
};
static_assert(sizeof(RankMask) == kFieldAlignment, "a RankMask is one aligned message field");

// One token crossing the network during dispatch, once per destination node: its row, fp8 scales,
// the full routing (global expert ids, so every rank of the node can derive its own view), its
// source token index and the mask of the node's ranks that want it.
struct InternodeDispatchMessage {
  uint32_t row_bytes;    // hidden * element size
  uint32_t num_scales;   // hidden / 128 for fp8, else 0
  uint32_t topk;         // K (0 for a cached dispatch without routing)
  uint32_t has_weights;  // 0 or 1

  SY_HD size_t row_offset() const { return 0; }
  SY_HD size_t scales_offset() const { return align_up(row_bytes, kFieldAlignment); }
  // Global expert id, or -1.
  SY_HD size_t topk_idx_offset() const {
    return scales_offset() + align_up(num_scales * 4u, kFieldAlignment);
  }
  SY_HD size_t topk_weights_offset() const {
    return topk_idx_offset() + align_up(topk * 4u, kFieldAlignment);
  }
  SY_HD size_t src_token_offset() const {
    return topk_weights_offset() + (has_weights ? align_up(topk * 4u, kFieldAlignment) : 0);
  }
  SY_HD size_t rank_mask_offset() const { return src_token_offset() + kFieldAlignment; }
  SY_HD size_t bytes() const { return rank_mask_offset() + sizeof(RankMask); }

  SY_HD uint8_t* row(uint8_t* slot) const { return slot + row_offset(); }
  SY_HD float* scales(uint8_t* slot) const { return reinterpret_cast<float*>(slot + scales_offset()); }
  SY_HD int32_t* topk_idx(uint8_t* slot) const {
    return reinterpret_cast<int32_t*>(slot + topk_idx_offset());
  }
  SY_HD float* topk_weights(uint8_t* slot) const {
    return reinterpret_cast<float*>(slot + topk_weights_offset());
  }
  SY_HD int32_t* src_token(uint8_t* slot) const {
    return reinterpret_cast<int32_t*>(slot + src_token_offset());
  }
  SY_HD RankMask* rank_mask(uint8_t* slot) const {
    return reinterpret_cast<RankMask*>(slot + rank_mask_offset());
  }
};

// The signal words of one (channel, peer node) pair on a rank. All three only grow during a call
// (transport adds) and are zeroed by their owner before the call's first barrier.
struct RdmaCounters {
  // Messages the peer's coordinator has put into our receive ring.
  uint64_t recv_tail;
  uint8_t pad0[kCounterStride - sizeof(uint64_t)];
  // The peer's message count for this call, plus one (0: not announced yet; the -v-1 idea of DeepEP,
  // so that "zero messages" and "not yet known" differ).
  uint64_t recv_total;
  uint8_t pad1[kCounterStride - sizeof(uint64_t)];
  // Slots of our sends to the peer that its reader has freed.
  uint64_t send_head;
  uint8_t pad2[kCounterStride - sizeof(uint64_t)];
};
static_assert(sizeof(RdmaCounters) == 3 * kCounterStride, "RdmaCounters must be three counter lines");

// Byte offsets of the RDMA region for one call shape: identical on every rank, so a sender computes
// the offset of a peer's object from its own layout. Offsets are from the heap base (what a
// Transport takes).
struct InternodeHeapLayout {
  size_t base;  // where the region starts: after the intranode layout
  int num_nodes;
  int ranks_per_node;
  int num_channels;
  uint32_t rdma_slots;
  uint32_t rdma_slot_bytes;
  // The CUDA notify's records for ranks of other nodes, staged here before they are put (one intranode
  // notify record per rank). A region of its own: staged in the send buffers, they needed rings of a
  // size the ring knobs did not promise (8 ranks with one slot refused the call).
  uint32_t notify_record_bytes;
  int num_ranks;

  SY_HD int pair_index(int channel, int node) const { return channel * num_nodes + node; }

  SY_HD size_t counters_offset() const { return base; }
  SY_HD size_t counters_bytes() const { return sizeof(RdmaCounters) * num_channels * num_nodes; }
  SY_HD size_t ring_bytes() const {
    return align_up(static_cast<size_t>(rdma_slots) * rdma_slot_bytes, kCounterStride);
  }
  SY_HD size_t recv_rings_offset() const { return counters_offset() + counters_bytes(); }
  SY_HD size_t send_buffers_offset() const {
    return recv_rings_offset() + ring_bytes() * num_channels * num_nodes;
  }
  SY_HD size_t notify_staging_offset() const {
    return send_buffers_offset() + ring_bytes() * num_channels * num_nodes;
  }
  SY_HD size_t notify_staging_bytes() const {
    return align_up(static_cast<size_t>(notify_record_bytes) * num_ranks, kCounterStride);
  }
  SY_HD size_t end() const { return notify_staging_offset() + notify_staging_bytes(); }

  SY_HD size_t counters_offset(int channel, int node) const {
    return counters_offset() + sizeof(RdmaCounters) * pair_index(channel, node);
  }
  SY_HD size_t recv_tail_offset(int channel, int node) const {
    return counters_offset(channel, node) + offsetof(RdmaCounters, recv_tail);
  }
  SY_HD size_t recv_total_offset(int channel, int node) const {
    return counters_offset(channel, node) + offsetof(RdmaCounters, recv_total);
  }
  SY_HD size_t send_head_offset(int channel, int node) const {
    return counters_offset(channel, node) + offsetof(RdmaCounters, send_head);
  }
  SY_HD RdmaCounters* counters(uint8_t* heap, int channel, int node) const {
    return reinterpret_cast<RdmaCounters*>(heap + counters_offset(channel, node));
  }

  SY_HD uint64_t slot_index(uint64_t sequence) const { return sequence % rdma_slots; }
  // Message `sequence` from peer node `node` on `channel`, in our receive ring.
  SY_HD size_t recv_slot_offset(int channel, int node, uint64_t sequence) const {
    return recv_rings_offset() + ring_bytes() * pair_index(channel, node) +
           slot_index(sequence) * rdma_slot_bytes;
  }
  // Message `sequence` to peer node `node` on `channel`, staged in our send buffer.
  SY_HD size_t send_slot_offset(int channel, int node, uint64_t sequence) const {
    return send_buffers_offset() + ring_bytes() * pair_index(channel, node) +
           slot_index(sequence) * rdma_slot_bytes;
  }
};

SY_HD int node_of(int rank, int ranks_per_node) {
  return rank / ranks_per_node;
}
SY_HD int local_rank_of(int rank, int ranks_per_node) {
  return rank % ranks_per_node;
}
// The rank of node `node` that `rank` exchanges RDMA traffic with.
SY_HD int rdma_peer(int rank, int node, int ranks_per_node) {
  return node * ranks_per_node + rank % ranks_per_node;
}

// Combine's intranode ring on a forwarder: one per (channel, sending rank's local index, home node),
// stored at the intranode layout's ring(channel, index) (there are exactly num_ranks of them).
SY_HD int combine_ring_index(int sender_local_rank, int home_node, int num_nodes) {
  return sender_local_rank * num_nodes + home_node;
}

}  // namespace switchyard::common
