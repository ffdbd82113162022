#pragma once
// The CPU `low_latency` engine: the protocol of common/low_latency_protocol.hpp run by the calling
// thread. Each call is a send half (direct writes into the peers' receive slots, then one signal
// per (expert, rank) pair) and a receive half (bounded waits on those signals, then the copy-out or
// the reduction); with return_recv_hook the receive half is returned as the hook.
// Across nodes (ranks_per_node < num_ranks) the writes and signals to other nodes go through a
// loopback Transport, as puts and signal adds (low_latency_link.hpp); the outputs do not change.
// Receivers clear each signal word once consumed, so that an add always starts from zero.
// Masked ranks (common/rank_mask.hpp) are neither sent to nor waited for; their experts' slots are
// dropped. A receiver waits for every signal before it copies or reduces anything, so that a peer
// masked by a timeout during the waits is left out of the whole call.
#include <cstdint>
#include <memory>

#include "common/rank_mask.hpp"
#include "core/engine.hpp"
#include "cpu/backend/host_heap.hpp"

namespace switchyard::cpu {

class LowLatencyLink;

class LowLatencyEngine final : public detail::LowLatencyUnit {
 public:
  // `mask`: this rank's view of masked peers (common/rank_mask.hpp), owned by the backend; `transport`:
  // the Buffer's (BufferOptions::transport), for calls across nodes.
  LowLatencyEngine(HostHeap& heap, detail::BufferId owner, common::RankMaskView mask,
                   const TransportOptions& transport);
  ~LowLatencyEngine() override;

  LowLatencyDispatchResult dispatch(const detail::LowLatencyDispatchPlan& plan) override;
  LowLatencyCombineResult combine(const detail::LowLatencyCombinePlan& plan) override;

 private:
  // Made on the first call (the heap is connected by then).
  LowLatencyLink& link(const Topology& topology);

  HostHeap& heap_;
  detail::BufferId owner_;
  common::RankMaskView mask_;
  TransportOptions transport_;
  std::unique_ptr<LowLatencyLink> link_;
  // Low-latency calls (dispatch and combine) made on this buffer; every rank counts alike.
  uint32_t sequence_ = 0;
};

}  // namespace switchyard::cpu
