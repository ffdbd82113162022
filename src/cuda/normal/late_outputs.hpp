#pragma once
// The host's side of common/late_outputs.hpp: the ring of slots through which a fresh in-place dispatch's
// gather, launched before the host knows its output sizes, learns its output addresses. One per engine.
#include <cuda_runtime.h>

#include <cstdint>

#include "common/late_outputs.hpp"

namespace switchyard::cuda {

struct ReceivedRows;

// SWITCHYARD_NORMAL_ROWS: when a fresh in-place dispatch launches its gather. after_counts (the default,
// unset or empty): once the host has the counts and the outputs; early: right behind the notify, its outputs
// posted once the host has made them (LateOutputs). Anything else is refused by name. NOTES (session 35, one
// H100, 8 processes): early was slower everywhere (128 tokens: the fresh dispatch 108.9 -> 142.7 us; 4096:
// +10 %), its gathers' blocks waiting on the host while the ranks' grids contend for the SMs; it stays for
// the study of that and for its withdrawal (a host failing after the counts lets its peers finish), which
// only it has.
enum class RowsLaunch { early, after_counts };
RowsLaunch rows_launch_from_environment();

class LateOutputs {
 public:
  explicit LateOutputs(int rank);  // `rank`: for messages
  ~LateOutputs();
  LateOutputs(const LateOutputs&) = delete;
  LateOutputs& operator=(const LateOutputs&) = delete;

  // One call's slot: where its gather waits (the device's address) and for which tag.
  struct Ticket {
    common::LateOutputsSlot* device_slot;
    int32_t tag;
  };

  // The next call's slot, once the gather that read it last is done with it: waits up to `timeout_ns` for
  // that (with 16 slots it never has to), else throws an Error naming the rank.
  Ticket next(uint64_t timeout_ns);
  // Posts `rows`' addresses and row count to the ticket's gather.
  void give(const Ticket& ticket, const ReceivedRows& rows);
  // Tells the ticket's gather that no outputs will come: it pulls nothing and closes the call.
  void withdraw(const Ticket& ticket);

 private:
  common::LateOutputsSlot& host_slot(const Ticket& ticket) const;

  int rank_;
  common::LateOutputsSlot* host_slots_ = nullptr;    // [kLateOutputSlots], page-locked and mapped
  common::LateOutputsSlot* device_slots_ = nullptr;  // the same memory, as the device addresses it
  int32_t tag_ = 0;
};

}  // namespace switchyard::cuda
