#pragma once
// The CPU `symmetric` dispatch's sources (common/symmetric_protocol.hpp, "zero-copy"): where each
// rank's rows are for a call, and, when receivers read a source's x in place, the handshake that keeps
// the source from returning while a receiver still reads it.
//   announce   before the barrier: this rank's source record (where x is, or published), its lease open;
//   hold       after the barrier: a lease on every zero-copy source's x for the pulls
//   (cpu/symmetric/lease.hpp); finish     after the pulls: the call released into this rank's done word in
//   every peer's heap; a
//              zero-copy source then waits (bounded) for every peer's, and withdraws x if it gives up.
#include <cstdint>
#include <vector>

#include "common/sym_heap.hpp"
#include "common/symmetric_protocol.hpp"
#include "cpu/symmetric/lease.hpp"

namespace switchyard::cpu {

// Before the barrier: `x` where this rank's rows are (input_buffer when it publishes them: the default);
// `signature` the call's (ExpertMajorDispatchPlan::signature), which every receiver compares with its own.
void announce_source(const InPlaceCall& call, common::SymmetricRows x, int64_t row_stride,
                     uint64_t signature);

// This rank gave up on the call before its pulls (the barrier timed out): no receiver reads x after
// this returns. A no-op when x was not announced.
void withdraw_source(const InPlaceCall& call);

// Where every participating source's rows are, for the pulls: x[source] (null: its input buffer, or
// not a participant, whose record is never read) and row_stride. Holds a lease on every announced x
// until destroyed (or release()). Throws TimeoutError naming the source when one gave up on the call,
// Error when a record is of another call, and InvalidArgument when a source's signature differs from
// `signature` (this rank's).
class SourceRows {
 public:
  SourceRows(const InPlaceCall& call, uint64_t signature, const Participants& participants);
  ~SourceRows() { release(); }
  SourceRows(const SourceRows&) = delete;
  SourceRows& operator=(const SourceRows&) = delete;

  const uint8_t* x(int source) const { return x_[source]; }
  int64_t row_stride(int source) const { return stride_[source]; }
  void release();

 private:
  const InPlaceCall& call_;
  std::vector<const uint8_t*> x_;
  std::vector<int64_t> stride_;
  std::vector<int> leased_;
};

// After the pulls (or a failure after the barrier): releases the call to every peer it reaches, then,
// if this rank announced x, waits until every such peer released it here (TimeoutError naming the
// ranks, or those masked under Config::mask_ranks_on_timeout). x is withdrawn before a throw, and
// whenever a peer was left out (masked), so that no reader is left behind.
void finish_sources(const InPlaceCall& call, bool announced);

}  // namespace switchyard::cpu
