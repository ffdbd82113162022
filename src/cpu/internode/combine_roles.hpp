#pragma once
// The roles of a hierarchical `normal` combine channel on the CPU, the reverse of dispatch: NVLink
// senders push each row to the forwarder of their node that serves the home rank's local index; the
// forwarder reduces the rows of its node's ranks for each token (fp32 from +0 in ascending rank
// order, rounded to bf16 once) and its RdmaCoordinator puts that one partial per node to the home
// rank; the RDMA receiver there sums the partials in ascending node order (fp32 from +0, rounded
// once). DESIGN.md, Combine.
#include <string>
#include <vector>

#include "common/internode_protocol.hpp"
#include "cpu/internode/rdma_coordinator.hpp"
#include "cpu/normal/channel_role.hpp"
#include "cpu/normal/combine_roles.hpp"

namespace switchyard::cpu {

struct InternodeCombineContext {
  const CombineContext* intranode;  // heap, intranode layout, message (also the RDMA partial's), I/O
  transport::Transport* transport;
  common::InternodeHeapLayout rdma;
  int num_nodes;
  // From the dispatch handle: per (channel, home node), the masks the forwarder saw, in order.
  const std::vector<std::vector<common::RankMask>>* forwarded;
};

class NvlCombineSender final : public ChannelRole {
 public:
  NvlCombineSender(const InternodeCombineContext& context, int channel);
  bool step() override;
  bool done() const override;
  std::string waiting_for() const override;
  const char* name() const override { return "nvl sender"; }

 private:
  struct Home {
    int64_t next_row, end_row;
    uint64_t tail, published, head;
  };
  common::Ring ring_for(int home) const;

  const InternodeCombineContext& context_;
  int channel_;
  std::vector<Home> homes_;
};

class CombineForwarder final : public ChannelRole {
 public:
  CombineForwarder(const InternodeCombineContext& context, const RdmaLink& link,
                   std::vector<RdmaSendQueue>& queues);
  bool step() override;
  bool done() const override;
  std::string waiting_for() const override;
  const char* name() const override { return "forwarder"; }

 private:
  struct Stream {  // rows from one rank of our node for one home node
    uint64_t consumed, published, tail;
  };
  bool reduce_one(int home_node);
  Stream& stream(int local, int home_node) { return streams_[local * context_.num_nodes + home_node]; }
  common::Ring ring(int local, int home_node) const;

  const InternodeCombineContext& context_;
  const RdmaLink& link_;
  std::vector<RdmaSendQueue>& queues_;
  std::vector<size_t> cursors_;  // per home node: next entry of its forwarded list
  std::vector<Stream> streams_;  // [local rank][home node]
  std::vector<float> node_sum_;  // fp32 accumulator [H]
  int waiting_rank_ = -1;
};

class RdmaCombineReceiver final : public ChannelRole {
 public:
  RdmaCombineReceiver(const InternodeCombineContext& context, const RdmaLink& link);
  bool step() override;
  bool done() const override;
  std::string waiting_for() const override;
  const char* name() const override { return "rdma receiver"; }

 private:
  struct Node {
    uint64_t expected;  // partials this channel gets from the node (from is_token_in_rank)
    bool total_known;
    uint64_t consumed, tail, reported;
  };
  bool node_wants(int64_t token, int node) const;
  void check_announced();

  const InternodeCombineContext& context_;
  const RdmaLink& link_;
  int64_t token_, end_;
  std::vector<Node> nodes_;
  std::vector<float> total_;  // fp32 accumulator [H]
  int waiting_node_ = -1;
};

}  // namespace switchyard::cpu
