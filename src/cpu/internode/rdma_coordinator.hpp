#pragma once
// The send side of one channel's RDMA stage, shared by dispatch (fed by the RDMA sender) and
// combine (fed by the forwarder). The producer stages messages in this rank's send buffer, the
// coordinator puts them to the peer's receive ring in chunks and advances the peer's recv_tail by a
// signal add, announces the call's message count, and reads back the slots the peer freed.
#include <string>
#include <vector>

#include "common/internode_protocol.hpp"
#include "common/sym_heap.hpp"
#include "cpu/normal/channel_role.hpp"
#include "transport/transport.hpp"

namespace switchyard::cpu {

// What the RDMA roles of one channel share.
struct RdmaLink {
  const common::SymHeap* heap;
  transport::Transport* transport;
  common::InternodeHeapLayout rdma;
  int rank, ranks_per_node, num_nodes, channel;
  uint32_t chunk_tokens;

  int node() const { return rank / ranks_per_node; }
  int local_rank() const { return rank % ranks_per_node; }
  int peer_in(int node_index) const { return common::rdma_peer(rank, node_index, ranks_per_node); }
  uint8_t* send_slot(int node_index, uint64_t sequence) const {
    return heap->base + rdma.send_slot_offset(channel, node_index, sequence);
  }
  uint8_t* recv_slot(int node_index, uint64_t sequence) const {
    return heap->base + rdma.recv_slot_offset(channel, node_index, sequence);
  }
};

// One destination node's send queue, in message sequence numbers since the start of the call.
struct RdmaSendQueue {
  uint64_t total = 0;   // messages this call
  uint64_t staged = 0;  // written into the send buffer by the producer
  uint64_t issued = 0;  // put to the peer and added to its recv_tail
  uint64_t freed = 0;   // slots the peer has freed (our send_head), as last read
  bool announced = false;

  bool full(uint32_t slots) const { return staged - freed >= slots; }
};

class RdmaCoordinator final : public ChannelRole {
 public:
  RdmaCoordinator(const RdmaLink& link, std::vector<RdmaSendQueue>& queues) : link_(link), queues_(queues) {}
  bool step() override;
  bool done() const override;
  std::string waiting_for() const override;
  const char* name() const override { return "coordinator"; }

 private:
  const RdmaLink& link_;
  std::vector<RdmaSendQueue>& queues_;  // [num_nodes]
};

}  // namespace switchyard::cpu
