#pragma once
// The CPU `normal` engine: the pipeline protocol of DESIGN.md run by host threads, one thread per
// channel, each driving that channel's sender and receiver roles. Across nodes
// (ranks_per_node < num_ranks) it runs the three-stage hierarchy instead, reaching other nodes only
// through a loopback Transport (internode_*_roles.hpp).
#include <memory>

#include "common/internode_protocol.hpp"
#include "core/backend.hpp"
#include "cpu/backend/host_heap.hpp"
#include "cpu/normal/heap_barrier.hpp"
#include "transport/loopback.hpp"

namespace switchyard::cpu {

DispatchLayout compute_dispatch_layout(const TensorView& topk_idx, int num_experts, const Topology& topology);

class NormalEngine {
 public:
  NormalEngine(HostHeap& heap, detail::BufferId owner) : heap_(heap), owner_(owner) {}

  DispatchResult dispatch(const detail::DispatchPlan& plan);
  CombineResult combine(const detail::CombinePlan& plan);

 private:
  // Zeroes this rank's rings (and RDMA counters across nodes), then waits for every rank to have
  // done the same.
  void begin_call(const common::NormalHeapLayout& layout, const common::InternodeHeapLayout* rdma,
                  const Topology& topology, const Config& config, const char* operation);
  // Waits until every transport operation of this call has landed, so none reaches a peer after
  // it has moved on (every one is also awaited by its destination within the call).
  void end_call(const Config& config, int rank, const char* operation);
  // The loopback transport, made on the first call across nodes (the heap is connected by then).
  transport::Transport* transport(const Topology& topology);

  HostHeap& heap_;
  detail::BufferId owner_;
  HeapBarrier barrier_;
  std::unique_ptr<transport::LoopbackTransport> transport_;
};

}  // namespace switchyard::cpu
