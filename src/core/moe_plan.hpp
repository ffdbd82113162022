#pragma once
// The MoE layer's checks (docs/MOE.md): its weights and options once, against the Buffer, when the
// layer is made; each call's tensors against the layer. Each refusal names the argument, what was
// expected and what was given. Then the plan of the expert phase (between dispatch and combine) that a
// backend runs as it is.
#include <cstdint>

#include "common/moe_layout.hpp"
#include "common/symmetric_home_rows.hpp"
#include "common/symmetric_protocol.hpp"
#include "core/plan_context.hpp"
#include "switchyard/moe.hpp"

namespace switchyard::detail {

// A layer's checked shape and weights.
struct MoeLayerPlan {
  int num_ranks = 0;
  int num_experts = 0;    // E
  int local_experts = 0;  // L = E / num_ranks
  int hidden = 0;         // H
  int intermediate = 0;   // I
  bool fp8 = false;       // the recipe: fp8 weights with block scales, else bf16
  int64_t max_tokens_per_rank = 0;
  int64_t expert_capacity = 0;  // C, resolved (never 0)
  float activation_clamp = 0.0f;
  bool rows_home = false;  // MoeExpertOutput::home: the expert phase writes o's rows into their homes
  MoeWeights weights;

  DType weight_dtype() const { return fp8 ? DType::fp8_e4m3 : DType::bf16; }
  common::MoeWeightLayout weight_layout() const {
    return {hidden, intermediate, common::moe_gate_up(static_cast<int>(weights.gate_up))};
  }
  common::MoeWorkspaceLayout workspace_layout() const {
    return {local_experts, expert_capacity, hidden, intermediate};
  }
};

// `layout` is the Buffer's symmetric region, whose capacities bound the layer's shape.
MoeLayerPlan plan_moe_layer(const MoeWeights& weights, const MoeLayerOptions& options,
                            const PlanContext& buffer, const common::SymmetricLayout& layout);

// The per-call checks the symmetric dispatch and combine do not make: x's dtype for the recipe and
// its hidden for the weights, scales, weights present, out_y.
void check_moe_call(const MoeArgs& args, const MoeLayerPlan& layer, Device device);

// The expert phase of a layer: for every local expert l, its rows r < min(recv_count[l], C) of recv_x
// through GEMM 1, SwiGLU (and the fp8 requantisation) and GEMM 2 into o. Pointers are where the
// backend computes (device memory on CUDA, where recv_count is read by the kernels, never by the host),
// and the same for every call of the layer.
struct MoeExpertsPlan {
  common::MoeWeightLayout weights;
  common::MoeWorkspaceLayout workspace;
  bool fp8 = false;
  float activation_clamp = 0.0f;
  const void* w1 = nullptr;  // uint16_t (bf16) or uint8_t (e4m3)
  const float* w1_scales = nullptr;
  const void* w2 = nullptr;
  const float* w2_scales = nullptr;
  const void* recv_x = nullptr;  // [L, C, H]
  const float* recv_x_scales = nullptr;
  const int32_t* recv_count = nullptr;  // [L]
  uint16_t* gate_up = nullptr;          // h [L, C, 2I], bf16 (docs/MOE.md rounding point 2)
  void* activations = nullptr;          // a [L, C, I]
  float* activation_scales = nullptr;   // [L, C, I / 128], fp8 only
  uint16_t* out = nullptr;              // o [L, C, H], bf16 (not written with rows_home)
  common::SymmetricLayout symmetric;    // the Buffer's symmetric region (the CUDA path's barrier)
  // GEMM 2 writes each row of o into its home's combine buffer (MoeExpertsCall::home_rows), not into `out`.
  bool rows_home = false;
};

// One call of a layer's expert phase: the call's stream, resolved by the backend (a cudaStream_t on
// CUDA; ignored on the CPU); optionally `marks`, four cudaEvent_t recorded on it before GEMM 1, after
// GEMM 1, after SwiGLU and after GEMM 2 (the bench's phase times; CPU: unused); and the rows each expert
// can expect (expected_rows_per_expert), from which CUDA picks its GEMMs' tile (the actual counts stay
// on the device).
struct MoeExpertsCall {
  void* stream = nullptr;
  void* const* marks = nullptr;
  int64_t expected_rows_per_expert = 0;
  // With MoeExpertsPlan::rows_home (and only then): where this call's rows go home, the symmetric engine's
  // description for the combine that follows (SymmetricUnit::home_rows); read during run() only.
  const common::SymmetricHomeRows* home_rows = nullptr;
};

// Throws Error (internal) unless `call` gives the places of the rows home exactly when `plan` writes them
// there (MoeExpertsPlan::rows_home): every backend's expert phase checks it before it writes.
void check_home_rows_given(const MoeExpertsPlan& plan, const MoeExpertsCall& call);

// The rows an expert can expect from a call of `num_tokens` tokens with `topk` slots on each of
// `num_ranks` ranks, routed evenly over `num_experts` (rounded up).
int64_t moe_expected_rows_per_expert(int64_t num_tokens, int64_t topk, int num_ranks, int num_experts);

// A backend's expert phase for one layer, made once with the layer (its pointers are the layer's for
// its life) and run once per call.
class MoeExperts {
 public:
  virtual ~MoeExperts() = default;
  virtual void run(const MoeExpertsCall& call) = 0;
};

// Internal access to a layer for the bench (tools/moe_bench): its phase marks (MoeExperts::run), kept
// until set again; nullptr turns them off.
struct MoeLayerAccess {
  static void set_phase_marks(MoeLayer& layer, void* const* marks);
};

}  // namespace switchyard::detail
