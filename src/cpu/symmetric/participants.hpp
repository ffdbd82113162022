#pragma once
// Rank masks in the CPU `symmetric` engine (common/rank_mask.hpp, Buffer::update_mask): whom a call
// waits for, and whom it works with.
//   - Every wait (the barrier, the pull combine's records and done words, the zero-copy dispatch's
//     done words) skips a peer masked before or during it; under Config::mask_ranks_on_timeout a wait
//     that runs out of time masks the peers still missing and returns, instead of raising.
//   - After its waits, a call fixes its participants once (Participants) and uses only them from then
//     on: it reads no memory of a masked peer (it may be dead), writes none, and drops every slot
//     routed to a masked rank's experts. So the call in which a timeout masks a peer already has the
//     survivors' outputs, wherever the mask changed during a wait.
//   - A rank masked in its own view has no participants at all, itself included: it sends nothing,
//     waits for no one and receives nothing (recv_count 0, combined_x +0.0).
#include <cstdint>
#include <string>
#include <vector>

#include "common/atomics.hpp"
#include "common/rank_mask.hpp"
#include "common/sym_heap.hpp"
#include "cpu/backend/bounded_wait.hpp"
#include "switchyard/errors.hpp"

namespace switchyard::cpu {

// This rank's mask, and whether a wait that times out masks its peer.
struct Masking {
  common::RankMaskView mask;
  bool on_timeout = false;

  // Whether this rank waits for, and writes to, `peer` now.
  bool reaches(int self, int peer) const { return !mask.masked(self) && !mask.masked(peer); }
};

// The ranks a call works with, read from the mask once, at the point where the call decides.
class Participants {
 public:
  Participants(const Masking& masking, int self, int num_ranks) : in_(static_cast<size_t>(num_ranks), 0) {
    for (int rank = 0; rank < num_ranks; ++rank) in_[rank] = masking.reaches(self, rank) ? 1 : 0;
  }
  bool in(int rank) const { return in_[rank] != 0; }
  // Those of these that `masking` still reaches: a call's participants only shrink while it runs (a
  // rank unmasked meanwhile was neither written to nor awaited, so its words are stale).
  Participants still(const Masking& masking, int self) const {
    Participants left = *this;
    for (size_t rank = 0; rank < in_.size(); ++rank) {
      if (!masking.reaches(self, static_cast<int>(rank))) left.in_[rank] = 0;
    }
    return left;
  }
  // Whether every rank takes part (nobody is masked).
  bool all() const {
    for (uint8_t in : in_) {
      if (in == 0) return false;
    }
    return true;
  }
  // topk_idx [pairs] with -1 where the expert's rank does not take part: the slots the call reduces.
  std::vector<int64_t> surviving_slots(const int64_t* topk_idx, int64_t pairs, int local_experts) const {
    std::vector<int64_t> ids(topk_idx, topk_idx + pairs);
    for (int64_t& expert : ids) {
      if (expert >= 0 && !in(static_cast<int>(expert / local_experts))) expert = -1;
    }
    return ids;
  }

 private:
  std::vector<uint8_t> in_;
};

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
