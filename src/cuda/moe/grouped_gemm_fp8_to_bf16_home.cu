// The grouped GEMM kind fp8_to_bf16_home in the m128 tile (grouped_gemm.hpp), instantiated on its own: one
// CUTLASS kernel per file.
#include "cuda/moe/grouped_gemm_kernel.cuh"

namespace switchyard::cuda::grouped_gemm_detail {

SWITCHYARD_GROUPED_GEMM_INSTANCE(fp8_to_bf16_home, m128)

}  // namespace switchyard::cuda::grouped_gemm_detail
