#pragma once
// The roles of a hierarchical `normal` dispatch channel on the CPU (DESIGN.md, Nodes): the RDMA
// sender stages each token once per destination node, the RdmaCoordinator puts it to the RDMA peer,
// the forwarder there pushes it into the intranode ring of each rank of its node that wants it, and
// the intranode DispatchReceiver copies it out in rank-major order.
#include <string>
#include <vector>

#include "common/internode_protocol.hpp"
#include "cpu/internode/rdma_coordinator.hpp"
#include "cpu/normal/channel_role.hpp"
#include "cpu/normal/dispatch_roles.hpp"

namespace switchyard::cpu {

// What the internode roles read besides the intranode DispatchContext.
struct InternodeDispatchContext {
  const DispatchContext* intranode;  // heap, intranode layout and message, inputs and outputs
  transport::Transport* transport;
  common::InternodeHeapLayout rdma;
  common::InternodeDispatchMessage rdma_message;
  int ranks_per_node, num_nodes;
  // Filled by the forwarder of channel c at [c * num_nodes + source node]: the rank mask of each
  // token it forwarded, in order. Combine's forwarder reduces in this order.
  std::vector<std::vector<common::RankMask>>* forwarded;
};

class RdmaDispatchSender final : public ChannelRole {
 public:
  RdmaDispatchSender(const InternodeDispatchContext& context, const RdmaLink& link,
                     std::vector<RdmaSendQueue>& queues);
  bool step() override;
  bool done() const override;
  std::string waiting_for() const override;
  const char* name() const override { return "rdma sender"; }

 private:
  common::RankMask mask_of(int64_t token, int node) const;
  void write_message(int64_t token, const common::RankMask& mask, uint8_t* slot) const;

  const InternodeDispatchContext& context_;
  const RdmaLink& link_;
  std::vector<RdmaSendQueue>& queues_;
  int64_t begin_, end_;
  std::vector<int64_t> cursors_;  // per destination node: next source token to consider
};

class DispatchForwarder final : public ChannelRole {
 public:
  DispatchForwarder(const InternodeDispatchContext& context, const RdmaLink& link);
  bool step() override;
  bool done() const override;
  std::string waiting_for() const override;
  const char* name() const override { return "forwarder"; }

 private:
  struct Source {
    int rank;  // the source rank this forwarder serves in that node
    bool total_known;
    uint64_t total;     // messages it sends us this call
    uint64_t tail;      // recv_tail as last read
    uint64_t consumed;  // messages forwarded
    uint64_t reported;  // freed slots signalled back to the source
  };
  struct Target {  // one intranode ring (on a rank of our node, for one source rank)
    uint64_t tail, published, head;
  };
  bool forward_one(int node, Source& source, int* blocked_rank);
  void write_message(const uint8_t* rdma_slot, int destination, uint8_t* slot) const;

  const InternodeDispatchContext& context_;
  const RdmaLink& link_;
  std::vector<Source> sources_;  // per source node
  std::vector<Target> targets_;  // [source node][local destination]
  int blocked_rank_ = -1;
};

}  // namespace switchyard::cpu
