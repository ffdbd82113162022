#pragma once
// The ranks' group when they are processes forked by the bench (--ranks-as processes): barrier and
// allgather over one shared anonymous mapping, created before the fork. Every wait is bounded, and a
// rank that fails marks the group aborted, so that its peers throw instead of waiting forever.
#include <cstddef>
#include <string>
#include <vector>

#include "switchyard/group.hpp"

namespace switchyard::bench {

class ProcessGroupState {
 public:
  // `wait_seconds` bounds every wait for the other ranks.
  ProcessGroupState(int size, double wait_seconds);
  ~ProcessGroupState();
  ProcessGroupState(const ProcessGroupState&) = delete;
  ProcessGroupState& operator=(const ProcessGroupState&) = delete;

  int size() const { return size_; }
  std::vector<Bytes> allgather(int rank, const Bytes& mine);
  void barrier();
  // Marks the group failed: every rank in or entering a collective throws Error with `why`.
  void abort(const std::string& why);

  // The most bytes one rank contributes to an allgather (a Buffer handle is far smaller).
  static constexpr size_t kSlotBytes = size_t{1} << 16;

  // The shared header at the start of the mapping (process_group.cpp).
  struct Shared;

 private:
  Shared* shared_ = nullptr;
  size_t mapped_bytes_ = 0;
  int size_;
  double wait_seconds_;
};

// One rank's view; each forked process makes its own over the inherited state.
class ProcessGroup : public Group {
 public:
  ProcessGroup(ProcessGroupState& state, int rank) : state_(state), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return state_.size(); }
  std::vector<Bytes> allgather(const Bytes& mine) override { return state_.allgather(rank_, mine); }
  void barrier() override { state_.barrier(); }

 private:
  ProcessGroupState& state_;
  int rank_;
};

}  // namespace switchyard::bench
