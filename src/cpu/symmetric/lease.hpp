#pragma once
// What the CPU `symmetric` engine's in-place reads (the pull combine reads peers' y, the zero-copy
// dispatch peers' x) share: the lease that keeps a rank from returning while a peer reads its memory
// (the waits on every rank's word of a call, and whom they skip, are cpu/symmetric/participants.hpp).
//
// A lease word (SymmetricPullRecord::lease, SymmetricSourceRecord::lease) holds the call in its high
// bits, then whether the owner withdrew its memory, then the readers holding it now. A reader reads a
// peer's memory only while it holds a lease of the call; an owner that gives up on a call (a timeout, a
// mismatch) withdraws and waits for the holders to finish (local work, no waits inside a lease) before
// it returns, so the caller may free that memory as soon as the call returns, whatever happened. An
// owner that left out a peer (masked) withdraws too: a peer masked only in the owner's view may still
// read, and must not after the call returns.
#include <cstdint>

#include "common/sym_heap.hpp"
#include "common/symmetric_protocol.hpp"
#include "cpu/symmetric/participants.hpp"

namespace switchyard::cpu {

// A call whose ranks read each other's memory in place (the pull combine, the zero-copy dispatch).
struct InPlaceCall {
  const common::SymHeap* heap;
  common::SymmetricLayout layout;
  uint64_t sequence;  // the call's number among this buffer's symmetric calls, alike on every rank
  double timeout_seconds;
  Masking masking;
};

// The word an owner stores before it announces call `sequence`: open, no readers.
uint64_t open_lease(uint64_t sequence);
// Takes a lease for call `sequence`; false if its owner withdrew it (or moved on).
bool take_lease(uint64_t* lease, uint64_t sequence);
void return_lease(uint64_t* lease);
// The owner gives up on the call: no new lease, and every held one returned, before this returns.
void withdraw_lease(uint64_t* lease);

}  // namespace switchyard::cpu
