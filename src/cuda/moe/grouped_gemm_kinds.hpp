#pragma once
// One factory per grouped GEMM (kind, tile), each instantiated in its own grouped_gemm_<kind>[_<tile>].cu
// (built only where the CUTLASS headers are: a CUTLASS kernel takes minutes to compile, and one per file
// lets them compile in parallel); make_grouped_gemm (grouped_gemm.cpp) picks among them.
#include <memory>

#include "cuda/moe/grouped_gemm.hpp"

namespace switchyard::cuda::grouped_gemm_detail {

template <GroupedGemmKind kKind, GroupedGemmTile kTile>
std::unique_ptr<GroupedGemm> make_kernel(const GroupedGemmOperands& operands, cudaStream_t stream);

template <GroupedGemmKind kKind, GroupedGemmTile kTile>
void prepare_kernel();

}  // namespace switchyard::cuda::grouped_gemm_detail
