#pragma once
// The CPU backend's rank mask (common/rank_mask.hpp): host words that the rank's engine threads read.
#include <cstdint>
#include <vector>

#include "common/rank_mask.hpp"
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

}  // namespace switchyard::cpu
