// switchyard-bench's ranks as processes (--ranks-as processes): the group the forked ranks share
// (allgather, barrier) and what the parent gets back when a rank succeeds, throws or dies.
#include <gtest/gtest.h>

#include <csignal>
#include <exception>
#include <string>
#include <vector>

#include "forked_ranks.hpp"
#include "switchyard/errors.hpp"

namespace switchyard::bench {
namespace {

constexpr double kWaitSeconds = 20;

std::string failure_text(std::exception_ptr failure) {
  try {
    std::rethrow_exception(failure);
  } catch (const std::exception& error) {
    return std::string("failed: ") + error.what();
  }
}

TEST(BenchForkedRanks, EveryRankSeesEveryContributionInRankOrderAndAnswersItsParent) {
  constexpr int kRanks = 4;
  const std::vector<std::string> answers = run_forked_ranks(
      kRanks, kWaitSeconds,
      [](Group& group) {
        std::string seen;
        for (int round = 0; round < 3; ++round) {  // slots are reused from one allgather to the next
          const std::string mine = "r" + std::to_string(group.rank()) + "." + std::to_string(round);
          for (const Bytes& bytes : group.allgather(Bytes(mine.begin(), mine.end())))
            seen += std::string(bytes.begin(), bytes.end()) + " ";
          group.barrier();
        }
        return std::to_string(group.size()) + ": " + seen;
      },
      failure_text);
  ASSERT_EQ(answers.size(), static_cast<size_t>(kRanks));
  for (const std::string& answer : answers) {
    EXPECT_EQ(answer, "4: r0.0 r1.0 r2.0 r3.0 r0.1 r1.1 r2.1 r3.1 r0.2 r1.2 r2.2 r3.2 ");
  }
}

TEST(BenchForkedRanks, ARankThatThrowsOrDiesFailsItsPeersWaitsInsteadOfHangingThem) {
  for (const bool dies : {false, true}) {
    const std::vector<std::string> answers = run_forked_ranks(
        3, kWaitSeconds,
        [dies](Group& group) -> std::string {
          if (group.rank() == 1) {
            if (dies) std::raise(SIGKILL);
            throw Error("rank 1 gives up");
          }
          group.barrier();  // never completes: rank 1 is gone
          return "passed the barrier";
        },
        failure_text);
    ASSERT_EQ(answers.size(), 3u);
    const std::string why = dies ? "killed by signal 9" : "rank 1 gives up";
    EXPECT_NE(answers[1].find(why), std::string::npos) << answers[1];
    for (int rank : {0, 2}) {
      EXPECT_EQ(answers[rank].rfind("failed: switchyard-bench: another rank failed: ", 0), 0u)
          << answers[rank];
      EXPECT_NE(answers[rank].find(why), std::string::npos) << answers[rank];
    }
  }
}

TEST(BenchForkedRanks, AProbeReturnsItsAnswerOrRethrowsWhatWentWrong) {
  EXPECT_EQ(run_in_forked_child([] { return std::string("42"); }), "42");
  try {
    run_in_forked_child([]() -> std::string { throw Error("no device"); });
    FAIL() << "expected the child's error";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("no device"), std::string::npos) << error.what();
  }
}

}  // namespace
}  // namespace switchyard::bench
