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
};

// Wall clock on cpu; on cuda, events recorded on `stream` (elapsed_seconds() waits for the stop event).
// Throws Unsupported for cuda in a build without the CUDA backend.
std::unique_ptr<PhaseTimer> make_phase_timer(Backend backend, Stream stream);

}  // namespace switchyard::bench
