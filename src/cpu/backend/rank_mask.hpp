#pragma once
// The CPU backend's rank mask (common/rank_mask.hpp): host words that the rank's engine threads read,
// and what the engines decide from it: whom a call reaches (Masking) and, once it has waited, whom it
// works with (Participants).
#include <bitset>
#include <cstdint>
#include <vector>

#include "common/rank_mask.hpp"
#include "common/sym_heap.hpp"
#include "switchyard/tensor.hpp"

namespace switchyard::cpu {

class HostRankMask {
 public:
  explicit HostRankMask(int num_ranks) : words_(static_cast<size_t>(num_ranks), 0) {}
  HostRankMask(const HostRankMask&) = delete;
  HostRankMask& operator=(const HostRankMask&) = delete;

  common::RankMaskView view() { return {words_.data(), static_cast<int>(words_.size())}; }

  void set(int rank, bool masked) { __atomic_store_n(&words_[rank], masked ? 1 : 0, __ATOMIC_RELAXED); }
  void clear() {
    for (size_t rank = 0; rank < words_.size(); ++rank) set(static_cast<int>(rank), false);
  }
  // i32 [R]: 1 where masked.
  Tensor snapshot() {
    Tensor out = Tensor::empty(DType::i32, {static_cast<int64_t>(words_.size())});
    for (size_t rank = 0; rank < words_.size(); ++rank) out.as<int32_t>()[rank] = view().masked(rank) ? 1 : 0;
    return out;
  }

 private:
  std::vector<int32_t> words_;
};

// This rank's mask, and whether a wait that times out masks its peer (Config::mask_ranks_on_timeout).
struct Masking {
  common::RankMaskView mask;
  bool on_timeout = false;

  // Whether this rank waits for, and writes to, `peer` now: neither is masked in this rank's view (a
  // rank masked in its own view reaches no one, itself included).
  bool reaches(int self, int peer) const { return !mask.masked(self) && !mask.masked(peer); }
};

// The ranks a call works with, read from the mask once, at the point where the call decides (after its
// waits, so that a peer masked by a timeout is left out of the whole call).
class Participants {
 public:
  Participants(const Masking& masking, int self, int num_ranks) : num_ranks_(num_ranks) {
    for (int rank = 0; rank < num_ranks; ++rank) in_[rank] = masking.reaches(self, rank);
  }
  bool in(int rank) const { return in_[rank]; }
  // Those of these that `masking` still reaches: a call's participants only shrink while it runs (a
  // rank unmasked meanwhile was neither written to nor awaited, so its words are stale).
  Participants still(const Masking& masking, int self) const {
    Participants left = *this;
    for (int rank = 0; rank < num_ranks_; ++rank) {
      if (!masking.reaches(self, rank)) left.in_[rank] = false;
    }
    return left;
  }
  // Whether every rank takes part (nobody is masked).
  bool all() const { return static_cast<int>(in_.count()) == num_ranks_; }
  // topk_idx [pairs] with -1 where the expert's rank does not take part: the slots the call reduces.
  std::vector<int64_t> surviving_slots(const int64_t* topk_idx, int64_t pairs, int local_experts) const {
    std::vector<int64_t> ids(topk_idx, topk_idx + pairs);
    for (int64_t& expert : ids) {
      if (expert >= 0 && !in(static_cast<int>(expert / local_experts))) expert = -1;
    }
    return ids;
  }

 private:
  // NOTES: a fixed set rather than a vector: nothing allocated per call.
  std::bitset<common::kMaxMappedRanks> in_;
  int num_ranks_;
};

}  // namespace switchyard::cpu
