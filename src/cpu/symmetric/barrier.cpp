#include "cpu/symmetric/barrier.hpp"

#include <string>

#include "common/atomics.hpp"

namespace switchyard::cpu {

void SymmetricBarrier::arrive_and_wait(const common::SymHeap& heap, uint64_t* signals, const Masking& masking,
                                       double timeout_seconds, const char* operation) {
  // (grid sync: one thread per rank on CPU.)
  ++epoch_;
  // Release: this rank's writes before the barrier (its input buffer, the peers' workspaces or
  // combine buffers) are visible to a peer that acquires the word. A store, not an add: the word
  // holds the barrier's number whatever this rank skipped before.
  for (int peer = 0; peer < heap.num_ranks; ++peer) {
    if (masking.reaches(heap.rank, peer)) common::st_release_sys(heap.map(signals + heap.rank, peer), epoch_);
  }
  wait_for_ranks(heap, masking, epoch_, timeout_seconds,
                 std::string(operation) + ", barrier " + std::to_string(epoch_), "arrive",
                 [&](int source) { return signals + source; });
  // (grid sync: one thread per rank on CPU.)
}

}  // namespace switchyard::cpu
