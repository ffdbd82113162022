#pragma once
// A barrier over the symmetric heap: each rank stores its arrival count into every peer's word for
// it (release), then waits until every peer's word in its own heap reaches the same count
// (acquire). Counts only grow, so the words never need resetting.
#include <cstdint>

#include "common/normal_protocol.hpp"
#include "common/sym_heap.hpp"
#include "cpu/backend/bounded_wait.hpp"
#include "transport/transport.hpp"

namespace switchyard::cpu {

class HeapBarrier {
 public:
  HeapBarrier() = default;
  // `operation` names the call in a timeout message ("dispatch", "combine").
  // With a transport, peers outside this rank's node (of `ranks_per_node`) get a signal add instead
  // of a store: across nodes there are only puts and signals. Both leave the arrival count.
  // `signature` (non-zero: a call's opening barrier): every rank must be opening a call with the same
  // signature (call_stamp; put ahead of the signal to a peer of another node), or InvalidArgument naming the
  // first that is not, on every rank that sees it.
  void arrive_and_wait(const common::SymHeap& heap, const common::NormalHeapLayout& layout,
                       double timeout_seconds, const char* operation,
                       transport::Transport* transport = nullptr, int ranks_per_node = 0,
                       uint64_t signature = 0);

  // The number of this rank's last barrier (the same on every rank once they have all passed it).
  uint64_t epoch() const { return epoch_; }

 private:
  uint64_t epoch_ = 0;
};

}  // namespace switchyard::cpu
