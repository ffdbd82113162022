#include "cpu/internode/rdma_coordinator.hpp"

#include <algorithm>
#include <sstream>

namespace switchyard::cpu {

bool RdmaCoordinator::step() {
  bool progressed = false;
  const common::InternodeHeapLayout& rdma = link_.rdma;
  const int channel = link_.channel;
  const int my_node = link_.node();
  for (int node = 0; node < link_.num_nodes; ++node) {
    RdmaSendQueue& queue = queues_[node];
    const int peer = link_.peer_in(node);
    if (!queue.announced) {
      link_.transport->signal(peer, rdma.recv_total_offset(channel, my_node), queue.total + 1);
      queue.announced = true;
      progressed = true;
    }
    if (queue.freed < queue.issued) {
      uint64_t freed = link_.transport->read_signal(rdma.send_head_offset(channel, node));
      if (freed != queue.freed) {
        queue.freed = freed;
        progressed = true;
      }
    }
    if (queue.staged == queue.issued) continue;
    // The staged range as at most two contiguous puts (the ring may wrap), then one tail add that
    // lands after both.
    for (uint64_t sequence = queue.issued; sequence < queue.staged;) {
      uint64_t first_slot = rdma.slot_index(sequence);
      uint64_t count = std::min<uint64_t>(queue.staged - sequence, rdma.rdma_slots - first_slot);
      link_.transport->put(peer, rdma.recv_slot_offset(channel, my_node, sequence),
                           link_.send_slot(node, sequence), count * rdma.rdma_slot_bytes);
      sequence += count;
    }
    link_.transport->signal(peer, rdma.recv_tail_offset(channel, my_node), queue.staged - queue.issued);
    queue.issued = queue.staged;
    progressed = true;
  }
  return progressed;
}

bool RdmaCoordinator::done() const {
  return std::all_of(queues_.begin(), queues_.end(), [](const RdmaSendQueue& q) {
    return q.announced && q.issued == q.total && q.freed == q.total;
  });
}

std::string RdmaCoordinator::waiting_for() const {
  std::ostringstream out;
  for (int node = 0; node < link_.num_nodes; ++node) {
    const RdmaSendQueue& queue = queues_[node];
    if (queue.issued == queue.total && queue.freed == queue.total) continue;
    out << " waiting for rank " << link_.peer_in(node) << " (node " << node << ") to free RDMA slots (staged "
        << queue.staged << ", issued " << queue.issued << ", freed " << queue.freed << " of " << queue.total
        << ", " << link_.rdma.rdma_slots << " slots)";
    break;
  }
  return out.str();
}

}  // namespace switchyard::cpu
