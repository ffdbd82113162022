#pragma once
// The CUDA backend's MoE expert phase (docs/MOE.md, "The unfused CUDA path"), between the layer's
// symmetric dispatch and combine, as four kernels on the call's stream:
//   1. problem shapes: M_g = min(recv_count[g], C) for both grouped GEMMs (read on the device only);
//   2. GEMM 1: h [L, C, 2I] fp32 = recv_x . W1^T (CUTLASS grouped, cuda/moe/grouped_gemm.hpp);
//   3. SwiGLU: a = silu(gate) * up, rounded to bf16 or requantised to e4m3 per 128 channels;
//   4. GEMM 2: o [L, C, H] bf16 = a . W2^T;
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

// The layer's two grouped GEMMs over a plan's tensors (h = recv_x . W1^T, o = a . W2^T), their per-expert
// arrays built on `stream`: the expert phase's, and the bench's same GEMMs run alone
// (tools/moe_bench), so that both time one construction.
struct MoeGroupedGemms {
  std::unique_ptr<GroupedGemm> gemm1;
  std::unique_ptr<GroupedGemm> gemm2;
};
MoeGroupedGemms make_moe_grouped_gemms(const detail::MoeExpertsPlan& plan, cudaStream_t stream);

class CudaMoeExperts final : public detail::MoeExperts {
 public:
  // Builds both grouped GEMMs' per-expert arrays on `stream` (the buffer's), once for the layer.
  CudaMoeExperts(const detail::MoeExpertsPlan& plan, cudaStream_t stream,
                 std::function<void(cudaStream_t)> barrier);
  void run(void* stream, void* const* marks) override;

 private:
  detail::MoeExpertsPlan plan_;
  std::function<void(cudaStream_t)> barrier_;
  std::unique_ptr<GroupedGemm> gemm1_;
  std::unique_ptr<GroupedGemm> gemm2_;
};

}  // namespace switchyard::cuda
