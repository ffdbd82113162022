// switchyard-bench's extra rows of the expert-major engines, driven through a scripted session on
// the cpu clock: the hook split's order of calls (each half its own phase after a cache eviction,
// every iteration into poisoned outputs and checked), and the graph replays' refusal, agreed by every rank,
// when the capture cannot happen (no CUDA graph on the host's stream); and the phase clock with its start
// hold off (--start barrier, every cpu run), which holds and counts nothing.
#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "engine_session.hpp"
#include "graph_replay.hpp"
#include "hook_split.hpp"
#include "phase_clock.hpp"
#include "start_hold.hpp"
#include "switchyard/errors.hpp"
#include "switchyard/group.hpp"
#include "timer.hpp"

namespace switchyard::bench {
namespace {

// Records every call the runner's helpers make, in order.
class ScriptedSession final : public EngineSession {
 public:
  void poison_outputs() override { calls.push_back("poison"); }
  void prepare(int iteration) override { calls.push_back("prepare " + std::to_string(iteration)); }
  void dispatch(int /*iteration*/) override { calls.push_back("dispatch"); }
  void expert(int /*iteration*/) override { calls.push_back("expert"); }
  void combine(int /*iteration*/) override { calls.push_back("combine"); }
  Difference first_difference() override { return {}; }
  void dump(DumpDirectory& /*dump*/) override {}
  std::string hook_split_unsupported() const override { return ""; }
  void dispatch_send(int /*iteration*/) override { calls.push_back("dispatch_send"); }
  void combine_send(int /*iteration*/) override { calls.push_back("combine_send"); }
  void receive() override { calls.push_back("receive"); }
  std::string graph_capture_unsupported() const override { return ""; }

