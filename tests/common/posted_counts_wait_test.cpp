// detail::wait_for_post, the host's half of a fresh normal dispatch's polled counts
// (common/posted_counts.hpp): a post written by another thread (as the notify kernel writes it into
// host-mapped memory) is seen with the counts written before its tag; an earlier call's post is not taken for
// this one's; and a producer that finishes without posting ends the wait instead of hanging it.
#include "core/posted_counts_wait.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "common/atomics.hpp"
#include "switchyard/errors.hpp"

namespace switchyard {
namespace {

using common::PostedCounts;
using detail::PostWait;
using detail::wait_for_post;

constexpr int kLocalExperts = 5;

// The producer's side, as post_counts writes it: the counts, the status, then the tag with release.
void post(const PostedCounts& posted, int32_t tag, int32_t tokens, int32_t status = common::kCountsPosted) {
  *posted.recv_tokens() = tokens;
  for (int expert = 0; expert < kLocalExperts; ++expert) posted.expert_counts()[expert] = tokens + expert;
  *posted.status() = status;
  common::st_release_sys(posted.tag(), tag);
}

TEST(PostedCountsWait, APostFromAnotherThreadIsSeenWithTheCountsBeforeIt) {
  for (int round = 0; round < 200; ++round) {
    std::vector<int32_t> words(PostedCounts::words_for(kLocalExperts), 0);
    const PostedCounts posted{words.data()};
    std::atomic<bool> done{false};
    std::thread producer([&] {
      if (round % 2 == 1) std::this_thread::sleep_for(std::chrono::microseconds(200));
      post(posted, 7, 1000 + round);
      done.store(true, std::memory_order_release);
    });
    const PostWait result = wait_for_post(posted, 7, [&] { return done.load(std::memory_order_acquire); });
    producer.join();
    ASSERT_EQ(result, PostWait::posted) << "round " << round;
    ASSERT_EQ(*posted.recv_tokens(), 1000 + round);
    for (int expert = 0; expert < kLocalExperts; ++expert) {
      ASSERT_EQ(posted.expert_counts()[expert], 1000 + round + expert);
    }
    ASSERT_EQ(*posted.status(), common::kCountsPosted);
  }
}

TEST(PostedCountsWait, AnEarlierCallsPostIsNotTakenForThisOnes) {
  std::vector<int32_t> words(PostedCounts::words_for(kLocalExperts), 0);
  const PostedCounts posted{words.data()};
  post(posted, 6, 11);  // the last call's
  std::atomic<bool> done{false};
  std::thread producer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(3));
    post(posted, 7, 22);
    done.store(true, std::memory_order_release);
  });
  const PostWait result = wait_for_post(posted, 7, [&] { return done.load(std::memory_order_acquire); });
  producer.join();
  EXPECT_EQ(result, PostWait::posted);
  EXPECT_EQ(*posted.recv_tokens(), 22);
}

TEST(PostedCountsWait, AProducerThatEndsWithoutPostingEndsTheWait) {
  std::vector<int32_t> words(PostedCounts::words_for(kLocalExperts), 0);
  const PostedCounts posted{words.data()};
  post(posted, 6, 11);  // only the last call's post is there
  int queries = 0;
  const auto start = std::chrono::steady_clock::now();
  const PostWait result = wait_for_post(posted, 7, [&] { return ++queries >= 3; });
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(result, PostWait::never_posted);
  EXPECT_EQ(queries, 3);
  EXPECT_LT(seconds, 1.0);
}

TEST(PostedCountsWait, APostThatSaysTheProducerGaveUpIsSeenAsAPost) {
  // The notify posts kCountsGaveUp after its error record: the wait ends, and the caller reads the status.
  std::vector<int32_t> words(PostedCounts::words_for(kLocalExperts), 0);
  const PostedCounts posted{words.data()};
  post(posted, 3, 0, common::kCountsGaveUp);
  EXPECT_EQ(wait_for_post(posted, 3, [] { return false; }), PostWait::posted);
  EXPECT_EQ(*posted.status(), common::kCountsGaveUp);
}

TEST(PostedCountsWait, WhatTheProducerQueryThrowsLeavesTheWait) {
  std::vector<int32_t> words(PostedCounts::words_for(kLocalExperts), 0);
  const PostedCounts posted{words.data()};
  EXPECT_THROW(wait_for_post(posted, 1, []() -> bool { throw std::runtime_error("sticky device error"); }),
               std::runtime_error);
}

// SWITCHYARD_COUNTS_SPIN_US, the A/B knob for how long the wait spins before it yields: unset keeps the
// default, a count of microseconds replaces it, anything else is refused by name with what was given.
TEST(PostedCountsWait, TheSpinBeforeYieldingComesFromItsVariableAndABadValueIsNamed) {
  const char* saved = std::getenv("SWITCHYARD_COUNTS_SPIN_US");
  const std::string restore = saved != nullptr ? saved : "";
  unsetenv("SWITCHYARD_COUNTS_SPIN_US");
  EXPECT_EQ(detail::post_wait_policy_from_environment().spin_before_yielding,
            detail::PostWaitPolicy{}.spin_before_yielding);
  setenv("SWITCHYARD_COUNTS_SPIN_US", "20000", 1);
  EXPECT_EQ(detail::post_wait_policy_from_environment().spin_before_yielding,
            std::chrono::microseconds(20000));
  setenv("SWITCHYARD_COUNTS_SPIN_US", "0", 1);
  EXPECT_EQ(detail::post_wait_policy_from_environment().spin_before_yielding, std::chrono::microseconds(0));
  for (const char* bad : {"-5", "2ms", "1e3", "12345678901"}) {
    setenv("SWITCHYARD_COUNTS_SPIN_US", bad, 1);
    try {
      detail::post_wait_policy_from_environment();
      ADD_FAILURE() << "took '" << bad << "'";
    } catch (const InvalidArgument& error) {
      const std::string message = error.what();
      EXPECT_NE(message.find("SWITCHYARD_COUNTS_SPIN_US"), std::string::npos) << message;
      EXPECT_NE(message.find(std::string("'") + bad + "'"), std::string::npos) << message;
    }
  }
  if (saved != nullptr) {
    setenv("SWITCHYARD_COUNTS_SPIN_US", restore.c_str(), 1);
  } else {
    unsetenv("SWITCHYARD_COUNTS_SPIN_US");
  }
}

}  // namespace
}  // namespace switchyard
