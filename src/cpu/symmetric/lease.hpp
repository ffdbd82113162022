#pragma once
// What the CPU `symmetric` engine's in-place reads (the pull combine reads peers' y, the zero-copy
// dispatch peers' x) share: the lease that keeps a rank from returning while a peer reads its memory,
// and the bounded wait on every rank's word of a call.
//
// A lease word (SymmetricPullRecord::lease, SymmetricSourceRecord::lease) holds the call in its high
// bits, then whether the owner withdrew its memory, then the readers holding it now. A reader reads a
// peer's memory only while it holds a lease of the call; an owner that gives up on a call (a timeout, a
// mismatch) withdraws and waits for the holders to finish (local work, no waits inside a lease) before
// it returns, so the caller may free that memory as soon as the call returns, whatever happened.
#include <cstdint>
#include <string>
#include <vector>

#include "common/atomics.hpp"
#include "common/sym_heap.hpp"
#include "common/symmetric_protocol.hpp"
#include "cpu/backend/bounded_wait.hpp"

namespace switchyard::cpu {

// A call whose ranks read each other's memory in place (the pull combine, the zero-copy dispatch).
struct InPlaceCall {
  const common::SymHeap* heap;
  common::SymmetricLayout layout;
  uint64_t sequence;  // the call's number among this buffer's symmetric calls, alike on every rank
  double timeout_seconds;
};

// The word an owner stores before it announces call `sequence`: open, no readers.
uint64_t open_lease(uint64_t sequence);
// Takes a lease for call `sequence`; false if its owner withdrew it (or moved on).
bool take_lease(uint64_t* lease, uint64_t sequence);
void return_lease(uint64_t* lease);
// The owner gives up on the call: no new lease, and every held one returned, before this returns.
void withdraw_lease(uint64_t* lease);

// "rank 0 (cpu symmetric combine, pull) waiting for rank(s) 1, 2 to <what>"
std::string waiting_for(const common::SymHeap& heap, const char* operation, const std::vector<int>& missing,
                        const char* what);

// Waits (bounded) until *word_of(rank) >= sequence for every rank; the TimeoutError names those still
// below, the rank and `operation` ("symmetric combine, pull").
template <typename WordOf>
void wait_all_ranks(const common::SymHeap& heap, uint64_t sequence, double timeout_seconds,
                    const char* operation, const char* what, WordOf word_of) {
  WaitBudget budget(timeout_seconds, nullptr);
  for (int rank = 0; rank < heap.num_ranks; ++rank) {
    while (common::ld_acquire_sys(word_of(rank)) < sequence) {
      budget.idle([&] {
        std::vector<int> missing;
        for (int other = 0; other < heap.num_ranks; ++other) {
          if (common::ld_acquire_sys(word_of(other)) < sequence) missing.push_back(other);
        }
        return waiting_for(heap, operation, missing, what);
      });
    }
  }
}

}  // namespace switchyard::cpu
