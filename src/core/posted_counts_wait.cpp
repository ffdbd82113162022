#include "core/posted_counts_wait.hpp"

#include <thread>

#include "common/atomics.hpp"

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
