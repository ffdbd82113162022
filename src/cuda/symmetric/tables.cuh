#pragma once
// Per-call tables of the `symmetric` kernels, in shared memory: how many rows each (local expert,
// rank) pair holds on this rank, where they start in the expert-major layout, and the order in which
// a block walks one peer's rows. Dispatch fills the counts from its workspace (rank = source),
// combine from the dispatch's layout_range (rank = home).
//
// A peer's rows are numbered j = 0.. in (local expert, position) order; block b of B takes rows
// j = first, first + B, ... of every peer, and visits the peers starting at its own offset, so at
// any moment the blocks of a rank read from (or write to) all peers, none of them hot.
#include <cstdint>

#include "cuda/symmetric/kernels.hpp"
#include "device/warp_scan.cuh"

namespace switchyard::cuda {

// Warps a block building RowTables may have (1024 threads).
constexpr int kMaxTableWarps = 32;

// Carved from symmetric_table_ints(R, L) entries of shared memory.
//
// With a capacity C (expert_capacity), expert l keeps only its first C rows: count, begin and total
// stay the true values (what layout_range and recv_count report), while `start`, and so the rows a
// block walks, counts only the rows that fit, min(count, max(0, C - begin)) per pair.
struct RowTables {
  int32_t* count;  // [L][R]: rows of (local expert l, rank r)
  int32_t* begin;  // [L][R]: where (l, r)'s rows start among expert l's rows (ranks ascending)
  int32_t*
      start;  // [R][L + 1]: rank r's walked row j lies in expert l for start[r][l] <= j < start[r][l + 1]
  int32_t* total;  // [L]: rows of expert l
  int num_ranks;
  int local_experts;

  __device__ static RowTables carve(int32_t* base, int num_ranks, int local_experts) {
    RowTables tables;
    const int pairs = num_ranks * local_experts;
    tables.count = base;
    tables.begin = base + pairs;
    tables.start = base + 2 * pairs;
    tables.total = tables.start + num_ranks * (local_experts + 1);
    tables.num_ranks = num_ranks;
    tables.local_experts = local_experts;
    return tables;
  }

