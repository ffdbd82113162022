#include "cpu/symmetric/pull_combine.hpp"

#include <string>
#include <vector>

#include "common/atomics.hpp"
#include "cpu/backend/bounded_wait.hpp"
#include "cpu/expert_major/outputs.hpp"
#include "cpu/symmetric/lease.hpp"
#include "switchyard/errors.hpp"

namespace switchyard::cpu {

void pull_row_begins(const common::SymHeap& heap, const common::SymmetricLayout& layout, int half,
                     int local_experts, int64_t max_tokens_per_rank, const Participants& participants,
                     int32_t* begin) {
  for (int expert = 0; expert < local_experts * heap.num_ranks; ++expert) {
    const int target = expert / local_experts;
    const int local = expert % local_experts;
    int32_t rows = 0;
    // A masked target's rows are never read (its slots are dropped), and a masked source's never pulled.
    for (int source = 0; source < heap.rank && participants.in(target); ++source) {
      if (!participants.in(source)) continue;
      // A count out of range is the target's to report (its dispatch puller); it adds nothing here.
      const int32_t count = *heap.map(layout.count(heap.base, half, local, source), target);
      if (count > 0 && count <= max_tokens_per_rank) rows += count;
    }
    begin[expert] = rows;
  }
}

namespace {

constexpr const char* kOperation = "symmetric combine, pull";

// The participants' y, and the first disagreement on the shape (empty: none). Masked ranks' records
// are never read.
std::string gather_y(const common::SymHeap& heap, const common::SymmetricPullRecord* mine,
                     const Participants& participants, int local_experts, int64_t rows_per_expert, int hidden,
                     std::vector<const uint16_t*>& y_of) {
  for (int rank = 0; rank < heap.num_ranks; ++rank) {
    if (!participants.in(rank)) continue;
    const common::SymmetricPullRecord* record = heap.map(mine, rank);
    y_of[rank] =
        reinterpret_cast<const uint16_t*>(common::symmetric_rows(heap, rank, record->y_at, record->y));
    const uint64_t y_bytes = static_cast<uint64_t>(local_experts) * static_cast<uint64_t>(rows_per_expert) *
                             static_cast<uint64_t>(hidden) * 2;
    if (record->y_at == common::SymmetricRowsAt::heap &&
        !common::symmetric_heap_span_fits(record->y, y_bytes, heap.bytes)) {
      return "symmetric_combine: rank " + std::to_string(rank) +
             " announced its expert outputs at heap offset " + std::to_string(record->y) +
             ", outside its heap of " + std::to_string(heap.bytes) + " bytes; none of them is read";
    }
    if (record->rows_per_expert != rows_per_expert || record->hidden != hidden) {
      return "symmetric_combine: rank " + std::to_string(rank) + " combines expert outputs of " +
             std::to_string(record->rows_per_expert) + " rows per expert and hidden " +
             std::to_string(record->hidden) + ", rank " + std::to_string(heap.rank) + " " +
             std::to_string(rows_per_expert) + " and " + std::to_string(hidden) +
             " (every rank must combine the same shape)";
    }
  }
  return {};
}

// Every valid slot was dispatched (core checks combine's ids against the dispatch's), so its row lies
// inside its expert's rows; anything else would read another expert's rows. Empty: all inside.
std::string check_rows(const detail::ExpertMajorHandleData& handle, const std::vector<int64_t>& ids) {
  const int topk = handle.topk;
  const int32_t* position = handle.position.as<const int32_t>();
  const int32_t* begin = handle.begin.as<const int32_t>();
  for (int64_t pair = 0; pair < static_cast<int64_t>(ids.size()); ++pair) {
    const int64_t expert = ids[pair];
    if (expert < 0) continue;
    const int64_t row = static_cast<int64_t>(begin[expert]) + position[pair];
    if (expert >= handle.num_experts || position[pair] < 0 || row >= handle.rows_per_expert()) {
      return "topk_idx: expected the dispatch's expert ids (or -1), got " + std::to_string(expert) +
             " at token " + std::to_string(pair / topk) + ", slot " + std::to_string(pair % topk) +
             ", which the dispatch did not send there";
    }
  }
  return {};
}

}  // namespace

void pull_combine(const InPlaceCall& call, const detail::ExpertMajorHandleData& handle,
                  common::SymmetricRows y, int hidden, const int64_t* topk_idx, const float* topk_weights,
                  const CombineBiases& biases, uint16_t* combined_x) {
  const common::SymHeap& heap = *call.heap;
  const common::SymmetricLayout& layout = call.layout;
  const int64_t rows_per_expert = handle.rows_per_expert();

  // Announce: the fields, then the call (release).
  common::SymmetricPullRecord* mine = layout.pull_record(heap.base);
  mine->y = y.where;
  mine->y_at = y.at;
  mine->rows_per_expert = rows_per_expert;
  mine->hidden = hidden;
  __atomic_store_n(&mine->lease, open_lease(call.sequence), __ATOMIC_RELEASE);
  common::st_release_sys(&mine->sequence, call.sequence);

  // Gather every reached rank's record (ourselves included).
  const Participants reached(call.masking, heap.rank, heap.num_ranks);
  auto record_of = [&](int rank) { return heap.map(mine, rank); };
  try {
    wait_for_ranks(heap, call.masking, call.sequence, call.timeout_seconds, kOperation,
                   "announce their expert outputs (y)", [&](int rank) { return &record_of(rank)->sequence; });
  } catch (...) {
    withdraw_lease(&mine->lease);
    throw;
  }
  // Fixed after the waits, so that a rank they masked is left out of the whole reduction: its slots
  // are dropped (as if topk_idx held -1) and its y is never read.
  const Participants participants = reached.still(call.masking, heap.rank);
  const int topk = handle.topk;
  const int local_experts = handle.local_experts;
  const std::vector<int64_t> ids =
      participants.surviving_slots(topk_idx, handle.num_tokens * topk, local_experts);
  std::vector<const uint16_t*> y_of(heap.num_ranks, nullptr);
  std::string mismatch =
      gather_y(heap, mine, participants, handle.local_experts, rows_per_expert, hidden, y_of);
  if (mismatch.empty()) mismatch = check_rows(handle, ids);

  // A lease on every participant's y for the reduction; a rank that gave up on the call withdrew its y.
  std::vector<int> leased;
  std::string withdrawn;
  for (int rank = 0; rank < heap.num_ranks && mismatch.empty(); ++rank) {
    if (!participants.in(rank)) continue;
    if (!take_lease(&record_of(rank)->lease, call.sequence)) {
      withdrawn = waiting_for(heap, kOperation, {rank},
                              "keep its expert outputs (y) for this call: it gave up on the call");
      break;
    }
    leased.push_back(rank);
  }
  if (mismatch.empty() && withdrawn.empty()) {
    const int32_t* position = handle.position.as<const int32_t>();
    const int32_t* begin = handle.begin.as<const int32_t>();
    reduce_weighted_slots(ids.data(), topk_weights, handle.num_tokens, topk, hidden, combined_x, biases,
                          /*use_logfmt=*/false, [&](int slot, int64_t token) {
                            const int64_t pair = token * topk + slot;
                            const int64_t expert = ids[pair];
                            const int64_t local = expert % local_experts;
                            const int64_t row = local * rows_per_expert + begin[expert] + position[pair];
                            return y_of[expert / local_experts] + row * hidden;
                          });
  }
  for (int rank : leased) return_lease(&record_of(rank)->lease);

  // Release: our reads of every peer's y are done; then wait until nobody reads ours. Even after a
  // mismatch, so that no peer waits for us.
  for (int peer = 0; peer < heap.num_ranks; ++peer) {
    if (!call.masking.reaches(heap.rank, peer)) continue;
    common::st_release_sys(heap.map(layout.pull_done(heap.base, heap.rank), peer), call.sequence);
  }
  try {
    wait_for_ranks(heap, call.masking, call.sequence, call.timeout_seconds, kOperation,
                   "finish reading this rank's expert outputs (y)",
                   [&](int rank) { return layout.pull_done(heap.base, rank); });
  } catch (...) {
    withdraw_lease(&mine->lease);
    throw;
  }
  // After a failure, or with a peer left out (not awaited: should it still read, masked in this rank's
  // view only, it finds y withdrawn).
  if (!mismatch.empty() || !withdrawn.empty() ||
      !Participants(call.masking, heap.rank, heap.num_ranks).all()) {
    withdraw_lease(&mine->lease);
  }
  if (!mismatch.empty()) throw InvalidArgument(mismatch);
  if (!withdrawn.empty()) throw TimeoutError(withdrawn);
}

}  // namespace switchyard::cpu
