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

// How a phase started by a hold is timed (SWITCHYARD_BENCH_START_EVENT, for A/B runs of the yardstick):
// - release_mark (unset: the default, session 38): from the hold's release to a mark the GPU writes after
//   the work, both on the GPU's clock (cuda::HoldMarks); no timing event is in the time;
// - before_hold (session 37): a start event before the hold, the hold's span taken off; the time then holds
//   the hold's launch gap after the event (20-30 us with 8 processes under MPS: bench/NOTES.md, session 38);
// - after_hold (before session 37): the start event between the hold and the work, which delays each
//   process's release (~2 us a process under MPS, session 36).
enum class StartTiming { release_mark, before_hold, after_hold };

// From SWITCHYARD_BENCH_START_EVENT; throws Error naming the variable, the values and the value given for
// any other.
StartTiming start_timing_from_environment();
const char* start_timing_name(StartTiming timing);

class StartHold {
 public:
  // Every rank of `group` constructs one with the same mode and lead. Throws Unsupported for
  // StartMode::timer in a build without the CUDA backend (options refuse it before).
  StartHold(Group& group, Stream stream, StartMode mode, double ahead_us);
  ~StartHold();
  StartHold(const StartHold&) = delete;
  StartHold& operator=(const StartHold&) = delete;

  bool on() const { return mode_ == StartMode::timer; }

  StartTiming timing() const { return timing_; }

  // A collective: every rank calls it before each phase's work. When on, the ranks agree on a moment (rank 0
  // picks it), `start_event` runs (the phase's start event: before the wait, or after it with after_hold),
  // and the rank's stream is held until the moment; it returns as soon as the wait is enqueued. Off, it only
  // runs `start_event`.
  void hold(const std::function<void()>& start_event);
  // After the phase's work is enqueued, before its stop event: with release_mark, the GPU's mark of the end.
  void finish();
  // The phase's time, given its events' (start to stop): the events' when off or with after_hold; the
  // events' less the hold's span with before_hold; from the release to the end mark with release_mark.
  // Read after the stream has been synchronised. Throws Error if the marks were not written.
  double phase_seconds(double event_seconds) const;

  // Whether the last hold has let its stream go (false when off): asked as the call begins, true says the
  // moment came before this rank reached the call.
  bool released() const;
  // How long the last hold held its stream, from its first reading of the clock to its last (0 when off).
  // Read after the stream has been synchronised.
  double held_seconds() const;
  // From the last hold's release to its end mark (0 when off, or without release_mark).
  double seconds_since_release() const;

 private:
  // Rank 0's moment on the GPU's clock, the same on every rank.
  uint64_t agree_on_moment();
  // cuda::HoldMarks in a build with CUDA: the marks the hold's kernel writes.
  struct Marks;
  std::unique_ptr<Marks> marks_;

  Group& group_;
  Stream stream_;
  StartMode mode_;
  uint64_t ahead_ns_;
  // The longest a stream waits, so that a moment that went wrong cannot hang the run.
  uint64_t limit_ns_;
  StartTiming timing_;  // start_timing_from_environment()
};

}  // namespace switchyard::bench
