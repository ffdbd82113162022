// The grouped GEMM kind bf16_to_f32 (grouped_gemm.hpp), instantiated on its own: one CUTLASS kernel per file.
#include "cuda/moe/grouped_gemm_kernel.cuh"
#include "cuda/moe/grouped_gemm_kinds.hpp"

namespace switchyard::cuda::grouped_gemm_detail {

std::unique_ptr<GroupedGemm> make_bf16_to_f32(const GroupedGemmOperands& operands, cudaStream_t stream) {
  return std::make_unique<Runner<Bf16Kernel<float>>>(GroupedGemmKind::bf16_to_f32, operands, stream);
}

void prepare_bf16_to_f32() {
  Runner<Bf16Kernel<float>>::prepare();
}

}  // namespace switchyard::cuda::grouped_gemm_detail
