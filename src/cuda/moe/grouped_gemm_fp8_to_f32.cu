// The grouped GEMM kind fp8_to_f32 (grouped_gemm.hpp), instantiated on its own: one CUTLASS kernel per file.
#include "cuda/moe/grouped_gemm_kernel.cuh"
#include "cuda/moe/grouped_gemm_kinds.hpp"

namespace switchyard::cuda::grouped_gemm_detail {

std::unique_ptr<GroupedGemm> make_fp8_to_f32(const GroupedGemmOperands& operands, cudaStream_t stream) {
  return std::make_unique<Runner<Fp8BlockwiseKernel<float>>>(GroupedGemmKind::fp8_to_f32, operands, stream);
}

void prepare_fp8_to_f32() {
  Runner<Fp8BlockwiseKernel<float>>::prepare();
}

}  // namespace switchyard::cuda::grouped_gemm_detail
