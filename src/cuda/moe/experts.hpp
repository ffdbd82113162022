#pragma once
// The CUDA backend's MoE expert phase (docs/MOE.md, "The unfused CUDA path"), between the layer's
// symmetric dispatch and combine, as four kernels on the call's stream:
//   1. problem shapes: M_g = min(recv_count[g], C) for both grouped GEMMs (read on the device only);
//   2. GEMM 1: h [L, C, 2I] bf16 = recv_x . W1^T (CUTLASS grouped, cuda/moe/grouped_gemm.hpp);
//   3. SwiGLU: a = silu(gate) * up, rounded to bf16 or requantised to e4m3 per 128 channels (or, with fp8
//      weights in MoeGateUp::interleaved, in GEMM 1's epilogue: swiglu_epilogue.cuh);
//   4. GEMM 2: o [L, C, H] bf16 = a . W2^T;
//      or, with plan.rows_home (MoeExpertOutput::home), each row of o straight into its home's combine
//      buffer (home_rows_epilogue.cuh), at places a kernel writes first from MoeExpertsCall::home_rows;
//   5. a cross-rank barrier of one block per rank (`barrier`, the symmetric engine's): no rank's
//      combine grid may spin on SMs that a peer sharing the GPU still needs for its GEMMs
//      (cuda/symmetric/barrier_kernel.cu says why).
// Nothing is read on the host and nothing is allocated per call, so the phase is captured in a CUDA
// graph as it is, and a replay follows the routing of the dispatch it replays after.
#include <cuda_runtime.h>

#include <functional>
#include <memory>

#include "core/backend.hpp"
#include "core/moe_plan.hpp"
#include "cuda/moe/grouped_gemm.hpp"

namespace switchyard::cuda {

// Loads the phase's kernels (CUTLASS's included, where the build has them) into the current device's
// context and sets their shared-memory attributes: from the backend's constructor, before any rank
// launches (cuda/backend/kernel_preload.hpp).
void prepare_moe_kernels(int device);

// The CUTLASS tiles of the two GEMMs (fp8 only; the bf16 recipe's kernels come in m128 alone).
struct MoeGemmTiles {
  GroupedGemmTile gemm1 = GroupedGemmTile::m128;
  GroupedGemmTile gemm2 = GroupedGemmTile::m128;
};

// The layer's two grouped GEMMs over a plan's tensors (h = recv_x . W1^T, o = a . W2^T), their per-expert
// arrays built on `stream`: the expert phase's, and the bench's same GEMMs run alone
// (tools/moe_bench), so that both time one construction.
struct MoeGroupedGemms {
  // Shared: a layer's pair for few rows and its pair for many hold one runner where their tiles agree.
  std::shared_ptr<GroupedGemm> gemm1;
  std::shared_ptr<GroupedGemm> gemm2;
  // fp8 weights in MoeGateUp::interleaved: GEMM 1 writes a (SwiGLU and the requantisation in its
  // epilogue), and no SwiGLU kernel runs.
  bool gemm1_applies_swiglu = false;
  MoeGemmTiles tiles;  // the tiles the two GEMMs run in (moe_gemm_tiles_in_effect)
};

// SWITCHYARD_MOE_GEMM_TILES="<gemm 1 tile>,<gemm 2 tile>" (a tuning override, e.g. "m64_pingpong,m128",
// for every call; InvalidArgument naming the variable otherwise); false where unset or empty.
bool moe_gemm_tiles_from_environment(MoeGemmTiles& tiles);

// Whether a call's experts, expecting `expected_rows_per_expert` rows, have few rows: the fused kernel
// would pick its small BLOCK_M for them (common/moe_fused_schedule.hpp).
bool moe_few_rows(int64_t expected_rows_per_expert);

// The fp8 layer's tiles for a call whose experts expect `expected_rows_per_expert` rows: 64
// (m64_pingpong) for few rows (moe_few_rows), else m128.
// NOTES (session 16, one H200, DeepSeek-V3 shape, 8 ranks): at 32 rows per expert (128 tokens per rank)
// m64_pingpong's GEMMs take 3542 us against m128's 4622 (the layer 3108 us against 3876); at ~1000
// (4096 tokens) 41266 against 28911.
MoeGemmTiles moe_gemm_tiles_for(int64_t expected_rows_per_expert);

// The tiles a plan's GEMMs run in when `wanted` is asked for: GEMM 1 with SwiGLU in its epilogue (fp8,
// MoeGateUp::interleaved) and GEMM 2 writing rows home come in m128 alone, and so do the bf16 kernels.
MoeGemmTiles moe_gemm_tiles_in_effect(const detail::MoeExpertsPlan& plan, MoeGemmTiles wanted);

// `home_places` (plan.rows_home only): the [L, C] row places GEMM 2's epilogue reads (CudaMoeExperts writes
// them each call); GEMM 2 is then fp8_to_bf16_home, in m128 whatever `tiles` says.
// `share`: a pair built for the same plan, places and stream; a GEMM whose tile in effect is the same as
// its one there is that runner, not a second (the kernels and arrays are the same, and every call writes
// its problem shapes before it runs).
MoeGroupedGemms make_moe_grouped_gemms(const detail::MoeExpertsPlan& plan, cudaStream_t stream,
                                       MoeGemmTiles tiles = {}, uint8_t* const* home_places = nullptr,
                                       const MoeGroupedGemms* share = nullptr);

class CudaMoeExperts final : public detail::MoeExperts {
 public:
  // Builds both grouped GEMMs' per-expert arrays on `stream` (the buffer's), once for the layer.
  // fp8: a pair for few rows and one for many (moe_gemm_tiles_for), each call running the one that
  // moe_few_rows picks for its expected rows;
  // bf16, or a tiles override from the environment: one pair for every call.
  CudaMoeExperts(const detail::MoeExpertsPlan& plan, cudaStream_t stream,
                 std::function<void(cudaStream_t)> barrier);
  void run(const detail::MoeExpertsCall& call) override;

 private:
  detail::MoeExpertsPlan plan_;
  std::function<void(cudaStream_t)> barrier_;
  MoeGroupedGemms few_rows_;   // the small-BLOCK_M tiles (fp8 only, without an override)
  MoeGroupedGemms many_rows_;  // m128, or the override's tiles, or bf16's
  // plan.rows_home: [L, C] addresses, each received row's place in its home's combine buffer (or null),
  // written before GEMM 1 on every call and read by GEMM 2's epilogue.
  std::shared_ptr<void> home_places_;
};

}  // namespace switchyard::cuda
