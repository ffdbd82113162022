#pragma once
// Where a fresh in-place `normal` dispatch's gather learns its output addresses after it has started
// (SWITCHYARD_NORMAL_ROWS=early, opt-in since measured slower: cuda/normal/late_outputs.hpp;
// docs/normal-in-place.md). The host launches the gather right
// behind the notify, before it knows how many rows it receives; once the notify has posted the counts
// (common/posted_counts.hpp) the host makes the outputs and posts their addresses into one slot of this
// page-locked, host-mapped ring: the fields, then the tag (release). Every block of the gather waits
// (bounded) for the tag (acquire), reads the fields and pulls. Without this the gather was launched only
// after the host had the counts, and under MPS it started ~45 us after the notify's end (bench/NOTES.md,
// session 35); launched early it started later still (57-99 us), so that stayed the default.
//
// One slot per call, in a ring of kLateOutputSlots, so that a kernel of an earlier call never reads a later
// call's addresses; the gather's last block writes `consumed` (the tag it read), and the host reuses a slot
// only once its last reader is done with it. Shared by the host (cuda/normal/late_outputs.cpp) and the
// gather kernel.
#include <cstdint>

#include "common/host_device.hpp"

namespace switchyard::common {

enum LateOutputsStatus : int32_t {
  kOutputsGiven = 1,      // the addresses below are the call's
  kOutputsWithdrawn = 2,  // the host could not make them (its allocator threw, a given output had the wrong
                          // rows): the gather pulls nothing, but still closes the call for its peers
};

struct alignas(64) LateOutputsSlot {
  int32_t tag;       // the call's tag, written last by the host (release); never 0
  int32_t status;    // LateOutputsStatus
  int32_t consumed;  // the tag the gather's last block read (release): the slot is free again
  int32_t unused;
  // Device addresses (0 where the call makes no such output) and the outputs' rows.
  uint64_t recv_x;
  uint64_t recv_x_scales;
  uint64_t recv_topk_idx;
  uint64_t recv_topk_weights;
  int64_t num_output_rows;
};

constexpr int kLateOutputSlots = 16;

// The slot of a call's tag (tags are positive).
SY_HD int late_outputs_slot(int32_t tag) {
  return tag % kLateOutputSlots;
}

}  // namespace switchyard::common
