// make_grouped_gemm: the kind's CUTLASS kernel where the build has the CUTLASS headers, else a named
// refusal (cmake/cutlass.cmake; scripts/install-cutlass.sh installs them).
#include "cuda/moe/grouped_gemm.hpp"

#include <string>

#include "cuda/moe/grouped_gemm_kinds.hpp"
#include "switchyard/errors.hpp"

namespace switchyard::cuda {

const char* grouped_gemm_kind_name(GroupedGemmKind kind) {
  switch (kind) {
    case GroupedGemmKind::bf16_to_f32:
      return "bf16 -> f32";
    case GroupedGemmKind::bf16_to_bf16:
      return "bf16 -> bf16";
    case GroupedGemmKind::fp8_to_f32:
      return "fp8 blockwise -> f32";
    case GroupedGemmKind::fp8_to_bf16:
      return "fp8 blockwise -> bf16";
  }
  return "unknown";
}

bool grouped_gemm_is_fp8(GroupedGemmKind kind) {
  return kind == GroupedGemmKind::fp8_to_f32 || kind == GroupedGemmKind::fp8_to_bf16;
}

void prepare_grouped_gemms() {
#if defined(SWITCHYARD_WITH_CUTLASS)
  using namespace grouped_gemm_detail;
  prepare_bf16_to_f32();
  prepare_bf16_to_bf16();
  prepare_fp8_to_f32();
  prepare_fp8_to_bf16();
#endif
}

std::unique_ptr<GroupedGemm> make_grouped_gemm(GroupedGemmKind kind, const GroupedGemmOperands& operands,
                                               cudaStream_t stream) {
#if defined(SWITCHYARD_WITH_CUTLASS)
  using namespace grouped_gemm_detail;
  switch (kind) {
    case GroupedGemmKind::bf16_to_f32:
      return make_bf16_to_f32(operands, stream);
    case GroupedGemmKind::bf16_to_bf16:
      return make_bf16_to_bf16(operands, stream);
    case GroupedGemmKind::fp8_to_f32:
      return make_fp8_to_f32(operands, stream);
    case GroupedGemmKind::fp8_to_bf16:
      return make_fp8_to_bf16(operands, stream);
  }
  throw InvalidArgument("make_grouped_gemm: unknown kind");
#else
  (void)operands;
  (void)stream;
  throw Unsupported(std::string("MoeLayer: this build of switchyard has no CUTLASS headers, which the CUDA "
                                "expert phase's grouped GEMMs (") +
                    grouped_gemm_kind_name(kind) +
                    ") come from; run scripts/install-cutlass.sh and rebuild (cmake/cutlass.cmake)");
#endif
}

}  // namespace switchyard::cuda
