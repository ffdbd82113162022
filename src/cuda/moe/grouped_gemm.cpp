// make_grouped_gemm: the kind's CUTLASS kernel where the build has the CUTLASS headers, else a named
// refusal (cmake/cutlass.cmake; scripts/install-cutlass.sh installs them).
#include "cuda/moe/grouped_gemm.hpp"

#include <string>
#include <type_traits>

#include "cuda/moe/grouped_gemm_kinds.hpp"
#include "switchyard/errors.hpp"

namespace switchyard::cuda {

const char* grouped_gemm_kind_name(GroupedGemmKind kind) {
  switch (kind) {
    case GroupedGemmKind::bf16_to_bf16:
      return "bf16 -> bf16";
    case GroupedGemmKind::fp8_to_bf16:
      return "fp8 blockwise -> bf16";
    case GroupedGemmKind::fp8_swiglu_to_fp8:
      return "fp8 blockwise -> swiglu -> fp8";
    case GroupedGemmKind::fp8_to_bf16_home:
      return "fp8 blockwise -> bf16 rows home";
  }
  return "unknown";
}

bool grouped_gemm_is_fp8(GroupedGemmKind kind) {
  return kind == GroupedGemmKind::fp8_to_bf16 || kind == GroupedGemmKind::fp8_swiglu_to_fp8 ||
         kind == GroupedGemmKind::fp8_to_bf16_home;
}

const char* grouped_gemm_tile_name(GroupedGemmTile tile) {
  switch (tile) {
    case GroupedGemmTile::m128:
      return "m128";
    case GroupedGemmTile::m128_cluster2m:
      return "m128_cluster2m";
    case GroupedGemmTile::m128_cluster2n:
      return "m128_cluster2n";
    case GroupedGemmTile::m64_pingpong:
      return "m64_pingpong";
  }
  return "unknown";
}

GroupedGemmTile grouped_gemm_tile_from_name(const std::string& name, const char* what) {
  std::string names;
  for (GroupedGemmTile tile : kGroupedGemmTiles) {
    if (name == grouped_gemm_tile_name(tile)) return tile;
    names += std::string(names.empty() ? "" : ", ") + grouped_gemm_tile_name(tile);
  }
  throw InvalidArgument(std::string(what) + ": expected a grouped GEMM tile (" + names + "), got '" + name +
                        "'");
}

#if defined(SWITCHYARD_WITH_CUTLASS)
namespace {

using namespace grouped_gemm_detail;

// Calls f.template operator()<kind, tile>() for the (kind, tile) given at run time; false where the kind
// has no kernel in that tile (the bf16 kinds, fp8_swiglu_to_fp8 and fp8_to_bf16_home come in m128 only).
template <class F>
bool with_kernel(GroupedGemmKind kind, GroupedGemmTile tile, F&& f) {
  const auto fp8_tiles = [&](auto kind_constant) {
    constexpr GroupedGemmKind k = decltype(kind_constant)::value;
    switch (tile) {
      case GroupedGemmTile::m128:
        f.template operator()<k, GroupedGemmTile::m128>();
        return true;
      case GroupedGemmTile::m128_cluster2m:
        f.template operator()<k, GroupedGemmTile::m128_cluster2m>();
        return true;
      case GroupedGemmTile::m128_cluster2n:
        f.template operator()<k, GroupedGemmTile::m128_cluster2n>();
        return true;
      case GroupedGemmTile::m64_pingpong:
        f.template operator()<k, GroupedGemmTile::m64_pingpong>();
        return true;
    }
    return false;
  };
  switch (kind) {
    case GroupedGemmKind::bf16_to_bf16:
      if (tile != GroupedGemmTile::m128) return false;
      f.template operator()<GroupedGemmKind::bf16_to_bf16, GroupedGemmTile::m128>();
      return true;
    case GroupedGemmKind::fp8_to_bf16:
      return fp8_tiles(std::integral_constant<GroupedGemmKind, GroupedGemmKind::fp8_to_bf16>{});
    case GroupedGemmKind::fp8_swiglu_to_fp8:
      if (tile != GroupedGemmTile::m128) return false;
      f.template operator()<GroupedGemmKind::fp8_swiglu_to_fp8, GroupedGemmTile::m128>();
      return true;
    case GroupedGemmKind::fp8_to_bf16_home:
      if (tile != GroupedGemmTile::m128) return false;
      f.template operator()<GroupedGemmKind::fp8_to_bf16_home, GroupedGemmTile::m128>();
      return true;
  }
  return false;
}

struct PrepareKernel {
  template <GroupedGemmKind kKind, GroupedGemmTile kTile>
  void operator()() const {
    prepare_kernel<kKind, kTile>();
  }
};

struct MakeKernel {
  const GroupedGemmOperands& operands;
  cudaStream_t stream;
  std::unique_ptr<GroupedGemm>& made;
  template <GroupedGemmKind kKind, GroupedGemmTile kTile>
  void operator()() const {
    made = make_kernel<kKind, kTile>(operands, stream);
  }
};

}  // namespace
#endif

void prepare_grouped_gemms() {
#if defined(SWITCHYARD_WITH_CUTLASS)
  for (GroupedGemmKind kind : {GroupedGemmKind::bf16_to_bf16, GroupedGemmKind::fp8_to_bf16,
                               GroupedGemmKind::fp8_swiglu_to_fp8, GroupedGemmKind::fp8_to_bf16_home}) {
    for (GroupedGemmTile tile : kGroupedGemmTiles) {
      with_kernel(kind, tile, PrepareKernel{});
    }
  }
#endif
}

std::unique_ptr<GroupedGemm> make_grouped_gemm(GroupedGemmKind kind, const GroupedGemmOperands& operands,
                                               cudaStream_t stream, GroupedGemmTile tile) {
#if defined(SWITCHYARD_WITH_CUTLASS)
  std::unique_ptr<GroupedGemm> gemm;
  const bool made = with_kernel(kind, tile, MakeKernel{operands, stream, gemm});
  if (!made) {
    throw Unsupported(std::string("MoeLayer: the grouped GEMM ") + grouped_gemm_kind_name(kind) +
                      " comes in the m128 tile only; got tile " + grouped_gemm_tile_name(tile));
  }
  return gemm;
#else
  (void)operands;
  (void)stream;
  (void)tile;
  throw Unsupported(std::string("MoeLayer: this build of switchyard has no CUTLASS headers, which the CUDA "
                                "expert phase's grouped GEMMs (") +
                    grouped_gemm_kind_name(kind) +
                    ") come from; run scripts/install-cutlass.sh and rebuild (cmake/cutlass.cmake)");
#endif
}

}  // namespace switchyard::cuda
