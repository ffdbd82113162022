#pragma once
// The counts a fresh `normal` dispatch posts to the host (SWITCHYARD_NORMAL_COUNTS=poll): its notify kernel
// writes them into page-locked, host-mapped memory and then a tag, and the host polls the tag instead of
// copying the counts back and synchronising the stream (DeepEP's way). The host learns its output sizes as
// soon as the counts exist, not after the kernel has ended and a copy and a stream synchronisation have
// gone by. Shared by the host (the poller, cuda/normal/dispatch_counts.cpp) and the notify kernel.
//
// Words, int32: [tag][status][recv_tokens][expert_counts: local experts]. The kernel writes the counts and
// the status, fences at system scope, and writes the tag last; the host reads the tag (acquire), then the
// rest. The tag is the call's number on this Buffer's engine (never 0), so a post of an earlier call is
// never taken for this one's.
#include "common/host_device.hpp"

namespace switchyard::common {

enum PostedCountsStatus : int32_t {
  kCountsPosted = 0,  // the counts below are this call's
  kCountsGaveUp = 1,  // the kernel stopped before counting (a failed or refused barrier): see the error block
};

struct PostedCounts {
  static constexpr int kHeaderWords = 3;
  int32_t* words;  // [kHeaderWords + local experts], host-mapped (the host's or the device's address)

  // Words to allocate for up to `local_experts` experts.
  SY_HD static constexpr int64_t words_for(int64_t local_experts) { return kHeaderWords + local_experts; }

  SY_HD int32_t* tag() const { return words; }
  SY_HD int32_t* status() const { return words + 1; }
  SY_HD int32_t* recv_tokens() const { return words + 2; }
  SY_HD int32_t* expert_counts() const { return words + kHeaderWords; }
};

// The tag after `tag`: positive, never 0 (0 is what a new allocation holds), wrapping before overflow.
SY_HD int32_t next_posted_counts_tag(int32_t tag) {
  return tag >= 0x7fffffff || tag < 1 ? 1 : tag + 1;
}

}  // namespace switchyard::common
