#pragma once
// The CPU hierarchical `normal` engine: used by the backend when ranks_per_node < num_ranks. The
// three-stage pipeline of DESIGN.md (Nodes) run by host threads, one per channel, each driving that
// channel's RDMA and NVLink roles (cpu/internode/*_roles.hpp, with the one-node engine's intranode
// receiver and ring protocol). It reaches other nodes only through a loopback Transport. The steps
// around the roles (ring reset, notify, outputs, handle) are the one-node engine's
// (cpu/normal/call.hpp).
#include <memory>

#include "common/internode_protocol.hpp"
#include "core/engine.hpp"
#include "cpu/backend/host_heap.hpp"
#include "cpu/normal/call.hpp"
#include "transport/loopback.hpp"

namespace switchyard::cpu {

class InternodeEngine final : public detail::NormalUnit {
 public:
  // `transport`: the Buffer's (BufferOptions::transport, loopback here), read at the first call.
  InternodeEngine(HostHeap& heap, detail::BufferId owner, const TransportOptions& transport)
      : calls_(heap, owner), transport_options_(transport) {}

  DispatchResult dispatch(const detail::DispatchPlan& plan) override;
  CombineResult combine(const detail::CombinePlan& plan) override;

 private:
  // Zeroes this rank's rings and RDMA counters, then waits for every rank to have done the same and to be
  // opening a call of `signature` (NormalCalls::open_call).
  void begin_call(const common::NormalHeapLayout& layout, const common::InternodeHeapLayout& rdma,
                  const Topology& topology, const Config& config, const char* operation, uint64_t signature);
  // Waits until every transport operation of this call has landed, so none reaches a peer after
  // it has moved on (every one is also awaited by its destination within the call).
  void end_call(const Config& config, int rank, const char* operation);
  // The loopback transport, made on the first call (the heap is connected by then).
  transport::Transport* transport();

  NormalCalls calls_;
  TransportOptions transport_options_;
  std::unique_ptr<transport::LoopbackTransport> transport_;
};

}  // namespace switchyard::cpu
