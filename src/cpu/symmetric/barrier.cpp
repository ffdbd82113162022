#include "cpu/symmetric/barrier.hpp"

#include <string>

#include "common/atomics.hpp"
#include "cpu/backend/bounded_wait.hpp"

namespace switchyard::cpu {

void SymmetricBarrier::arrive_and_wait(const common::SymHeap& heap, uint64_t* signals, double timeout_seconds,
                                       const char* operation) {
  // (grid sync: one thread per rank on CPU.)
  ++epoch_;
  // Release: this rank's writes before the barrier (its input buffer, the peers' workspaces or
  // combine buffers) are visible to a peer that acquires the count.
  for (int peer = 0; peer < heap.num_ranks; ++peer)
    common::red_add_release_sys(heap.map(signals + heap.rank, peer), 1);
  WaitBudget budget(timeout_seconds, nullptr);
  for (int source = 0; source < heap.num_ranks; ++source) {
    while (common::ld_acquire_sys(signals + source) < epoch_) {
      budget.idle([&] {
        std::string missing;
        for (int other = 0; other < heap.num_ranks; ++other) {
          if (common::ld_acquire_sys(signals + other) < epoch_) {
            missing += (missing.empty() ? "" : ", ") + std::to_string(other);
          }
        }
        return "rank " + std::to_string(heap.rank) + " (cpu " + operation + ", barrier " +
               std::to_string(epoch_) + ") waiting for rank(s) " + missing + " to arrive";
      });
    }
  }
  // (grid sync: one thread per rank on CPU.)
}

}  // namespace switchyard::cpu
