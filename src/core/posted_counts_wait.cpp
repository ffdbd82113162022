#include "core/posted_counts_wait.hpp"

#include <cstdlib>
#include <string>
#include <thread>

#include "common/atomics.hpp"
#include "switchyard/errors.hpp"

namespace switchyard::detail {

namespace {

void relax_cpu() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

}  // namespace

PostWaitPolicy post_wait_policy_from_environment() {
  PostWaitPolicy policy;
  const char* text = std::getenv("SWITCHYARD_COUNTS_SPIN_US");
  if (text == nullptr || *text == '\0') return policy;
  const std::string value = text;
  const bool digits = value.size() <= 9 && value.find_first_not_of("0123456789") == std::string::npos;
  if (!digits) {
    throw InvalidArgument(
        "SWITCHYARD_COUNTS_SPIN_US: expected the microseconds a fresh dispatch's host spins on its counts "
        "before it yields its core between looks (an integer from 0 to 999999999), got '" +
        value + "'");
  }
  policy.spin_before_yielding = std::chrono::microseconds(std::stoll(value));
  return policy;
}

PostWait wait_for_post(const common::PostedCounts& posted, int32_t tag,
                       const std::function<bool()>& producer_done, const PostWaitPolicy& policy) {
  const auto start = std::chrono::steady_clock::now();
  auto next_query = start + policy.query_interval;
  for (uint32_t spins = 1; common::ld_acquire_sys(posted.tag()) != tag; ++spins) {
    if (spins % 64 != 0) {
      relax_cpu();
      continue;
    }
    const auto now = std::chrono::steady_clock::now();
    if (now - start > policy.spin_before_yielding) std::this_thread::yield();
    if (now < next_query) continue;
    next_query = now + policy.query_interval;
    if (!producer_done()) continue;
    // The producer has finished, so its writes are visible: the post is there, or it never will be.
    return common::ld_acquire_sys(posted.tag()) == tag ? PostWait::posted : PostWait::never_posted;
  }
  return PostWait::posted;
}

}  // namespace switchyard::detail
