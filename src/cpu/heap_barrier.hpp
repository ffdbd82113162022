#pragma once
// A barrier over the symmetric heap: each rank stores its arrival count into every peer's word for
// it (release), then waits until every peer's word in its own heap reaches the same count
// (acquire). Counts only grow, so the words never need resetting.
#include <cstdint>

#include "common/normal_protocol.hpp"
#include "common/sym_heap.hpp"
#include "cpu/bounded_wait.hpp"

namespace switchyard::cpu {

class HeapBarrier {
 public:
  HeapBarrier() = default;
  // `operation` names the call in a timeout message ("dispatch", "combine").
  void arrive_and_wait(const common::SymHeap& heap, const common::NormalHeapLayout& layout, double timeout_seconds,
                       const char* operation);

 private:
  uint64_t epoch_ = 0;
};

}  // namespace switchyard::cpu
