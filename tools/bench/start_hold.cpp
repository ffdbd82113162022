#include "start_hold.hpp"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>

#include "cuda_check.hpp"
#include "switchyard/errors.hpp"

#if defined(SWITCHYARD_WITH_CUDA)
#include "cuda/timing/gpu_timer.hpp"
#endif

namespace switchyard::bench {
namespace {

// Room for a slow host (a rank descheduled, the moment's allgather late) before a stream gives up
// waiting; that phase's time is then wrong, but the run goes on.
constexpr uint64_t kLimitFactor = 10;
constexpr uint64_t kLimitSlackNs = 100'000'000;

#if defined(SWITCHYARD_WITH_CUDA)
constexpr bool kHasGpuClock = true;
uint64_t read_gpu_clock_ns() {
  return cuda::gpu_timer_now_ns();
}
#else
// Never called: the constructor refuses StartMode::timer here (and the options before it).
constexpr bool kHasGpuClock = false;
uint64_t read_gpu_clock_ns() {
  return 0;
}
#endif

uint64_t nanoseconds_of(double microseconds) {
  return static_cast<uint64_t>(std::llround(microseconds * 1e3));
}

Bytes bytes_of(uint64_t value) {
  Bytes bytes(sizeof(value));
  std::memcpy(bytes.data(), &value, sizeof(value));
  return bytes;
}

uint64_t value_of(const Bytes& bytes) {
  if (bytes.size() != sizeof(uint64_t)) {
    throw Error("switchyard-bench: --start timer: rank 0 shared " + std::to_string(bytes.size()) +
                " bytes for the start moment, expected " + std::to_string(sizeof(uint64_t)));
  }
  uint64_t value = 0;
  std::memcpy(&value, bytes.data(), sizeof(value));
  return value;
}

}  // namespace

StartTiming start_timing_from_environment() {
  const char* value = std::getenv("SWITCHYARD_BENCH_START_EVENT");
  if (value == nullptr || *value == '\0') return StartTiming::release_mark;
  for (StartTiming timing : {StartTiming::release_mark, StartTiming::before_hold, StartTiming::after_hold}) {
    if (std::strcmp(value, start_timing_name(timing)) == 0) return timing;
  }
  throw Error(
      "switchyard-bench: SWITCHYARD_BENCH_START_EVENT: expected release_mark (the default), before_hold or "
      "after_hold, got '" +
      std::string(value) + "'");
}

const char* start_timing_name(StartTiming timing) {
  switch (timing) {
    case StartTiming::release_mark:
      return "release_mark";
    case StartTiming::before_hold:
      return "before_hold";
    case StartTiming::after_hold:
      return "after_hold";
  }
  return "?";
}

#if defined(SWITCHYARD_WITH_CUDA)
struct StartHold::Marks {
  cuda::HoldMarks marks;
};
#else
struct StartHold::Marks {};
#endif

StartHold::StartHold(Group& group, Stream stream, StartMode mode, double ahead_us)
    : group_(group),
      stream_(stream),
      mode_(mode),
      ahead_ns_(nanoseconds_of(ahead_us)),
      limit_ns_(kLimitFactor * ahead_ns_ + kLimitSlackNs),
      timing_(start_timing_from_environment()) {
  if (on() && !kHasGpuClock) {
    throw Unsupported(
        "switchyard-bench: --start timer: built without the CUDA backend, so there is no GPU clock");
  }
  if (on()) marks_ = std::make_unique<Marks>();
}

StartHold::~StartHold() = default;

uint64_t StartHold::agree_on_moment() {
  // One reading for every rank: ranks reading the clock each would start as far apart as they read it.
  const Bytes mine = group_.rank() == 0 ? bytes_of(read_gpu_clock_ns() + ahead_ns_) : Bytes{};
  return value_of(group_.allgather(mine).front());
}

void StartHold::hold(const std::function<void()>& start_event) {
  if (!on()) {
    start_event();
    return;
  }
  // The moment first: the start event must not wait for the ranks' agreement (a host collective).
  const uint64_t moment = agree_on_moment();
#if defined(SWITCHYARD_WITH_CUDA)
  // No hold of these marks is in flight: the phase before was synchronised.
  marks_->marks.clear();
  if (timing_ == StartTiming::after_hold) {
    cuda::enqueue_gpu_timer_wait(cuda_stream(stream_), moment, limit_ns_, marks_->marks.device_marks());
    start_event();
    return;
  }
  start_event();
  cuda::enqueue_gpu_timer_wait(cuda_stream(stream_), moment, limit_ns_, marks_->marks.device_marks());
#else
  (void)moment;
  start_event();
#endif
}

void StartHold::finish() {
#if defined(SWITCHYARD_WITH_CUDA)
  if (on() && timing_ == StartTiming::release_mark) {
    cuda::enqueue_gpu_timer_mark(cuda_stream(stream_), marks_->marks.device_end_mark());
  }
#endif
}

double StartHold::phase_seconds(double event_seconds) const {
  if (!on() || timing_ == StartTiming::after_hold) return event_seconds;
  if (timing_ == StartTiming::before_hold) return event_seconds - held_seconds();
  const double seconds = seconds_since_release();
  if (seconds <= 0) {
    throw Error("switchyard-bench: --start timer: rank " + std::to_string(group_.rank()) +
                ": the phase's end mark did not follow its hold's release on the GPU's clock");
  }
  return seconds;
}

bool StartHold::released() const {
#if defined(SWITCHYARD_WITH_CUDA)
  if (on()) return marks_->marks.released();
#endif
  return false;
}

double StartHold::held_seconds() const {
#if defined(SWITCHYARD_WITH_CUDA)
  if (on()) return static_cast<double>(marks_->marks.held_ns()) * 1e-9;
#endif
  return 0;
}

double StartHold::seconds_since_release() const {
#if defined(SWITCHYARD_WITH_CUDA)
  if (on() && timing_ == StartTiming::release_mark) {
    return static_cast<double>(marks_->marks.since_release_ns()) * 1e-9;
  }
#endif
  return 0;
}

}  // namespace switchyard::bench
