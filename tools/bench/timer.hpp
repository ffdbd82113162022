#pragma once
// Times one phase (dispatch or combine) on one rank. A backend plugs in its own clock: wall clock
// on cpu, where every call returns when its work is done; CUDA events on the rank's stream on cuda.
#include <chrono>
#include <memory>

#include "switchyard/buffer.hpp"

namespace switchyard::bench {

class PhaseTimer {
 public:
  virtual ~PhaseTimer() = default;
  virtual void start() = 0;
  virtual void stop() = 0;
  // Seconds from the last start() to the last stop(); may wait for the work to finish.
  virtual double elapsed_seconds() = 0;
  // Whether the clock has already passed the last start(), asked just after stop(): on cuda, a stream
  // held back for a common start (start_hold.hpp) that reached its start event before the host had
  // enqueued the whole phase. A clock the host reads itself never lags the host: false.
  virtual bool start_reached() { return false; }
};

// Wall clock on cpu; on cuda, events recorded on `stream` (elapsed_seconds() waits for the stop event).
// Throws Unsupported for cuda in a build without the CUDA backend.
std::unique_ptr<PhaseTimer> make_phase_timer(Backend backend, Stream stream);

}  // namespace switchyard::bench
