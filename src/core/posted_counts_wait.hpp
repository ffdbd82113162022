#pragma once
// The host's wait for a post in a host-mapped mailbox (common/posted_counts.hpp): spin on the tag, and ask
// the producer now and then whether it has finished, so that a post that will never come ends the wait
// instead of hanging it. Host-only and device-agnostic: the CUDA engine passes "the stream is idle" as
// `producer_done` (cuda/normal/dispatch_counts.cpp); tests pass a thread's flag.
#include <chrono>
#include <cstdint>
#include <functional>

#include "common/posted_counts.hpp"

namespace switchyard::detail {

enum class PostWait { posted, never_posted };

struct PostWaitPolicy {
  // NOTES: a producer query (cudaStreamQuery) takes the driver's lock and a microsecond or two, so it is
  // asked every so often rather than on every spin; often enough that a post that will never come (a kernel
  // that could not start) is noticed at once.
  std::chrono::microseconds query_interval{50};
  // After this long the wait yields its core between looks: the producer is behind the caller's earlier work,
  // and a framework's other threads may want the core.
  std::chrono::microseconds spin_before_yielding{1000};
};

// The default policy, with SWITCHYARD_COUNTS_SPIN_US (microseconds, an integer >= 0) as spin_before_yielding
// when set: an A/B knob for how soon a long wait starts giving its core away (bench/NOTES.md, session 38: a
// fresh dispatch whose host waited 8 ms for its counts read ~9.5 us slower than one that waited 1 ms). Throws
// InvalidArgument naming the variable for any other value.
PostWaitPolicy post_wait_policy_from_environment();

// Returns once `posted`'s tag is `tag` (acquire: the counts and status written before it are visible), or
// with never_posted when `producer_done()` says the producer finished and the tag is still not there. Throws
// what `producer_done` throws.
PostWait wait_for_post(const common::PostedCounts& posted, int32_t tag,
                       const std::function<bool()>& producer_done, const PostWaitPolicy& policy = {});

}  // namespace switchyard::detail
