#pragma once
// The CPU `symmetric` engine: the protocol of common/symmetric_protocol.hpp run by the calling
// thread. Dispatch: publish (input buffer, unless zero-copy: cpu/symmetric/source.hpp; and each
// target's workspace through map()), barrier, pull. Combine, push: each expert row into its home's combine
// buffer through map(), barrier, reduce locally; or pull (cpu/symmetric/pull_combine.hpp): every home reduces
// from the experts' y. Masked ranks (Buffer::update_mask) are neither written to nor awaited, their
// rows not pulled and their experts' slots dropped; each call fixes whom it works with after its waits
// (cpu/symmetric/participants.hpp).
#include <cstdint>

#include "common/rank_mask.hpp"
#include "core/engine.hpp"
#include "cpu/backend/host_heap.hpp"
#include "cpu/symmetric/barrier.hpp"

namespace switchyard::cpu {

class SymmetricEngine final : public detail::SymmetricUnit {
 public:
  // `mask`: this rank's view of masked peers (common/rank_mask.hpp), owned by the backend.
  SymmetricEngine(HostHeap& heap, detail::BufferId owner, common::RankMaskView mask)
      : heap_(heap), owner_(owner), mask_(mask) {}

  LowLatencyDispatchResult dispatch(const detail::SymmetricDispatchPlan& plan) override;
  LowLatencyCombineResult combine(const detail::SymmetricCombinePlan& plan) override;
  common::SymmetricHomeRows home_rows(const detail::SymmetricCombinePlan& plan) override;

  // At connect: the combine path (push or pull, resolved), the same on every rank.
  void set_combine_path(SymmetricCombine path) { combine_path_ = path; }
  SymmetricCombine combine_path() const override { return combine_path_; }
  // At connect: where the dispatch pulls bf16 rows from (publish or zero_copy, resolved).
  void set_dispatch_path(SymmetricDispatch path) { dispatch_path_ = path; }
  SymmetricDispatch dispatch_path() const override { return dispatch_path_; }
  // At connect: whether peers' plain x and y pointers reach (ranks as threads); otherwise only the
  // heap-resident tensors are read in place.
  void set_pointers_shared(bool shared) { pointers_shared_ = shared; }

 private:
  HostHeap& heap_;
  detail::BufferId owner_;
  common::RankMaskView mask_;
  // Symmetric calls (dispatch or combine) made on this buffer; every rank counts alike.
  uint32_t sequence_ = 0;
  SymmetricBarrier barrier_;
  SymmetricCombine combine_path_ = SymmetricCombine::push;
  SymmetricDispatch dispatch_path_ = SymmetricDispatch::publish;
  bool pointers_shared_ = false;
};

}  // namespace switchyard::cpu
