#include "timer.hpp"

#include <string>

#include "cuda_check.hpp"
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

#if defined(SWITCHYARD_WITH_CUDA)
// Events recorded on the rank's stream around the phase: the time the stream took from reaching
// start() to reaching stop(), including any gap in which it waited for the host to launch more work
// (e.g. a non-worst-case dispatch's host synchronisation for the counts).
class CudaEventTimer final : public PhaseTimer {
 public:
  explicit CudaEventTimer(Stream stream) : stream_(cuda_stream(stream)) {
    check_cuda(cudaEventCreate(&start_), "cudaEventCreate (phase timer start event)");
    const cudaError_t status = cudaEventCreate(&stop_);
    if (status != cudaSuccess) {
      cudaEventDestroy(start_);
      check_cuda(status, "cudaEventCreate (phase timer stop event)");
    }
  }
  ~CudaEventTimer() override {
    cudaEventDestroy(start_);
    cudaEventDestroy(stop_);
  }
  CudaEventTimer(const CudaEventTimer&) = delete;
  CudaEventTimer& operator=(const CudaEventTimer&) = delete;

  void start() override { check_cuda(cudaEventRecord(start_, stream_), "cudaEventRecord (phase start)"); }
  void stop() override { check_cuda(cudaEventRecord(stop_, stream_), "cudaEventRecord (phase stop)"); }
  double elapsed_seconds() override {
    check_cuda(cudaEventSynchronize(stop_), "cudaEventSynchronize (phase stop)");
    float milliseconds = 0;
    check_cuda(cudaEventElapsedTime(&milliseconds, start_, stop_), "cudaEventElapsedTime (phase)");
    return static_cast<double>(milliseconds) * 1e-3;
  }

 private:
  cudaStream_t stream_ = nullptr;
  cudaEvent_t start_ = nullptr;
  cudaEvent_t stop_ = nullptr;
};
#endif

}  // namespace

std::unique_ptr<PhaseTimer> make_phase_timer(Backend backend, Stream stream) {
  switch (backend) {
    case Backend::cpu:
      return std::make_unique<WallClockTimer>();
    case Backend::cuda:
#if defined(SWITCHYARD_WITH_CUDA)
      return std::make_unique<CudaEventTimer>(stream);
#else
      (void)stream;
      throw Unsupported("switchyard-bench: built without the CUDA backend, so there is no CUDA event timer");
#endif
  }
  throw Unsupported("switchyard-bench: no timer for this backend");
}

}  // namespace switchyard::bench
