#pragma once
// One rank's start of a timed phase at one moment shared by every rank (--start timer). The ranks leave
// the host barrier before a phase up to hundreds of microseconds apart as processes, and an early rank
// that records its start event then times its wait for the last one inside a collective call, as well as
// the host's enqueue of a small call. Every process on a GPU reads the same clock (%globaltimer), so
// rank 0 picks a moment ahead on it, every rank learns it, and each rank's stream waits for it before
// the start event: every rank's time then starts at one instant on the GPU, whatever the host did.
// Across GPUs the clocks differ, and cpu has none: there (StartMode::barrier) hold() does nothing.
#include <cstdint>

#include "options.hpp"
#include "switchyard/buffer.hpp"
#include "switchyard/group.hpp"

namespace switchyard::bench {

class StartHold {
 public:
  // Every rank of `group` constructs one with the same mode and lead. Throws Unsupported for
  // StartMode::timer in a build without the CUDA backend (options refuse it before).
  StartHold(Group& group, Stream stream, StartMode mode, double ahead_us);

  bool on() const { return mode_ == StartMode::timer; }

  // A collective: every rank calls it before each phase's start event. When on, it holds the rank's
  // stream until the moment rank 0 chose; it returns as soon as the wait is enqueued.
  void hold();

 private:
  // Rank 0's moment on the GPU's clock, the same on every rank.
  uint64_t agree_on_moment();

  Group& group_;
  Stream stream_;
  StartMode mode_;
  uint64_t ahead_ns_;
  // The longest a stream waits, so that a moment that went wrong cannot hang the run.
  uint64_t limit_ns_;
};

}  // namespace switchyard::bench
