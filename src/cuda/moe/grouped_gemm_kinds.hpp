#pragma once
// One factory per grouped GEMM kind, each defined in its own grouped_gemm_<kind>.cu (built only where
// the CUTLASS headers are); make_grouped_gemm (grouped_gemm.cpp) picks among them.
#include <memory>

#include "cuda/moe/grouped_gemm.hpp"

namespace switchyard::cuda::grouped_gemm_detail {

std::unique_ptr<GroupedGemm> make_bf16_to_f32(const GroupedGemmOperands& operands, cudaStream_t stream);
void prepare_bf16_to_f32();
std::unique_ptr<GroupedGemm> make_bf16_to_bf16(const GroupedGemmOperands& operands, cudaStream_t stream);
void prepare_bf16_to_bf16();
std::unique_ptr<GroupedGemm> make_fp8_to_f32(const GroupedGemmOperands& operands, cudaStream_t stream);
void prepare_fp8_to_f32();
std::unique_ptr<GroupedGemm> make_fp8_to_bf16(const GroupedGemmOperands& operands, cudaStream_t stream);
void prepare_fp8_to_bf16();

}  // namespace switchyard::cuda::grouped_gemm_detail
