#pragma once
// One rank's clock for a timed phase, with the discipline every timed row of the bench shares: the
// rank first waits for its own stream (so it is idle, and any error its kernels recorded is raised),
// then all ranks meet at a host barrier, then the timer (CUDA events on the rank's stream, the wall
// clock on cpu) goes around the work; after it the stream is drained the same way before the time is
// read (the events are already recorded, so this does not change the time). Every rank starts each
// phase together, so the slowest rank's time is the phase's time.
#include <functional>
#include <utility>

#include "switchyard/group.hpp"
#include "timer.hpp"

namespace switchyard::bench {

class PhaseClock {
 public:
  // `synchronize` waits for the rank's stream and raises what its work recorded (Buffer::synchronize,
  // or nccl's bounded wait).
  PhaseClock(Group& group, PhaseTimer& timer, std::function<void()> synchronize)
      : group_(group), timer_(timer), synchronize_(std::move(synchronize)) {}

  void synchronize() { synchronize_(); }

  // Seconds `work` took on this rank, started together with every other rank.
  double time(const std::function<void()>& work) {
    synchronize_();
    group_.barrier();
    timer_.start();
    work();
    timer_.stop();
    synchronize_();
    return timer_.elapsed_seconds();
  }

 private:
  Group& group_;
  PhaseTimer& timer_;
  std::function<void()> synchronize_;
};

}  // namespace switchyard::bench
