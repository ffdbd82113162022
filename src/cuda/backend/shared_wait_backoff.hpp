#pragma once
// How long a warp that waits on a word another warp of its block keeps (device/bounded_wait.cuh,
// wait_shared_at_least: the normal combine's reducing warps on their coordinator's copy of a ring tail)
// sleeps between polls once it has polled for a while: SWITCHYARD_SHARED_WAIT_BACKOFF_NS, in ns (0, the
// default: spin without sleeping, as every wait did before session 44).
//
// Why it is an override, not yet a default: racecheck stops two of the normal suite's one-rank ring cases
// partway through a call (bench/NOTES.md, session 44, c3), and the suspect is 23 warps spinning on shared
// memory with no backoff, which the tool may schedule unfairly; the same sleep may also give the reducing
// warps' loads issue slots on the hardware. Both are measured against 0 before it becomes the default.
#include <cstdint>

namespace switchyard::cuda {

// The most a poll may sleep: __nanosleep's own range (about a millisecond).
constexpr uint32_t kMaxSharedWaitBackoffNs = 1000000;

// The backoff in ns, read from the environment (cuda/backend/environment_tuning.hpp): unset or empty is 0;
// anything but a whole number in 0..kMaxSharedWaitBackoffNs is refused naming the variable.
uint32_t shared_wait_backoff_ns_from_environment();

}  // namespace switchyard::cuda
