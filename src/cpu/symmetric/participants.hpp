#pragma once
// Rank masks in the CPU `symmetric` engine (common/rank_mask.hpp, Buffer::update_mask): whom a call
// waits for, and whom it works with.
//   - Every wait (the barrier, the pull combine's records and done words, the zero-copy dispatch's
//     done words) skips a peer masked before or during it; under Config::mask_ranks_on_timeout a wait
//     that runs out of time masks the peers still missing and returns, instead of raising.
//   - After its waits, a call fixes its participants once (Participants, cpu/backend/rank_mask.hpp)
//     and uses only them from then
//     on: it reads no memory of a masked peer (it may be dead), writes none, and drops every slot
//     routed to a masked rank's experts. So the call in which a timeout masks a peer already has the
//     survivors' outputs, wherever the mask changed during a wait.
//   - A rank masked in its own view has no participants at all, itself included: it sends nothing,
//     waits for no one and receives nothing (recv_count 0, combined_x +0.0).
#include <cstdint>
#include <string>
#include <vector>

#include "common/atomics.hpp"
#include "common/sym_heap.hpp"
#include "cpu/backend/bounded_wait.hpp"
#include "cpu/backend/rank_mask.hpp"
#include "switchyard/errors.hpp"

namespace switchyard::cpu {

// "rank 0 (cpu symmetric combine, pull) waiting for rank(s) 1, 2 to <what>"
std::string waiting_for(const common::SymHeap& heap, const std::string& operation,
                        const std::vector<int>& missing, const char* what);

// Waits (bounded) until *word_of(rank) >= target for every rank this rank reaches (Masking::reaches),
// rereading the mask while it waits. On timeout: under masking.on_timeout, masks every rank still
// missing and returns; otherwise throws TimeoutError naming them, the rank and `operation`.
template <typename WordOf>
void wait_for_ranks(const common::SymHeap& heap, const Masking& masking, uint64_t target,
                    double timeout_seconds, const std::string& operation, const char* what, WordOf word_of) {
  auto missing = [&] {
    std::vector<int> ranks;
    for (int rank = 0; rank < heap.num_ranks; ++rank) {
      if (masking.reaches(heap.rank, rank) && common::ld_acquire_sys(word_of(rank)) < target)
        ranks.push_back(rank);
    }
    return ranks;
  };
  WaitBudget budget(timeout_seconds, nullptr);
  for (int rank = 0; rank < heap.num_ranks; ++rank) {
    while (masking.reaches(heap.rank, rank) && common::ld_acquire_sys(word_of(rank)) < target) {
      try {
        budget.idle([&] { return waiting_for(heap, operation, missing(), what); });
      } catch (const TimeoutError&) {
        if (!masking.on_timeout) throw;
        // This rank writes its own word before it waits; a stale one is not a peer to leave out.
        for (int peer : missing()) {
          if (peer != heap.rank) masking.mask.mask(peer);
        }
        return;
      }
    }
  }
}

}  // namespace switchyard::cpu
