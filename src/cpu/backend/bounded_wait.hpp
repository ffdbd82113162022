#pragma once
// Every wait in the CPU engine is bounded. A role that makes no progress spins briefly, then yields
// (ranks may share few cores), and raises TimeoutError naming rank, engine, role, channel and what
// it waited for once the deadline passes. A shared abort flag stops the rank's other roles as soon
// as one of them fails.
#include <atomic>
#include <chrono>
#include <functional>
#include <string>

namespace switchyard::cpu {

// Thrown inside a worker when another worker of the same call failed first; never escapes a call.
struct Aborted {};

class WaitBudget {
 public:
  WaitBudget(double timeout_seconds, const std::atomic<bool>* abort_flag)
      : timeout_(std::chrono::duration<double>(timeout_seconds)), abort_flag_(abort_flag) {}

  // Call after a step that made progress: the deadline counts from the last progress.
  void progressed() {
    spins_ = 0;
    started_ = false;
  }
  // Call after a step that made no progress. `describe` is only evaluated on timeout.
  void idle(const std::function<std::string()>& describe);

 private:
  std::chrono::duration<double> timeout_;
  const std::atomic<bool>* abort_flag_;
  uint64_t spins_ = 0;
  bool started_ = false;
  std::chrono::steady_clock::time_point since_{};
};

// "rank 2 (cpu normal dispatch, receiver, channel 1)"
std::string role_label(int rank, const char* operation, const char* role, int channel);

}  // namespace switchyard::cpu
