#pragma once
// The CPU `normal` engine: the pipeline protocol of DESIGN.md run by host threads, one thread per
// channel, each driving that channel's sender and receiver roles.
#include "core/backend.hpp"
#include "cpu/heap_barrier.hpp"
#include "cpu/host_heap.hpp"

namespace switchyard::cpu {

DispatchLayout compute_dispatch_layout(const TensorView& topk_idx, int num_experts, const Topology& topology);

class NormalEngine {
 public:
  NormalEngine(HostHeap& heap, const void* owner) : heap_(heap), owner_(owner) {}

  DispatchResult dispatch(const detail::DispatchPlan& plan);
  CombineResult combine(const detail::CombinePlan& plan);

 private:
  // Zeroes this rank's rings, then waits for every rank to have done the same.
  void begin_call(const common::NormalHeapLayout& layout, const Config& config, const char* operation);

  HostHeap& heap_;
  const void* owner_;
  HeapBarrier barrier_;
};

}  // namespace switchyard::cpu
