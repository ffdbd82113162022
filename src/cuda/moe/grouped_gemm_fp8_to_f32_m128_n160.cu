// The grouped GEMM kind fp8_to_f32 in the m128_n160 tile (grouped_gemm.hpp), instantiated on its own: one
// CUTLASS kernel per file.
#include "cuda/moe/grouped_gemm_kernel.cuh"

namespace switchyard::cuda::grouped_gemm_detail {

SWITCHYARD_GROUPED_GEMM_INSTANCE(fp8_to_f32, m128_n160)

}  // namespace switchyard::cuda::grouped_gemm_detail
