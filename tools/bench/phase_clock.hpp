#pragma once
// One rank's clock for a timed phase, with the discipline every timed row of the bench shares: the
// rank first waits for its own stream (so it is idle, and any error its kernels recorded is raised),
// then all ranks meet at a host barrier; with a cache eviction, one rank per cache then evicts it
// (cache_flush.hpp) and all meet again, so that no rank's work lands in the cache after its eviction;
// then the timer (CUDA events on the rank's stream, the wall
// clock on cpu) goes around the work; after it the stream is drained the same way before the time is
// read (the events are already recorded, so this does not change the time). Every rank starts each
// phase together, so the slowest rank's time is the phase's time.
// With a StartHold that is on (--start timer), "together" is one moment on the GPU's clock instead of
// each rank's exit of the barrier: every rank's stream waits for it before its work (the span of that wait
// is taken off the time). A hold that had passed before the rank began the call leaves that rank's
// lateness in the time again, so the timed phases count those.
#include <chrono>
#include <cstdint>
#include <functional>
#include <utility>

#include "start_hold.hpp"
#include "switchyard/group.hpp"
#include "timer.hpp"

namespace switchyard::bench {

class PhaseClock {
 public:
  // `synchronize` waits for the rank's stream and raises what its work recorded (Buffer::synchronize,
  // or nccl's bounded wait).
  // `evict_cache`, when given to every rank, runs before each phase between two barriers (a no-op on
  // the ranks that do not evict).
  // `start_hold`, when given to every rank (and on), sets every rank's start at one moment.
  PhaseClock(Group& group, PhaseTimer& timer, std::function<void()> synchronize,
             std::function<void()> evict_cache = {}, StartHold* start_hold = nullptr)
      : group_(group),
        timer_(timer),
        synchronize_(std::move(synchronize)),
        evict_cache_(std::move(evict_cache)),
        start_hold_(start_hold) {}

  void synchronize() { synchronize_(); }

  // Whether a phase starts from an evicted cache: every timed one does; the untimed check and warmup
  // iterations need not pay for it.
  enum class Cache { evict, keep };

  // Seconds `work` took on this rank, started together with every other rank.
  double time(const std::function<void()>& work, Cache cache = Cache::evict) {
    synchronize_();
    group_.barrier();
    if (evict_cache_ && cache == Cache::evict) {
      evict_cache_();
      group_.barrier();
    }
    // With a hold, the time is the StartHold's: by default from the hold's release to a mark after the work,
    // on the GPU's clock (start_hold.hpp says why no event is in it).
    if (holds()) {
      start_hold_->hold([&] { timer_.start(); });
    } else {
      timer_.start();
    }
    const auto host_start = std::chrono::steady_clock::now();
    // Asked as the call begins: a hold that has already let its stream go had its moment come before this
    // rank reached the call (a rank that left the barrier later than the lead, or a slow clock read), and
    // its time then holds its lateness. (Asked after the call, every call that waits on the host for its
    // stream, as a fresh dispatch does for its counts, would count.) The evicted phases are the timed ones;
    // a miss in the untimed ones (the first calls' lazy setup) costs no reported time.
    if (holds() && cache == Cache::evict) count_hold();
    work();
    if (holds()) start_hold_->finish();
    timer_.stop();
    last_host_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - host_start).count();
    synchronize_();
    const double elapsed = timer_.elapsed_seconds();
    return holds() ? start_hold_->phase_seconds(elapsed) : elapsed;
  }

  // The host's wall time of the last timed call (from just before the start event to just after the
  // stop event): on cuda, what the call costs the host, apart from the stream's time.
  double last_host_seconds() const { return last_host_seconds_; }

  // Timed phases started by the StartHold, and those whose start event the stream had reached before the
  // host began the call (0 and 0 without a hold).
  int64_t start_holds() const { return start_holds_; }
  int64_t start_holds_missed() const { return start_holds_missed_; }

 private:
  bool holds() const { return start_hold_ != nullptr && start_hold_->on(); }
  void count_hold() {
    ++start_holds_;
    if (start_hold_->released()) ++start_holds_missed_;
  }

  Group& group_;
  PhaseTimer& timer_;
  std::function<void()> synchronize_;
  std::function<void()> evict_cache_;
  StartHold* start_hold_;
  double last_host_seconds_ = 0;
  int64_t start_holds_ = 0, start_holds_missed_ = 0;
};

}  // namespace switchyard::bench
