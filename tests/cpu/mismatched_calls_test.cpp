// Ranks that make the same call with different shapes (here: rank 0 with half the experts of the
// others) are refused on every rank with an InvalidArgument that says so, long before the timeout,
// and no output is written. Before the call digest, symmetric returned garbage on every rank and
// low_latency waited for signals that never came.
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "support/expert_major_cases.hpp"
#include "support/test_seed.hpp"
#include "switchyard/buffer.hpp"
#include "switchyard/errors.hpp"
#include "workload/workload.hpp"

namespace switchyard {
namespace {

namespace em = testing::expert_major;

// NOTES: long, so that a refusal that only came by timing out shows as a failure of the deadline.
constexpr double kTimeoutSeconds = 30.0;
constexpr double kDeadlineSeconds = 10.0;

struct Outcome {
  std::string message;  // empty: the call returned
  bool invalid_argument = false;
  bool outputs_untouched = false;
};

// What `call` did: returned, or threw (an InvalidArgument, or something else).
Outcome outcome_of(const std::function<void()>& call) {
  Outcome outcome;
  try {
    call();
  } catch (const InvalidArgument& error) {
    outcome.message = error.what();
    outcome.invalid_argument = true;
  } catch (const std::exception& error) {
    outcome.message = std::string("not an InvalidArgument: ") + error.what();
  }
  return outcome;
}

// Every rank refused its call with an InvalidArgument (whose message contains `says`), before the
// deadline, and wrote nothing (`written`: what would have been).
void expect_refused_on_every_rank(const std::vector<Outcome>& outcomes, double seconds,
                                  const std::string& says, const std::string& written) {
  EXPECT_LT(seconds, kDeadlineSeconds) << "the refusal waited for a timeout";
  for (size_t rank = 0; rank < outcomes.size(); ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank) + ": " + outcomes[rank].message);
    EXPECT_TRUE(outcomes[rank].invalid_argument);
    EXPECT_NE(outcomes[rank].message.find(says), std::string::npos);
    EXPECT_TRUE(outcomes[rank].outputs_untouched) << written << " was written";
  }
}

class MismatchedCalls : public ::testing::TestWithParam<Engine> {};

TEST_P(MismatchedCalls, RankZeroWithHalfTheExpertsIsRefusedOnEveryRank) {
  const Engine engine = GetParam();
  const int ranks = 4;
  const em::Case full = em::make("full", ranks, {6, 6, 6, 6}, 6, 2, 48);
  const em::Case half = em::make("half", ranks, {6, 6, 6, 6}, 6, 2, 24);
  const uint64_t seed = testing::seed_for(::testing::UnitTest::GetInstance()->current_test_info()->name());
  SCOPED_TRACE("seed " + std::to_string(seed));
  const em::Expected expected_full = em::expected_for(full, seed);
  const em::Expected expected_half = em::expected_for(half, seed);

  std::mutex mutex;
  std::vector<Outcome> outcomes(ranks);
  const auto start = std::chrono::steady_clock::now();
  em::with_buffers(
      full, em::regions_of(engine),
      [&](Group& group, Buffer& buffer) {
        const int rank = group.rank();
        const em::Case& mine = rank == 0 ? half : full;
        const em::Expected& expected = rank == 0 ? expected_half : expected_full;
        em::PoisonedOutputs out = em::poisoned_outputs(mine, 6);
        LowLatencyDispatchArgs args = em::dispatch_args(mine, expected.data[rank]);
        out.attach(args);
        Outcome outcome = outcome_of([&] { em::dispatch_with(engine, buffer, args); });
        outcome.outputs_untouched = true;
        for (const Tensor& tensor : {out.recv_x, out.recv_count}) {
          outcome.outputs_untouched = outcome.outputs_untouched && em::all_poison(tensor);
        }
        std::lock_guard<std::mutex> lock(mutex);
        outcomes[rank] = outcome;
      },
      kTimeoutSeconds);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  expect_refused_on_every_rank(outcomes, seconds, "expected every rank to call with the same shape",
                               "recv_x or recv_count");
}

// The combine's options that change what travels are part of its digest: rank 0 asking for LogFMT
// while the others do not is refused on every rank, before the timeout, writing nothing.
TEST(MismatchedCombines, LogfmtOnOneRankOnlyIsRefusedOnEveryRank) {
  const int ranks = 3;
  const em::Case c = em::make("logfmt_mismatch", ranks, {5, 5, 5}, 5, 2, 6);
  const uint64_t seed = testing::seed_for("mismatched/logfmt");
  SCOPED_TRACE("seed " + std::to_string(seed));
  const em::Expected expected = em::expected_for(c, seed);
  std::mutex mutex;
  std::vector<Outcome> outcomes(ranks);
  const auto start = std::chrono::steady_clock::now();
  em::with_buffers(
      c, em::regions_of(Engine::low_latency),
      [&](Group& group, Buffer& buffer) {
        const int rank = group.rank();
        const workload::RankData& data = expected.data[rank];
        const LowLatencyDispatchResult dispatched = buffer.low_latency_dispatch(em::dispatch_args(c, data));
        em::PoisonedOutputs out = em::poisoned_outputs(c, 5);
        LowLatencyCombineArgs args = em::combine_args(data, dispatched.handle, expected.ys[rank]);
        out.attach(args);
        args.use_logfmt = rank == 0;
        Outcome outcome = outcome_of([&] { buffer.low_latency_combine(args); });
        outcome.outputs_untouched = em::all_poison(out.combined_x);
        std::lock_guard<std::mutex> lock(mutex);
        outcomes[rank] = outcome;
      },
      kTimeoutSeconds);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  expect_refused_on_every_rank(outcomes, seconds, "expected every rank to call with the same shape",
                               "combined_x");
}

INSTANTIATE_TEST_SUITE_P(Engines, MismatchedCalls, ::testing::Values(Engine::low_latency, Engine::symmetric),
                         [](const ::testing::TestParamInfo<Engine>& info) {
                           return std::string(engine_name(info.param));
                         });

}  // namespace
}  // namespace switchyard
