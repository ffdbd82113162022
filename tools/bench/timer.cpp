#include "timer.hpp"

#include "switchyard/errors.hpp"

namespace switchyard::bench {
namespace {

class WallClockTimer final : public PhaseTimer {
 public:
  void start() override { start_ = std::chrono::steady_clock::now(); }
  void stop() override { stop_ = std::chrono::steady_clock::now(); }
  double elapsed_seconds() override { return std::chrono::duration<double>(stop_ - start_).count(); }

 private:
  std::chrono::steady_clock::time_point start_, stop_;
};

}  // namespace

std::unique_ptr<PhaseTimer> make_phase_timer(Backend backend, Stream /*stream*/) {
  switch (backend) {
    case Backend::cpu:
      return std::make_unique<WallClockTimer>();
    case Backend::cuda:
      // NOTES: the CUDA seam: a timer recording cudaEvents on `stream`, synchronising in elapsed_seconds().
      throw Unsupported(
          "switchyard-bench: the CUDA event timer is not implemented yet (tools/bench/timer.cpp)");
  }
  throw Unsupported("switchyard-bench: no timer for this backend");
}

}  // namespace switchyard::bench
