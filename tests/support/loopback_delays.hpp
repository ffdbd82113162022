#pragma once
// The loopback transport's delays and reordering, switched for one test case through the
// environment that the transport reads when a buffer makes it (at its first call across nodes).
// Shared by the CPU and CUDA suites across nodes.
#include <cstdint>
#include <cstdlib>
#include <string>

namespace switchyard::testing {

// NOTES: a few microseconds already reorders most puts; the GPU issues them much faster than that,
// and more only slows the sanitizer runs on the CPU.
constexpr const char* kLoopbackDelayMicroseconds = "20";

// Turns the loopback delays and reordering on (or off) for the buffers made while it lives.
class LoopbackDelays {
 public:
  LoopbackDelays(bool on, uint64_t seed) {
    if (on) {
      setenv("SWITCHYARD_LOOPBACK_DELAY_US", kLoopbackDelayMicroseconds, 1);
      setenv("SWITCHYARD_LOOPBACK_SEED", std::to_string(seed).c_str(), 1);
    } else {
      unsetenv("SWITCHYARD_LOOPBACK_DELAY_US");
    }
  }
  ~LoopbackDelays() {
    unsetenv("SWITCHYARD_LOOPBACK_DELAY_US");
    unsetenv("SWITCHYARD_LOOPBACK_SEED");
  }
  LoopbackDelays(const LoopbackDelays&) = delete;
  LoopbackDelays& operator=(const LoopbackDelays&) = delete;
};

}  // namespace switchyard::testing
