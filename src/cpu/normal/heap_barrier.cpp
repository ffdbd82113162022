#include "cpu/normal/heap_barrier.hpp"

#include <string>

#include "switchyard/errors.hpp"

namespace switchyard::cpu {

void HeapBarrier::arrive_and_wait(const common::SymHeap& heap, const common::NormalHeapLayout& layout,
                                  double timeout_seconds, const char* operation,
                                  transport::Transport* transport, int ranks_per_node, uint64_t signature) {
  ++epoch_;
  uint64_t* my_word = layout.barrier_word(heap.base, heap.rank);
  auto on_other_node = [&](int peer) {
    return transport && peer / ranks_per_node != heap.rank / ranks_per_node;
  };
  const uint64_t stamp = common::call_stamp(signature, epoch_);
  uint64_t* my_stamp = layout.call_stamp_word(heap.base, heap.rank, epoch_);
  for (int peer = 0; signature != 0 && peer < heap.num_ranks; ++peer) {
    if (on_other_node(peer)) {
      // Put ahead of the arrival signal below: the transport delivers the two to a peer in order.
      transport->put(peer, static_cast<size_t>(reinterpret_cast<uint8_t*>(my_stamp) - heap.base), &stamp,
                     sizeof(stamp));
    } else {
      *heap.map(my_stamp, peer) = stamp;
    }
  }
  for (int peer = 0; peer < heap.num_ranks; ++peer) {
    if (on_other_node(peer)) {
      // One add per barrier: the word counts arrivals, as the stored epoch does.
      transport->signal(peer, static_cast<size_t>(reinterpret_cast<uint8_t*>(my_word) - heap.base), 1);
    } else {
      common::st_release_sys(heap.map(my_word, peer), epoch_);
    }
  }
  WaitBudget budget(timeout_seconds, nullptr);
  for (int peer = 0; peer < heap.num_ranks; ++peer) {
    const uint64_t* word = layout.barrier_word(heap.base, peer);
    while (common::ld_acquire_sys(word) < epoch_) {
      budget.idle([&] {
        std::string missing;
        for (int other = 0; other < heap.num_ranks; ++other) {
          if (common::ld_acquire_sys(layout.barrier_word(heap.base, other)) < epoch_) {
            missing += (missing.empty() ? "" : ", ") + std::to_string(other);
          }
        }
        return role_label(heap.rank, operation, "barrier", -1) + " waiting for rank(s) " + missing +
               " to arrive (barrier " + std::to_string(epoch_) + ")";
      });
    }
  }
  for (int peer = 0; signature != 0 && peer < heap.num_ranks; ++peer) {
    // Written (or put) before the peer's arrival, which the wait above acquired.
    if (*layout.call_stamp_word(heap.base, peer, epoch_) != stamp) {
      throw InvalidArgument(
          std::string(operation) +
          ": expected every rank to call with the same shape (the same call, hidden, dtype, k, "
          "experts, mode, channels); rank " +
          std::to_string(peer) + "'s call differs from rank " + std::to_string(heap.rank) + "'s");
    }
  }
}

}  // namespace switchyard::cpu
