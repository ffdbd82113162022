#pragma once
// The cross-rank barrier of the `symmetric` engine (DESIGN.md, "Symmetric engine"), as the CPU
// models it. The CUDA primitive is: a grid sync within the rank; then one thread per peer adds 1
// into that peer's signal word with red.release.sys, and spins with ld.acquire.sys until its own
// words have arrived; then a grid sync again. On CPU a rank is one thread, so both grid syncs are
// trivially met (the calling thread's program order), and the rest is the same.
//
// `signals` (in this rank's heap) holds one monotone counter per source rank, which only that
// source adds into: after barrier b every counter is >= b, so nothing is ever reset, and a counter
// still below b names a rank that did not arrive. A peer is at most one barrier ahead, since it
// cannot pass barrier b + 1 before this rank arrives there.
#include <cstdint>

#include "common/sym_heap.hpp"

namespace switchyard::cpu {

class SymmetricBarrier {
 public:
  // Arrives, then waits (bounded) for every rank. `operation` names the call in a timeout message
  // ("symmetric dispatch", "symmetric combine"). Every rank must call it the same number of times.
  void arrive_and_wait(const common::SymHeap& heap, uint64_t* signals, double timeout_seconds,
                       const char* operation);

  uint64_t epoch() const { return epoch_; }

 private:
  uint64_t epoch_ = 0;  // barriers this rank has arrived at
};

}  // namespace switchyard::cpu
