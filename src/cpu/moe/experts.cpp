#include "cpu/moe/experts.hpp"

#include <algorithm>
#include <vector>

#include "common/numeric.hpp"
#include "cpu/moe/grouped_gemm.hpp"
#include "cpu/moe/swiglu.hpp"

namespace switchyard::cpu {

namespace {

// One local expert's received rows, through both GEMMs; h is the workspace's [C, 2I] bf16 rows of the
// expert, rounded from GEMM 1's fp32 sums in `sums` (docs/MOE.md rounding point 2).
// With `home` (MoeExpertOutput::home) each row of o goes to its home's combine buffer, in `half`, instead of
// the workspace: where the symmetric combine's pusher would copy it (common/symmetric_home_rows.hpp).
void run_expert(const detail::MoeExpertsPlan& plan, int local, int64_t rows, std::vector<float>& sums,
                std::vector<float>& out_f32, const common::SymmetricHomeRows* home, int half) {
  const common::MoeWeightLayout& weights = plan.weights;
  const common::MoeWorkspaceLayout& space = plan.workspace;
  const int hidden = space.hidden, intermediate = space.intermediate;
  const int64_t two_i = weights.w1_rows();
  uint16_t* h = plan.gate_up + space.row(local, 0) * two_i;
  sums.resize(static_cast<size_t>(rows * two_i));
  out_f32.resize(static_cast<size_t>(rows * hidden));
  const auto round_h = [&] {
    for (int64_t i = 0; i < rows * two_i; ++i) h[i] = common::float_to_bf16(sums[i]);
  };
  if (plan.fp8) {
    const uint8_t* w1 = static_cast<const uint8_t*>(plan.w1) + weights.w1_row(local, 0);
    const uint8_t* w2 = static_cast<const uint8_t*>(plan.w2) + weights.w2_row(local, 0);
    const float* w1_scales = plan.w1_scales + weights.w1_scales_row(local, 0);
    const float* w2_scales = plan.w2_scales + weights.w2_scales_row(local, 0);
    const uint8_t* x = static_cast<const uint8_t*>(plan.recv_x) + space.hidden_row(local, 0);
    const float* x_scales = plan.recv_x_scales + space.hidden_scales_row(local, 0);
    uint8_t* a = static_cast<uint8_t*>(plan.activations) + space.activation_row(local, 0);
    float* a_scales = plan.activation_scales + space.activation_scales_row(local, 0);
    gemm_fp8_blockwise(x, x_scales, rows, w1, w1_scales, two_i, hidden, sums.data(), &weights);
    round_h();
    swiglu_to_fp8(weights, h, rows, plan.activation_clamp, a, a_scales);
    gemm_fp8_blockwise(a, a_scales, rows, w2, w2_scales, hidden, intermediate, out_f32.data());
  } else {
    const uint16_t* w1 = static_cast<const uint16_t*>(plan.w1) + weights.w1_row(local, 0);
    const uint16_t* w2 = static_cast<const uint16_t*>(plan.w2) + weights.w2_row(local, 0);
    const uint16_t* x = static_cast<const uint16_t*>(plan.recv_x) + space.hidden_row(local, 0);
    uint16_t* a = static_cast<uint16_t*>(plan.activations) + space.activation_row(local, 0);
    gemm_bf16(x, rows, w1, two_i, hidden, sums.data());
    round_h();
    swiglu_to_bf16(weights, h, rows, plan.activation_clamp, a);
    gemm_bf16(a, rows, w2, hidden, intermediate, out_f32.data());
  }
  for (int64_t row = 0; row < rows; ++row) {
    // With the rows home there is no o in the workspace (plan.out is null).
    uint16_t* const out = home != nullptr ? reinterpret_cast<uint16_t*>(home->place(local, row, half))
                                          : plan.out + space.hidden_row(local, row);
    if (out == nullptr) continue;  // a masked home: the pusher would not write it either
    const float* sums_row = out_f32.data() + row * hidden;
    for (int c = 0; c < hidden; ++c) out[c] = common::float_to_bf16(sums_row[c]);
  }
}

}  // namespace

void CpuMoeExperts::run(const detail::MoeExpertsCall& call) {
  const detail::MoeExpertsPlan& plan = plan_;
  detail::check_home_rows_given(plan, call);
  const int half = call.home_rows != nullptr ? call.home_rows->combine_half() : 0;
  std::vector<float> sums, out_f32;  // reused across experts
  for (int local = 0; local < plan.workspace.local_experts; ++local) {
    // The dispatch refuses a call whose rows overflow C (CapacityError) before this phase; the bound
    // keeps a count past C from reading outside the workspace all the same.
    const int64_t rows = std::min<int64_t>(plan.recv_count[local], plan.workspace.capacity);
    if (rows > 0) run_expert(plan, local, rows, sums, out_f32, call.home_rows, half);
  }
}

}  // namespace switchyard::cpu