  // After `count` is filled and the block synchronised: the prefix sums, the walk over the rows that
  // fit `capacity`. Whole block (a multiple of 32 threads, the same `blockDim` at every call site); ends
  // synchronised. Integer sums, so every way of taking them gives the same tables.
  //   begin/total: per expert, a sum over its R ranks. With R <= 32 every warp takes 32 / W experts at once,
  //     a segment of W = segment_width_for(R) lanes each (log2(W) shuffles: none at one rank); with more
  //     ranks a warp per expert, 32 ranks at a time.
  //   start: per rank, a sum over its L experts. A warp per rank, or (kSliceExperts), with fewer ranks than
  //     warps and more than 32 experts, warps / R warps per rank, each over a slice of the experts, then each
  //     slice moved past the slices before it (one more block barrier).
  // NOTES (session 47): a full-warp scan per expert and a single warp over all 256 experts took 6.5 us of a
  // one-rank dispatch (R = 1, L = 256; 20 % of its instructions), against 2.2-2.6 us at 8 ranks (L = 32).
  template <bool kSliceExperts = true>
  __device__ void build(int64_t capacity) const {
    const int warp = static_cast<int>(threadIdx.x / 32);
    const int warps = static_cast<int>(blockDim.x / 32);
    const int lane = lane_id();
    if (num_ranks <= 32) {
      const int width = segment_width_for(num_ranks);
      const int experts_per_warp = 32 / width;
      const int r = lane & (width - 1);
      for (int first = warp * experts_per_warp; first < local_experts; first += warps * experts_per_warp) {
        const int l = first + lane / width;
        const bool entry = l < local_experts && r < num_ranks;
        const int32_t rows = entry ? count[l * num_ranks + r] : 0;
        const int32_t inclusive = segment_inclusive_sum(rows, width);
        if (entry) {
          begin[l * num_ranks + r] = inclusive - rows;
          if (r == num_ranks - 1) total[l] = inclusive;
        }
      }
    } else {
      for (int l = warp; l < local_experts; l += warps) {
        const int32_t rows = warp_exclusive_scan(
            num_ranks, [&](int r) { return count[l * num_ranks + r]; },
            [&](int r, int32_t before) { begin[l * num_ranks + r] = before; });
        if (lane == 0) total[l] = rows;
      }
    }
    // `begin` is read across experts below. racecheck misreports this hand-off between warps as a race (its
    // misreading of this kernel's barriers, NOTES session 43); scripts/gpu-check.sh names it as known.
    __syncthreads();
    const auto fitting = [&](int l, int r) {
      const int64_t room = capacity - begin[l * num_ranks + r];
      const int32_t pair_rows = count[l * num_ranks + r];
      return room <= 0 ? 0 : (room < pair_rows ? static_cast<int32_t>(room) : pair_rows);
    };
    const int warps_per_rank =
        kSliceExperts && local_experts > 32 && num_ranks < warps ? warps / num_ranks : 1;
    if (warps_per_rank == 1) {
      for (int r = warp; r < num_ranks; r += warps) {
        int32_t* prefix = start + r * (local_experts + 1);
        const int32_t rows = warp_exclusive_scan(
            local_experts, [&](int l) { return fitting(l, r); },
            [&](int l, int32_t before) { prefix[l] = before; });
        if (lane == 0) prefix[local_experts] = rows;
      }
    } else {
      // Slice k of rank r: experts [k * slice, (k + 1) * slice); warps past R * warps_per_rank only wait.
      __shared__ int32_t slice_rows[kMaxTableWarps];
      const int r = warp / warps_per_rank;
      const int k = warp % warps_per_rank;
      const int slice = (local_experts + warps_per_rank - 1) / warps_per_rank;
      const int low = k * slice < local_experts ? k * slice : local_experts;
      const int high = low + slice < local_experts ? low + slice : local_experts;
      int32_t* prefix = start + r * (local_experts + 1);
      int32_t mine = 0;
      if (r < num_ranks) {
        mine = warp_exclusive_scan(
            high - low, [&](int i) { return fitting(low + i, r); },
            [&](int i, int32_t before) { prefix[low + i] = before; });
        if (lane == 0) slice_rows[warp] = mine;
      }
      __syncthreads();
      if (r < num_ranks) {
        int32_t before = 0;
        for (int j = r * warps_per_rank; j < warp; ++j) before += slice_rows[j];
        for (int l = low + lane; l < high; l += 32) prefix[l] += before;
        if (k == warps_per_rank - 1 && lane == 0) prefix[local_experts] = before + mine;
      }
    }
    __syncthreads();
  }

  __device__ __forceinline__ int32_t rows_of(int rank) const {
    return start[rank * (local_experts + 1) + local_experts];
  }

  // The local expert of `rank`'s row j (0 <= j < rows_of(rank)): the last l with start[l] <= j.
  __device__ __forceinline__ int expert_of(int rank, int32_t j) const {
    const int32_t* prefix = start + rank * (local_experts + 1);
    int low = 0, high = local_experts - 1;
    while (low < high) {
      const int middle = (low + high + 1) / 2;
      if (prefix[middle] <= j) {
        low = middle;
      } else {
        high = middle - 1;
      }
    }
    return low;
  }
  __device__ __forceinline__ int32_t first_row_of(int rank, int local_expert) const {
    return start[rank * (local_experts + 1) + local_expert];
  }
};

// The peer a block visits at `step` (0..R-1): starting after this rank, offset by the block.
__device__ __forceinline__ int walk_peer(int step, int rank, int num_ranks) {
  return static_cast<int>((static_cast<int64_t>(rank) + 1 + blockIdx.x + step) % num_ranks);
}

// The first of a peer's rows this block takes (then every `blocks`-th); rotated by the peer so the
// remainders spread over the blocks.
__device__ __forceinline__ int32_t walk_first_row(int peer, int blocks) {
  return static_cast<int32_t>((static_cast<int64_t>(blockIdx.x) + blocks - peer % blocks) % blocks);
}

}  // namespace switchyard::cuda
