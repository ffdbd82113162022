#pragma once
// One rank's start of a timed phase at one moment shared by every rank (--start timer). The ranks leave
// the host barrier before a phase up to hundreds of microseconds apart as processes, and an early rank
// that records its start event then times its wait for the last one inside a collective call, as well as
// the host's enqueue of a small call. Every process on a GPU reads the same clock (%globaltimer), so
// rank 0 picks a moment ahead on it, every rank learns it, and each rank's stream waits for it before
// its work; the time the wait held the stream is taken off the phase's: every rank's time then starts at
// one instant on the GPU, whatever the host did.
// Across GPUs the clocks differ, and cpu has none: there (StartMode::barrier) hold() does nothing.
#include <cstdint>
#include <functional>
#include <memory>

#include "options.hpp"
#include "switchyard/buffer.hpp"
#include "switchyard/group.hpp"

namespace switchyard::bench {

// SWITCHYARD_BENCH_START_EVENT: before_hold (unset: the default) or after_hold, the order before session 37
// (the start event after the hold's wait, nothing taken off), to measure what the order changes in one run.
// Throws Error naming the variable for any other value.
bool start_event_after_hold();

class StartHold {
 public:
  // Every rank of `group` constructs one with the same mode and lead. Throws Unsupported for
  // StartMode::timer in a build without the CUDA backend (options refuse it before).
  StartHold(Group& group, Stream stream, StartMode mode, double ahead_us);
  ~StartHold();
  StartHold(const StartHold&) = delete;
  StartHold& operator=(const StartHold&) = delete;

  bool on() const { return mode_ == StartMode::timer; }

  // A collective: every rank calls it before each phase's work. When on, the ranks agree on a moment (rank 0
  // picks it), `before_the_wait` runs (the phase's start event), and the rank's stream is held until the
  // moment; it returns as soon as the wait is enqueued. Off, it only runs `before_the_wait`.
  // Why the start event goes before the wait: an event recorded between the hold and the work delays each
  // process's release (~2 us a process under MPS, bench/NOTES.md, session 36), which spreads the ranks'
  // starts that the hold exists to line up. The time then holds the hold's span, which held_seconds() gives
  // back to take off.
  void hold(const std::function<void()>& before_the_wait);

  // Whether the last hold has let its stream go (false when off): asked as the call begins, true says the
  // moment came before this rank reached the call.
  bool released() const;
  // How long the last hold held its stream, from its first reading of the clock to its last (0 when off).
  // Read after the stream has been synchronised.
  double held_seconds() const;

 private:
  // Rank 0's moment on the GPU's clock, the same on every rank.
  uint64_t agree_on_moment();
  // cuda::HoldMarks in a build with CUDA: the marks the hold's kernel writes.
  struct Marks;
  std::unique_ptr<Marks> marks_;
  bool event_after_the_wait_ = false;  // start_event_after_hold()

  Group& group_;
  Stream stream_;
  StartMode mode_;
  uint64_t ahead_ns_;
  // The longest a stream waits, so that a moment that went wrong cannot hang the run.
  uint64_t limit_ns_;
};

}  // namespace switchyard::bench
