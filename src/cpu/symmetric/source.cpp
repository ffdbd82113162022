#include "cpu/symmetric/source.hpp"

#include <string>

#include "common/atomics.hpp"
#include "cpu/symmetric/lease.hpp"
#include "switchyard/errors.hpp"

namespace switchyard::cpu {

namespace {

constexpr const char* kOperation = "symmetric dispatch, zero_copy";

// `rank`'s record of the call (in the call's half: a fast source may announce call c + 1 while a slow
// receiver still reads call c's).
common::SymmetricSourceRecord* record_of(const InPlaceCall& call, int rank) {
  const common::SymHeap& heap = *call.heap;
  const int half = common::symmetric_half(static_cast<uint32_t>(call.sequence));
  return heap.map(call.layout.source_record(heap.base, half), rank);
}

}  // namespace

void announce_source(const InPlaceCall& call, common::SymmetricRows x, int64_t row_stride,
                     uint64_t signature) {
  common::SymmetricSourceRecord* mine = record_of(call, call.heap->rank);
  mine->x = x.where;
  mine->x_at = x.at;
  mine->row_stride = row_stride;
  mine->signature = signature;
  __atomic_store_n(&mine->lease, open_lease(call.sequence), __ATOMIC_RELEASE);
  // The barrier that follows carries the fields to the receivers; the release keeps them whole anyway.
  common::st_release_sys(&mine->sequence, call.sequence);
}

void withdraw_source(const InPlaceCall& call) {
  common::SymmetricSourceRecord* mine = record_of(call, call.heap->rank);
  if (mine->x_at != common::SymmetricRowsAt::input_buffer) withdraw_lease(&mine->lease);
}

SourceRows::SourceRows(const InPlaceCall& call, uint64_t signature, const Participants& participants)
    : call_(call), x_(call.heap->num_ranks, nullptr), stride_(call.heap->num_ranks, 0) {
  const common::SymHeap& heap = *call.heap;
  for (int source = 0; source < heap.num_ranks; ++source) {
    if (!participants.in(source)) continue;  // masked: its memory is never read (it may be gone)
    common::SymmetricSourceRecord* record = record_of(call, source);
    const uint64_t sequence = common::ld_acquire_sys(&record->sequence);
    if (sequence != call.sequence) {
      release();
      throw Error("symmetric_dispatch: rank " + std::to_string(source) +
                  " announced its tokens for symmetric call " + std::to_string(sequence) + ", rank " +
                  std::to_string(heap.rank) + " expected call " + std::to_string(call.sequence) +
                  " (every rank must make the same symmetric calls)");
    }
    if (record->signature != signature) {
      release();
      throw InvalidArgument(
          "symmetric_dispatch: expected every rank to call with the same shape (hidden, k, "
          "num_experts, max_tokens_per_rank, expert_capacity, fp8 options); rank " +
          std::to_string(source) + "'s call differs from rank " + std::to_string(heap.rank) + "'s");
    }
    if (record->x_at == common::SymmetricRowsAt::input_buffer) continue;  // published
    if (record->x_at == common::SymmetricRowsAt::heap &&
        (record->row_stride <= 0 ||
         !common::symmetric_heap_span_fits(record->x,
                                           static_cast<uint64_t>(call.layout.max_tokens_per_rank) *
                                               static_cast<uint64_t>(record->row_stride),
                                           heap.bytes))) {
      release();
      throw Error("symmetric_dispatch: rank " + std::to_string(source) +
                  " announced its tokens at heap offset " + std::to_string(record->x) + " with row stride " +
                  std::to_string(record->row_stride) + ", outside its heap of " + std::to_string(heap.bytes) +
                  " bytes; none of its rows is read");
    }
    if (!take_lease(&record->lease, call.sequence)) {
      release();
      throw TimeoutError(waiting_for(heap, kOperation, {source},
                                     "keep its tokens (x) for this call: it gave up on the call"));
    }
    leased_.push_back(source);
    x_[source] = common::symmetric_rows(heap, source, record->x_at, record->x);
    stride_[source] = record->row_stride;
  }
}

void SourceRows::release() {
  for (int source : leased_) return_lease(&record_of(call_, source)->lease);
  leased_.clear();
}

void finish_sources(const InPlaceCall& call, bool announced) {
  const common::SymHeap& heap = *call.heap;
  for (int peer = 0; peer < heap.num_ranks; ++peer) {
    if (!call.masking.reaches(heap.rank, peer)) continue;
    common::st_release_sys(heap.map(call.layout.pull_done(heap.base, heap.rank), peer), call.sequence);
  }
  if (!announced) return;
  try {
    wait_for_ranks(heap, call.masking, call.sequence, call.timeout_seconds, kOperation,
                   "finish reading this rank's tokens (x)",
                   [&](int rank) { return call.layout.pull_done(heap.base, rank); });
  } catch (...) {
    withdraw_source(call);
    throw;
  }
  // A peer left out was not awaited: should it still read (masked in this rank's view only), it finds
  // x withdrawn.
  if (!Participants(call.masking, heap.rank, heap.num_ranks).all()) withdraw_source(call);
}

}  // namespace switchyard::cpu
