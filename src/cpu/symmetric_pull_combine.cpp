#include "cpu/symmetric_pull_combine.hpp"

#include <string>
#include <vector>

#include "common/atomics.hpp"
#include "cpu/bounded_wait.hpp"
#include "cpu/expert_major_outputs.hpp"
#include "switchyard/errors.hpp"

namespace switchyard::cpu {

namespace {

// "rank 0 (cpu symmetric combine, pull) waiting for rank(s) 1, 2 to <what>"
std::string waiting_for(const common::SymHeap& heap, const std::vector<int>& missing, const char* what) {
  std::string ranks;
  for (int rank : missing) ranks += (ranks.empty() ? "" : ", ") + std::to_string(rank);
  return "rank " + std::to_string(heap.rank) + " (cpu symmetric combine, pull) waiting for rank(s) " + ranks + " to " +
         what;
}

// Waits (bounded) until word(rank) >= sequence for every rank; the timeout names those still below.
template <typename WordOf>
void wait_all(const common::SymHeap& heap, uint64_t sequence, double timeout_seconds, const char* what,
              WordOf word_of) {
  WaitBudget budget(timeout_seconds, nullptr);
  for (int rank = 0; rank < heap.num_ranks; ++rank) {
    while (common::ld_acquire_sys(word_of(rank)) < sequence) {
      budget.idle([&] {
        std::vector<int> missing;
        for (int other = 0; other < heap.num_ranks; ++other) {
          if (common::ld_acquire_sys(word_of(other)) < sequence) missing.push_back(other);
        }
        return waiting_for(heap, missing, what);
      });
    }
  }
}

// The lease word of a record: the call in the high bits, then whether the owner withdrew y, then the
// homes reading it now. A home reads a peer's y only while it holds a lease of the call; an owner that
// gives up on a call (a timeout, a mismatch) withdraws and waits for the holders to finish reading
// (local work, no waits) before it returns, so the caller may free y as soon as the call returns,
// whatever happened.
constexpr uint64_t kLeaseReaders = 0xffff;
constexpr uint64_t kLeaseWithdrawn = uint64_t{1} << 16;
constexpr int kLeaseCallShift = 17;

uint64_t open_lease(uint64_t sequence) { return sequence << kLeaseCallShift; }

// Takes a lease on `record`'s y for call `sequence`; false if its owner withdrew it (or moved on).
bool take_lease(common::SymmetricPullRecord* record, uint64_t sequence) {
  uint64_t word = __atomic_load_n(&record->lease, __ATOMIC_ACQUIRE);
  for (;;) {
    if ((word >> kLeaseCallShift) != sequence || (word & kLeaseWithdrawn) != 0) return false;
    if (__atomic_compare_exchange_n(&record->lease, &word, word + 1, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
      return true;
    }
  }
}

void return_lease(common::SymmetricPullRecord* record) { __atomic_fetch_sub(&record->lease, 1, __ATOMIC_RELEASE); }

// The owner gives up on the call: no new lease, and every held one returned, before y may be freed.
void withdraw_y(common::SymmetricPullRecord* mine) {
  __atomic_fetch_or(&mine->lease, kLeaseWithdrawn, __ATOMIC_ACQ_REL);
  while ((__atomic_load_n(&mine->lease, __ATOMIC_ACQUIRE) & kLeaseReaders) != 0) {
    // Holders are reducing (no waits inside a lease): this ends.
  }
}

}  // namespace

void pull_row_begins(const common::SymHeap& heap, const common::SymmetricLayout& layout, int half, int local_experts,
                     int64_t max_tokens_per_rank, int32_t* begin) {
  for (int expert = 0; expert < local_experts * heap.num_ranks; ++expert) {
    const int target = expert / local_experts;
    const int local = expert % local_experts;
    int32_t rows = 0;
    for (int source = 0; source < heap.rank; ++source) {
      // A count out of range is the target's to report (its dispatch puller); it adds nothing here.
      const int32_t count = *heap.map(layout.count(heap.base, half, local, source), target);
      if (count > 0 && count <= max_tokens_per_rank) rows += count;
    }
    begin[expert] = rows;
  }
}

void pull_combine(const PullCombineCall& call, const detail::LowLatencyHandleData& handle, const uint16_t* y,
                  int hidden, const int64_t* topk_idx, const float* topk_weights, uint16_t* combined_x) {
  const common::SymHeap& heap = *call.heap;
  const common::SymmetricLayout& layout = call.layout;
  const int64_t rows_per_expert = handle.rows_per_expert();

  // Announce: the fields, then the call (release).
  common::SymmetricPullRecord* mine = layout.pull_record(heap.base);
  mine->y = reinterpret_cast<uint64_t>(y);
  mine->rows_per_expert = rows_per_expert;
  mine->hidden = hidden;
  __atomic_store_n(&mine->lease, open_lease(call.sequence), __ATOMIC_RELEASE);
  common::st_release_sys(&mine->sequence, call.sequence);

  // Gather every rank's record (ourselves included).
  auto record_of = [&](int rank) { return heap.map(mine, rank); };
  try {
    wait_all(heap, call.sequence, call.timeout_seconds, "announce their expert outputs (y)",
             [&](int rank) { return &record_of(rank)->sequence; });
  } catch (...) {
    withdraw_y(mine);
    throw;
  }
  std::string mismatch;
  std::vector<const uint16_t*> y_of(heap.num_ranks);
  for (int rank = 0; rank < heap.num_ranks; ++rank) {
    const common::SymmetricPullRecord* record = record_of(rank);
    y_of[rank] = reinterpret_cast<const uint16_t*>(record->y);
    if (mismatch.empty() && (record->rows_per_expert != rows_per_expert || record->hidden != hidden)) {
      mismatch = "symmetric_combine: rank " + std::to_string(rank) + " combines expert outputs of " +
                 std::to_string(record->rows_per_expert) + " rows per expert and hidden " +
                 std::to_string(record->hidden) + ", rank " + std::to_string(heap.rank) + " " +
                 std::to_string(rows_per_expert) + " and " + std::to_string(hidden) +
                 " (every rank must combine the same shape)";
    }
  }

  // Every valid slot was dispatched (core checks combine's ids against the dispatch's), so its row
  // lies inside its expert's rows; anything else would read another expert's rows.
  const int topk = handle.topk;
  const int local_experts = handle.local_experts;
  const int32_t* position = handle.position.as<const int32_t>();
  const int32_t* begin = handle.begin.as<const int32_t>();
  for (int64_t pair = 0; pair < handle.num_tokens * topk && mismatch.empty(); ++pair) {
    const int64_t expert = topk_idx[pair];
    if (expert < 0) continue;
    const int64_t row = static_cast<int64_t>(begin[expert]) + position[pair];
    if (expert >= handle.num_experts || position[pair] < 0 || row >= rows_per_expert) {
      mismatch = "topk_idx: expected the dispatch's expert ids (or -1), got " + std::to_string(expert) +
                 " at token " + std::to_string(pair / topk) + ", slot " + std::to_string(pair % topk) +
                 ", which the dispatch did not send there";
    }
  }
  // A lease on every rank's y for the reduction; a rank that gave up on the call withdrew its y.
  int leased = 0;
  std::string withdrawn;
  for (; leased < heap.num_ranks && mismatch.empty(); ++leased) {
    if (!take_lease(record_of(leased), call.sequence)) {
      withdrawn = waiting_for(heap, {leased}, "keep its expert outputs (y) for this call: it gave up on the call");
      break;
    }
  }
  if (mismatch.empty() && withdrawn.empty()) {
    reduce_weighted_slots(topk_idx, topk_weights, handle.num_tokens, topk, hidden, combined_x,
                          [&](int slot, int64_t token) {
                            const int64_t pair = token * topk + slot;
                            const int64_t expert = topk_idx[pair];
                            const int64_t local = expert % local_experts;
                            const int64_t row = local * rows_per_expert + begin[expert] + position[pair];
                            return y_of[expert / local_experts] + row * hidden;
                          });
  }
  for (int rank = 0; rank < leased; ++rank) return_lease(record_of(rank));

  // Release: our reads of every peer's y are done; then wait until nobody reads ours. Even after a
  // mismatch, so that no peer waits for us.
  for (int peer = 0; peer < heap.num_ranks; ++peer) {
    common::st_release_sys(heap.map(layout.pull_done(heap.base, heap.rank), peer), call.sequence);
  }
  try {
    wait_all(heap, call.sequence, call.timeout_seconds, "finish reading this rank's expert outputs (y)",
             [&](int rank) { return layout.pull_done(heap.base, rank); });
  } catch (...) {
    withdraw_y(mine);
    throw;
  }
  if (!mismatch.empty() || !withdrawn.empty()) {
    withdraw_y(mine);
    if (!mismatch.empty()) throw InvalidArgument(mismatch);
    throw TimeoutError(withdrawn);
  }
}

}  // namespace switchyard::cpu
