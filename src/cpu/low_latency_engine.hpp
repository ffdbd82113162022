#pragma once
// The CPU `low_latency` engine: the protocol of common/low_latency_protocol.hpp run by the calling
// thread. Each call is a send half (direct writes into the peers' receive slots, then one signal
// per (expert, rank) pair) and a receive half (bounded waits on those signals, then the copy-out or
// the reduction); with return_recv_hook the receive half is returned as the hook.
#include <cstdint>

#include "core/backend.hpp"
#include "cpu/host_heap.hpp"

namespace switchyard::cpu {

class LowLatencyEngine {
 public:
  LowLatencyEngine(HostHeap& heap, const void* owner) : heap_(heap), owner_(owner) {}

  LowLatencyDispatchResult dispatch(const detail::LowLatencyDispatchPlan& plan);
  LowLatencyCombineResult combine(const detail::LowLatencyCombinePlan& plan);

 private:
  HostHeap& heap_;
  const void* owner_;
  // Low-latency calls (dispatch and combine) made on this buffer; every rank counts alike.
  uint32_t sequence_ = 0;
};

}  // namespace switchyard::cpu
