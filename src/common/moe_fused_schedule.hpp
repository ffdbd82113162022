#pragma once
// The fused MoE kernel's work order (issue 22; docs/MOE.md, "The fused path"), as a type shared by the
// host and the device: the units a persistent grid takes one by one from a counter, GEMM 1 tiles
// (with SwiGLU) and GEMM 2 tiles of every local expert's blocks of rows, interleaved so that
//   - a GEMM 2 unit of rows [m, m + BLOCK_M) of expert e comes after every GEMM 1 unit of those rows
//     (GEMM 2's K runs over all of GEMM 1's outputs for them), and
//   - every unit depends only on units earlier in the order (and on the dispatch's rows).
// With the grid's blocks co-resident and taking units in order, that is enough for progress: the
// earliest unfinished unit waits on nothing unfinished, so its block finishes it, and so on.
//
// The order. The experts' blocks of rows, "pairs" (expert, m_block) numbered p = 0 .. P - 1 expert by
// expert, are visited in steps s = 0 .. P + lag - 1; step s holds pair s's GEMM 1 units (if s < P), then
// pair (s - lag)'s GEMM 2 units (if s >= lag). A lag of one grid's worth of GEMM 1 units lets a GEMM 2
// unit be taken when its pair's GEMM 1 units are about done, rather than just started.
#include <cstdint>

#include "common/host_device.hpp"

namespace switchyard::common {

// NOTES: BLOCK_M. One consumer warpgroup's 64-row tile where experts expect few rows (DeepSeek-V3 decode:
// R N K / E = 8 * 128 * 8 / 256 = 32 rows, where a 128-row tile would be three quarters padding, its MMA
// work hidden under the weight reads anyway), the cooperative 128-row tile otherwise (prefill: ~1024).
constexpr int kMoeFusedSmallBlockM = 64;
constexpr int kMoeFusedLargeBlockM = 128;

SY_HD int moe_fused_block_m(int64_t expected_rows_per_expert) {
  return expected_rows_per_expert <= kMoeFusedSmallBlockM ? kMoeFusedSmallBlockM : kMoeFusedLargeBlockM;
}

// Blocks of `block_m` rows that `rows` rows take.
SY_HD int32_t moe_fused_m_blocks(int64_t rows, int block_m) {
  return rows <= 0 ? 0 : static_cast<int32_t>((rows + block_m - 1) / block_m);
}

// The lag (in steps) that puts a pair's GEMM 2 units about one grid's worth of units (`grid_blocks`)
// after its GEMM 1 units, at least one step: with none, the order still puts GEMM 2 after GEMM 1 (in the
// same step), but a block would take a GEMM 2 unit right behind the GEMM 1 units it must wait for.
SY_HD int32_t moe_fused_lag(int grid_blocks, int32_t l1_n_blocks) {
  if (l1_n_blocks <= 0) return 1;
  const int32_t lag = (grid_blocks + l1_n_blocks - 1) / l1_n_blocks;
  return lag < 1 ? 1 : lag;
}

enum class MoeUnitKind : int32_t { gemm1 = 1, gemm2 = 2 };

struct MoeUnit {
  MoeUnitKind kind;
  int32_t pair;     // the block of rows: moe_fused_pair_expert gives its expert and m-block
  int32_t n_block;  // GEMM 1: a tile of the 2I outputs (gate and up); GEMM 2: a tile of the H outputs
};

struct MoeFusedOrder {
  int32_t pairs;        // P: the m-blocks of every local expert
  int32_t l1_n_blocks;  // GEMM 1 units per pair (> 0)
  int32_t l2_n_blocks;  // GEMM 2 units per pair (> 0)
  int32_t lag;          // >= 0 steps (moe_fused_lag)

  SY_HD int64_t units() const { return static_cast<int64_t>(pairs) * (l1_n_blocks + l2_n_blocks); }

  // Steps [0, a): GEMM 1 only; [lag, P): both (none when lag >= P); [max(lag, P), P + lag): GEMM 2 only.
  // Steps [P, lag), when lag > P, hold nothing.
  SY_HD int32_t first_only_steps() const { return lag < pairs ? lag : pairs; }
  SY_HD int32_t both_steps() const { return pairs > lag ? pairs - lag : 0; }
  SY_HD int32_t last_only_first_step() const { return lag > pairs ? lag : pairs; }

  // The unit at `index` (0 <= index < units()).
  SY_HD MoeUnit unit_at(int64_t index) const {
    const int64_t n1 = l1_n_blocks, n2 = l2_n_blocks;
    const int64_t first_units = first_only_steps() * n1;
    if (index < first_units) {
      return MoeUnit{MoeUnitKind::gemm1, static_cast<int32_t>(index / n1), static_cast<int32_t>(index % n1)};
    }
    index -= first_units;
    const int64_t both_units = both_steps() * (n1 + n2);
    if (index < both_units) {
      const int32_t step = lag + static_cast<int32_t>(index / (n1 + n2));
      const int64_t at = index % (n1 + n2);
      if (at < n1) return MoeUnit{MoeUnitKind::gemm1, step, static_cast<int32_t>(at)};
      return MoeUnit{MoeUnitKind::gemm2, step - lag, static_cast<int32_t>(at - n1)};
    }
    index -= both_units;
    const int32_t step = last_only_first_step() + static_cast<int32_t>(index / n2);
    return MoeUnit{MoeUnitKind::gemm2, step - lag, static_cast<int32_t>(index % n2)};
  }

  // The index of `unit` (its inverse).
  SY_HD int64_t index_of(const MoeUnit& unit) const {
    const int64_t n1 = l1_n_blocks, n2 = l2_n_blocks;
    const int64_t first_units = first_only_steps() * n1;
    const int64_t both_units = both_steps() * (n1 + n2);
    const int32_t step = unit.kind == MoeUnitKind::gemm1 ? unit.pair : unit.pair + lag;
    if (step < first_only_steps()) return step * n1 + unit.n_block;  // GEMM 1 only
    if (step >= lag && step < pairs) {
      return first_units + (step - lag) * (n1 + n2) + (unit.kind == MoeUnitKind::gemm1 ? 0 : n1) +
             unit.n_block;
    }
    return first_units + both_units + (step - last_only_first_step()) * n2 + unit.n_block;
  }
};

// `m_block_start` [L + 1]: the first pair of each local expert (a prefix sum of moe_fused_m_blocks of
// its rows); the last entry is P. Returns the expert that holds `pair` (experts without rows hold none).
SY_HD int moe_fused_pair_expert(const int32_t* m_block_start, int local_experts, int32_t pair) {
  int low = 0, high = local_experts - 1;  // the last expert whose first pair is <= pair
  while (low < high) {
    const int middle = (low + high + 1) / 2;
    if (m_block_start[middle] <= pair) {
      low = middle;
    } else {
      high = middle - 1;
    }
  }
  return low;
}

// Fills `m_block_start` [L + 1] from each local expert's rows (at most the capacity); returns P.
SY_HD int32_t moe_fused_m_block_starts(const int64_t* rows, int local_experts, int block_m,
                                       int32_t* m_block_start) {
  int32_t pairs = 0;
  for (int e = 0; e < local_experts; ++e) {
    m_block_start[e] = pairs;
    pairs += moe_fused_m_blocks(rows[e], block_m);
  }
  m_block_start[local_experts] = pairs;
  return pairs;
}

}  // namespace switchyard::common
