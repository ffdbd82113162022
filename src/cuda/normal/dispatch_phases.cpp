#include "cuda/normal/dispatch_phases.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <string>

#include "core/stderr_line.hpp"
#include "device/cuda_check.hpp"
#include "switchyard/errors.hpp"

namespace switchyard::cuda {

namespace {

DispatchPhases::Record record_from_environment() {
  const char* text = std::getenv("SWITCHYARD_NORMAL_PHASES");
  if (text == nullptr || *text == '\0') return DispatchPhases::Record::off;
  const std::string value = text;
  if (value == "0") return DispatchPhases::Record::off;
  if (value == "1") return DispatchPhases::Record::events_and_stamps;
  if (value == "stamps") return DispatchPhases::Record::stamps;
  throw InvalidArgument(
      "SWITCHYARD_NORMAL_PHASES: expected 0, 1 (record a fresh dispatch's phases with events and clock "
      "stamps) "
      "or stamps (the clock stamps alone), got '" +
      value + "'");
}

// The steps printed: each the time between two marks.
struct Step {
  const char* name;
  DispatchPhaseMark from, to;
};
constexpr Step kSteps[] = {
    {"layout", kDispatchStarted, kDispatchLaidOut},
    {"notify", kDispatchLaidOut, kDispatchNotified},
    {"count copies", kDispatchNotified, kDispatchCountsCopied},
    {"host turnaround", kDispatchCountsCopied, kDispatchRowsQueued},
    {"rows moved", kDispatchRowsQueued, kDispatchRowsMoved},
    {"total", kDispatchStarted, kDispatchRowsMoved},
};

}  // namespace

constexpr size_t kStampBytes =
    static_cast<size_t>(DispatchPhases::kMaxPhaseSamples) * kDispatchStamps * sizeof(uint64_t);

DispatchPhases::DispatchPhases(int rank)
    : rank_(rank), record_(record_from_environment()), on_(record_ != Record::off) {
  if (!on_) return;
  SY_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&device_stamps_), kStampBytes));
  SY_CUDA_CHECK(cudaMemset(device_stamps_, 0, kStampBytes));
}

DispatchPhases::~DispatchPhases() {
  if (!on_) return;
  if (record_ == Record::events_and_stamps) {
    print();
  } else if (cudaDeviceSynchronize() != cudaSuccess) {
    // Without events nothing else waited for the sampled kernels; a failed device has no stamps to give.
    std::fprintf(stderr, "normal phases: rank %d's device failed: %s\n", rank_,
                 cudaGetErrorString(cudaGetLastError()));
  }
  print_stamps();
  for (Sample& sample : samples_) {
    for (int i = 0; i < sample.marked; ++i) {
      if (sample.events[i] != nullptr) cudaEventDestroy(sample.events[i]);
    }
  }
  cudaFree(device_stamps_);
}

uint64_t* DispatchPhases::stamps() const {
  if (!open_) return nullptr;
  return device_stamps_ + (samples_.size() - 1) * kDispatchStamps;
}

void DispatchPhases::host_stamp(DispatchHostStamp which) {
  if (!open_) return;
  timespec now{};
  clock_gettime(CLOCK_REALTIME, &now);
  samples_.back().host[which] = static_cast<uint64_t>(now.tv_sec) * 1000000000ull + now.tv_nsec;
}

void DispatchPhases::begin(cudaStream_t stream) {
  open_ = false;
  if (!on_ || samples_.size() >= static_cast<size_t>(kMaxPhaseSamples)) return;
  // A captured call's events would be recorded by its graph's replays, not here: not sampled.
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  SY_CUDA_CHECK(cudaStreamIsCapturing(stream, &capture));
  if (capture != cudaStreamCaptureStatusNone) return;
  samples_.emplace_back();
  open_ = true;
  mark(kDispatchStarted, stream);
}

void DispatchPhases::mark(DispatchPhaseMark mark, cudaStream_t stream) {
  if (!open_) return;
  Sample& sample = samples_.back();
  // Marks come in order; one out of order (a step skipped by an exception) ends the sample unfinished.
  if (sample.marked != mark) {
    open_ = false;
    return;
  }
  sample.marked = mark + 1;
  if (record_ == Record::events_and_stamps) {
    SY_CUDA_CHECK(cudaEventCreate(&sample.events[mark]));
    SY_CUDA_CHECK(cudaEventRecord(sample.events[mark], stream));
  }
  if (mark == kDispatchRowsMoved) open_ = false;
}

void DispatchPhases::print() const {
  std::vector<std::vector<float>> times(std::size(kSteps));
  for (const Sample& sample : samples_) {
    if (sample.marked != kDispatchPhaseMarks) continue;
    if (cudaEventSynchronize(sample.events[kDispatchRowsMoved]) != cudaSuccess) {
      std::fprintf(stderr, "normal phases: rank %d's events could not be read: %s\n", rank_,
                   cudaGetErrorString(cudaGetLastError()));
      return;
    }
    for (size_t step = 0; step < std::size(kSteps); ++step) {
      float ms = 0;
      if (cudaEventElapsedTime(&ms, sample.events[kSteps[step].from], sample.events[kSteps[step].to]) ==
          cudaSuccess) {
        times[step].push_back(ms * 1000.0f);
      }
    }
  }
  if (times.back().empty()) return;
  std::string line = "normal phases: rank " + std::to_string(rank_) + ", " +
                     std::to_string(times.back().size()) + " fresh dispatches, median us:";
  for (size_t step = 0; step < std::size(kSteps); ++step) {
    std::vector<float>& values = times[step];
    if (values.empty()) continue;
    std::nth_element(values.begin(), values.begin() + values.size() / 2, values.end());
    char figure[32];
    std::snprintf(figure, sizeof(figure), " %.1f", values[values.size() / 2]);
    line += std::string(step == 0 ? " " : ", ") + kSteps[step].name + figure;
  }
  detail::write_stderr_line(line);
}

void DispatchPhases::print_stamps() const {
  std::vector<uint64_t> stamps(static_cast<size_t>(kMaxPhaseSamples) * kDispatchStamps);
  // After print(), which waited for the last sampled call's events, or the device's synchronisation: every
  // sampled kernel has run.
  if (cudaMemcpy(stamps.data(), device_stamps_, kStampBytes, cudaMemcpyDeviceToHost) != cudaSuccess) {
    std::fprintf(stderr, "normal phases: rank %d's stamps could not be read: %s\n", rank_,
                 cudaGetErrorString(cudaGetLastError()));
    return;
  }
  for (size_t sample = 0; sample < samples_.size(); ++sample) {
    if (samples_[sample].marked != kDispatchPhaseMarks) continue;
    const uint64_t* at = stamps.data() + sample * kDispatchStamps;
    const std::array<uint64_t, kDispatchHostStamps>& host = samples_[sample].host;
    std::string line = "normstamp " + std::to_string(sample) + " " + std::to_string(rank_);
    for (const DispatchStamp stamp :
         {kStampNotifyEntered, kStampPublished, kStampExchanged, kStampNotifyDone, kStampRowsStarted}) {
      line += " " + std::to_string(at[stamp]);
    }
    for (const DispatchHostStamp stamp : {kHostCountsSeen, kHostRowsLaunched})
      line += " " + std::to_string(host[stamp]);
    detail::write_stderr_line(line);
  }
}

}  // namespace switchyard::cuda
