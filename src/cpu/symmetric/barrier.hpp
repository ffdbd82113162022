#pragma once
// The cross-rank barrier of the `symmetric` engine (DESIGN.md, "Symmetric engine"), as the CPU
// models it. The CUDA primitive is: a grid sync within the rank; then one thread per peer stores the
// barrier's number into its word in that peer's heap with st.release.sys, and spins with
// ld.acquire.sys until every peer's word in its own heap has reached it; then a grid sync again. On CPU
// a rank is one thread, so both grid syncs are trivially met (the calling thread's program order), and
// the rest is the same.
//
// `signals` (in this rank's heap) holds one monotone word per source rank, which only that source
// writes: the number of the last barrier it arrived at. So nothing is ever reset, a word still below
// b names a rank that did not arrive at barrier b, and a rank that skipped barriers (masked) is
// whole again at the first one it arrives at: every rank numbers its barriers alike, arriving or not.
// A peer is at most one barrier ahead, since it cannot pass barrier b + 1 before this rank arrives
// there. Masked ranks (cpu/symmetric/participants.hpp) are neither signalled nor awaited.
#include <cstdint>

#include "common/sym_heap.hpp"
#include "cpu/symmetric/participants.hpp"

namespace switchyard::cpu {

class SymmetricBarrier {
 public:
  // Arrives, then waits (bounded) for every rank that `masking` reaches; under masking.on_timeout, a
  // rank that does not arrive in time is masked instead of raising. `operation` names the call in a
  // timeout message ("symmetric dispatch", "symmetric combine"). Every rank must call it the same
  // number of times, masked or not.
  void arrive_and_wait(const common::SymHeap& heap, uint64_t* signals, const Masking& masking,
                       double timeout_seconds, const char* operation);

  uint64_t epoch() const { return epoch_; }

 private:
  uint64_t epoch_ = 0;  // barriers this rank has reached (arrived at, or skipped while masked)
};

}  // namespace switchyard::cpu
