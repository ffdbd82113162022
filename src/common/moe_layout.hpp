#pragma once
// The MoE layer's tensors as types (docs/MOE.md), shared by the host (CPU path, reference) and the
// kernels: where a local expert's weight rows and block scales are, and where the rows of its
// received tokens, activations and outputs are in the layer's workspace.
//
//   W1        [L, 2I, H]           rows [0, I) gate, [I, 2I) up (MoeGateUp::halves), or 64-row blocks
//                                  alternating gate, up (MoeGateUp::interleaved); bf16 or e4m3
//   W1 scales [L, 2I/128, H/128]   f32, fp8 only: one per 128 x 128 block of the gate or the up
//                                  projection; rows in halves order, or alternating gate, up
//   W2        [L, H, I]
//   W2 scales [L, H/128, I/128]
//   recv x    [L, C, H]            the symmetric dispatch's outputs (bf16 or e4m3, scales [L, C, H/128])
//   a         [L, C, I]            silu(gate) * up: bf16, or e4m3 with scales [L, C, I/128]
//   o         [L, C, H]            bf16: the expert outputs, the symmetric combine's input
// Every tensor is row-major and dense; offsets are in elements of the tensor's own type.
#include <cstdint>

#include "common/host_device.hpp"

namespace switchyard::common {

// NOTES: channels per fp8 scale of x and a, and the side of a weight's scale block (DeepSeek-V3's
// checkpoint format, DeepGEMM's SM90 convention).
constexpr int kMoeScaleBlock = 128;

// How W1's 2I rows (and its scale block rows with them) hold the gate and up projections.
enum class MoeGateUp : int {
  halves = 0,  // rows [0, I) gate, [I, 2I) up: DeepSeek-V3's checkpoint
  // 64-row blocks alternating: gate rows [0, 64), up rows [0, 64), gate rows [64, 128), ... The fused
  // SwiGLU GEMM's layout (cuda/moe/swiglu_epilogue.cuh): one 128-row tile of W1 holds 64 gate channels and
  // the same 64 up channels, so one thread's accumulators hold both of a channel. The scale rows (one per
  // 128 rows of a projection) alternate gate, up: scale row 2b + u covers channels [128 b, 128 b + 128) of
  // the gate (u = 0) or up (u = 1) projection.
  interleaved = 1,
};

// Rows of one gate or up block of W1 in MoeGateUp::interleaved.
constexpr int kMoeGateUpBlock = 64;

// The layout of the public switchyard::MoeGateUp's value (the same numbers); checked by the layer first.
SY_HD MoeGateUp moe_gate_up(int value) {
  return value == static_cast<int>(MoeGateUp::interleaved) ? MoeGateUp::interleaved : MoeGateUp::halves;
}

struct MoeWeightLayout {
  int hidden;        // H
  int intermediate;  // I
  MoeGateUp gate_up = MoeGateUp::halves;

  SY_HD int64_t w1_rows() const { return 2 * static_cast<int64_t>(intermediate); }
  // Where W1's logical row n (n < I: gate channel n; else up channel n - I) is stored: also the column of
  // h = x W1^T (GEMM 1 computes h in stored order) that holds it.
  SY_HD int64_t w1_stored_row(int64_t n) const {
    if (gate_up == MoeGateUp::halves) return n;
    const int64_t up = n >= intermediate ? 1 : 0;
    const int64_t channel = n - up * intermediate;
    return (channel / kMoeGateUpBlock) * 2 * kMoeGateUpBlock + up * kMoeGateUpBlock +
           channel % kMoeGateUpBlock;
  }
  // The scale row (of 2I / 128) of stored W1 row s (a column of h): halves s / 128; interleaved, 64-row
  // block j = s / 64 holds channels of 128-channel block j / 4 of projection j % 2, whose scale row is
  // 2 (j / 4) + j % 2.
  SY_HD int64_t w1_scale_row_of_stored(int64_t s) const {
    if (gate_up == MoeGateUp::halves) return s / kMoeScaleBlock;
    return (s / (4 * kMoeGateUpBlock)) * 2 + (s / kMoeGateUpBlock) % 2;
  }
  SY_HD int64_t gate_column(int64_t channel) const { return w1_stored_row(channel); }
  SY_HD int64_t up_column(int64_t channel) const { return w1_stored_row(intermediate + channel); }
  // Logical row n of expert l's W1 (w1_stored_row places it).
  SY_HD int64_t w1_row(int local, int64_t row) const {
    return (local * w1_rows() + w1_stored_row(row)) * hidden;
  }
  SY_HD int64_t w2_row(int local, int64_t row) const {
    return (local * static_cast<int64_t>(hidden) + row) * intermediate;
  }
  // The hidden / 128 scales of the block row that holds logical W1 row n, one per 128 input channels.
  SY_HD int64_t w1_scales_row(int local, int64_t row) const {
    return (local * (w1_rows() / kMoeScaleBlock) + w1_scale_row_of_stored(w1_stored_row(row))) *
           (hidden / kMoeScaleBlock);
  }
  SY_HD int64_t w2_scales_row(int local, int64_t row) const {
    return (local * static_cast<int64_t>(hidden / kMoeScaleBlock) + row / kMoeScaleBlock) *
           (intermediate / kMoeScaleBlock);
  }
  SY_HD int64_t w1_elements(int local_experts) const { return local_experts * w1_rows() * hidden; }
  SY_HD int64_t w2_elements(int local_experts) const {
    return static_cast<int64_t>(local_experts) * hidden * intermediate;
  }
};

// The workspace between the layer's phases, for L local experts of C rows each.
struct MoeWorkspaceLayout {
  int local_experts;  // L
  int64_t capacity;   // C
  int hidden;         // H
  int intermediate;   // I

  SY_HD int64_t row(int local, int64_t row_in_expert) const { return local * capacity + row_in_expert; }
  // Row r of expert l in recv x / o ([L, C, H]) and in a ([L, C, I]), and their scale rows.
  SY_HD int64_t hidden_row(int local, int64_t r) const { return row(local, r) * hidden; }
  SY_HD int64_t hidden_scales_row(int local, int64_t r) const {
    return row(local, r) * (hidden / kMoeScaleBlock);
  }
  SY_HD int64_t activation_row(int local, int64_t r) const { return row(local, r) * intermediate; }
  SY_HD int64_t activation_scales_row(int local, int64_t r) const {
    return row(local, r) * (intermediate / kMoeScaleBlock);
  }
  SY_HD int64_t rows() const { return local_experts * capacity; }
};

}  // namespace switchyard::common