  std::vector<std::string> calls;
};

TEST(BenchHookSplit, TimesEachHalfAsItsOwnPhaseAndChecksEveryIterationIntoPoisonedOutputs) {
  constexpr int kWarmup = 1, kIters = 2;
  std::vector<HookSplitSeconds> seconds(2);
  std::vector<std::vector<std::string>> calls(2);
  std::vector<int> next(2);
  run_ranks(2, [&](Group& group) {
    const int rank = group.rank();
    ScriptedSession session;
    std::unique_ptr<PhaseTimer> timer = make_phase_timer(Backend::cpu, nullptr);
    int evictions = 0;
    PhaseClock clock(
        group, *timer, [] {}, [&] { ++evictions; });
    next[rank] = run_hook_split(
        session, clock, /*first_iteration=*/5, kWarmup, kIters, seconds[rank], [](const std::string&) {},
        [&](const std::string& round) { session.calls.push_back("check " + round); });
    // The cache is evicted before every timed half, not before the warmup's.
    EXPECT_EQ(evictions, 4 * kIters);
    calls[rank] = session.calls;
  });
  const std::vector<std::string> iteration = {"dispatch_send", "receive", "expert", "combine_send",
                                              "receive"};
  std::vector<std::string> expected;
  for (int i = 0; i < kWarmup + kIters; ++i) {
    expected.push_back("poison");
    expected.push_back("prepare " + std::to_string(5 + i));
    expected.insert(expected.end(), iteration.begin(), iteration.end());
    expected.push_back(i < kWarmup ? "check hook split warmup " + std::to_string(i + 1) + "/1"
                                   : "check hook split iteration " + std::to_string(i - kWarmup + 1) + "/2");
  }
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_EQ(calls[rank], expected) << "rank " << rank;
    EXPECT_EQ(next[rank], 5 + kWarmup + kIters);
    // One time per timed iteration and half; warmup is untimed.
    for (const std::vector<double>* half : {&seconds[rank].dispatch_send, &seconds[rank].dispatch_recv,
                                            &seconds[rank].combine_send, &seconds[rank].combine_recv}) {
      ASSERT_EQ(half->size(), static_cast<size_t>(kIters));
      for (double value : *half) EXPECT_GE(value, 0.0);
    }
  }
}

// The host's stream cannot be captured (a build without CUDA refuses at once; with CUDA, the legacy
// stream cannot capture): every rank reports the same reason and nothing is replayed.
// --start barrier (and every cpu run): the clock of before, with nothing held and nothing counted.
TEST(BenchPhaseClock, AStartHoldThatIsOffHoldsNothingAndCountsNothing) {
  run_ranks(2, [&](Group& group) {
    std::unique_ptr<PhaseTimer> timer = make_phase_timer(Backend::cpu, nullptr);
    StartHold start_hold(group, nullptr, StartMode::barrier, kDefaultStartAheadMicroseconds);
    EXPECT_FALSE(start_hold.on());
    int calls = 0;
    PhaseClock clock(
        group, *timer, [] {}, [] {}, &start_hold);
    EXPECT_GE(clock.time([&] { ++calls; }), 0.0);
    EXPECT_GE(clock.time([&] { ++calls; }, PhaseClock::Cache::keep), 0.0);
    EXPECT_EQ(calls, 2);
    EXPECT_EQ(clock.start_holds(), 0);
    EXPECT_EQ(clock.start_holds_missed(), 0);
    EXPECT_FALSE(start_hold.released());
    EXPECT_EQ(start_hold.held_seconds(), 0.0);
  });
}

// SWITCHYARD_BENCH_START_EVENT, the timer start's A/B knob: unset and release_mark give the default (session
// 38), before_hold and after_hold the orders of sessions 37 and before; anything else is an error naming the
// variable and what it got.
TEST(BenchStartHold, TheStartTimingComesFromItsVariableAndABadValueIsNamed) {
  const char* saved = std::getenv("SWITCHYARD_BENCH_START_EVENT");
  const std::string restore = saved != nullptr ? saved : "";
  unsetenv("SWITCHYARD_BENCH_START_EVENT");
  EXPECT_EQ(start_timing_from_environment(), StartTiming::release_mark);
  for (StartTiming timing : {StartTiming::release_mark, StartTiming::before_hold, StartTiming::after_hold}) {
    setenv("SWITCHYARD_BENCH_START_EVENT", start_timing_name(timing), 1);
    EXPECT_EQ(start_timing_from_environment(), timing) << start_timing_name(timing);
  }
  EXPECT_STREQ(start_timing_name(StartTiming::before_hold), "before_hold");
  setenv("SWITCHYARD_BENCH_START_EVENT", "later", 1);
  try {
    start_timing_from_environment();
    ADD_FAILURE() << "a bad value was taken";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("SWITCHYARD_BENCH_START_EVENT"), std::string::npos)
        << error.what();
    EXPECT_NE(std::string(error.what()).find("'later'"), std::string::npos) << error.what();
  }
  if (saved != nullptr) {
    setenv("SWITCHYARD_BENCH_START_EVENT", restore.c_str(), 1);
  } else {
    unsetenv("SWITCHYARD_BENCH_START_EVENT");
  }
}

TEST(BenchGraphReplay, AFailedCaptureSkipsTheReplaysOnEveryRankWithOneReason) {
  std::vector<std::string> reasons(3);
  std::vector<GraphReplaySeconds> seconds(3);
  std::vector<std::vector<std::string>> calls(3);
  run_ranks(3, [&](Group& group) {
    const int rank = group.rank();
    ScriptedSession session;
    std::unique_ptr<PhaseTimer> timer = make_phase_timer(Backend::cpu, nullptr);
    PhaseClock clock(group, *timer, [] {});
    reasons[rank] = run_graph_replays(
        session, clock, group, /*stream=*/nullptr, 0, 1, 2, seconds[rank], [](const std::string&) {},
        [&](const std::string&) { session.calls.push_back("check"); });
    calls[rank] = session.calls;
  });
  for (int rank = 0; rank < 3; ++rank) {
    EXPECT_EQ(reasons[rank], reasons[0]);
    EXPECT_TRUE(seconds[rank].dispatch.empty() && seconds[rank].combine.empty());
    // Whatever the capture recorded, nothing ran after it: no poisoning, no check.
    for (const std::string& call : calls[rank]) {
      EXPECT_NE(call, "poison");
      EXPECT_NE(call, "check");
    }
  }
  EXPECT_NE(reasons[0].find("capture failed on 3 of 3 ranks; rank 0: "), std::string::npos) << reasons[0];
}

}  // namespace
}  // namespace switchyard::bench
