#pragma once
// Where each expert-output row of a symmetric dispatch goes home: the row's place in its home rank's
// combine buffer, [slot][token] of the combine's heap half, reached through map(). The push combine
// moves rows there itself (cpu/symmetric/engine.cpp, cuda/symmetric/combine_kernel.cu); with this
// description an expert phase writes each row there as it computes it instead (the MoE layer's
// MoeExpertOutput::home: GEMM 2's epilogue on CUDA, cuda/moe/home_rows_epilogue.cuh), and the combine that
// follows only waits at its barrier and reduces (SymmetricCombinePlan::rows_at_home). Host and device
// read it alike: the CPU engine fills `half`, the CUDA engine leaves it -1 and points `calls` at its
// device counter, since a CUDA graph replays the call with the half of its own turn.
//
// A row gets no place (nullptr) where the push combine would not write it either: the dispatch overflowed
// its expert capacity (the combine refuses on every rank), the row's home or this rank is masked, or
// the dispatch's tables do not describe the row (a count, token or slot out of range: the CUDA combine
// records which, naming its role, as it does for the rows it pushes itself).
#include <cstdint>

#include "common/host_device.hpp"
#include "common/rank_mask.hpp"
#include "common/sym_heap.hpp"
#include "common/symmetric_protocol.hpp"

namespace switchyard::common {

struct SymmetricHomeRows {
  SymHeap heap;
  SymmetricLayout layout;
  RankMaskView mask;
  int rank = 0;
  int num_ranks = 1;
  int local_experts = 0;
  int topk = 0;
  int64_t max_tokens_per_rank = 0;
  int64_t capacity = 0;                   // C: rows per local expert of the dispatch
  const int32_t* layout_range = nullptr;  // [L, R, 2]: (begin, count) of each home's rows, true counts
  const int32_t* src_info = nullptr;      // [L, C]: the row's token at its home
  const int32_t* src_slot = nullptr;      // [L, C]: its top-k slot there
  const int32_t* overflow = nullptr;      // CUDA: the dispatch's {overflowed, ...}; null: it did not
  int half = -1;                          // the combine's heap half, or -1: from `calls`
  const uint32_t* calls = nullptr;        // CUDA: symmetric calls finished; the combine is call calls + 1

  // The combine's half: read once per use, before any row's place.
  SY_HD int combine_half() const { return half >= 0 ? half : symmetric_half(*calls + 1); }

  // The home rank of row `row` of local expert `local`: the last rank whose rows begin at or before it,
  // if its count holds the row; -1 otherwise. Homes' rows follow one another in rank order.
  SY_HD int home_of(int local, int64_t row) const {
    const int32_t* range = layout_range + static_cast<int64_t>(local) * num_ranks * 2;
    int low = 0, high = num_ranks - 1;
    while (low < high) {
      const int middle = (low + high + 1) / 2;
      if (range[2 * middle] <= row) {
        low = middle;
      } else {
        high = middle - 1;
      }
    }
    const int64_t begin = range[2 * low];
    const int64_t count = range[2 * low + 1];
    return row >= begin && count >= 0 && count <= max_tokens_per_rank && row < begin + count ? low : -1;
  }

  // Where row `row` (< C) of local expert `local` goes: its home's combine row in `combine_half`, or
  // nullptr where nothing is written (above).
  SY_HD uint8_t* place(int local, int64_t row, int combine_half) const {
    if (overflow != nullptr && overflow[0] != 0) return nullptr;
    if (local < 0 || local >= local_experts || row < 0 || row >= capacity) return nullptr;
    const int home = home_of(local, row);
    if (home < 0 || mask.masked(rank) || mask.masked(home)) return nullptr;
    const int64_t index = static_cast<int64_t>(local) * capacity + row;
    const int32_t token = src_info[index];
    const int32_t slot = src_slot[index];
    if (token < 0 || token >= max_tokens_per_rank || slot < 0 || slot >= topk) return nullptr;
    return heap.map(layout.combine_row(heap.base, combine_half, slot, token), home);
  }
};

}  // namespace switchyard::common
