#pragma once
// The MoE layer's grouped GEMMs on CUDA (docs/MOE.md, "The unfused CUDA path"): for every local expert g,
// D_g [M_g, N] = A_g [M_g, K] . B_g [N, K]^T, accumulated in fp32, each a CUTLASS Hopper kernel
// (warp-specialised TMA + WGMMA, pointer-array grouped, persistent). M_g is read on the device, from a
// problem-shape array a kernel of the caller writes on the same stream, so a call needs no host
// synchronisation and is capturable in a CUDA graph; N, K and every pointer are fixed for the layer's life.
//
// This header names no CUTLASS type: the kernels are instantiated in grouped_gemm_*.cu, one per kind,
// so that each compiles on its own.
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <string>

#include "common/moe_layout.hpp"

namespace switchyard::cuda {

// Both GEMMs of the layer round D to bf16 once, to nearest even (docs/MOE.md rounding points 2 and 6): GEMM 1
// gives h, GEMM 2 gives o.
enum class GroupedGemmKind {
  bf16_to_bf16,  // bf16 A and B, fp32 accumulation, bf16 D
  fp8_to_bf16,   // e4m3 A with one f32 scale per row and 128 K, e4m3 B with one per 128 x 128 block
  // GEMM 1 of the fp8 layer with SwiGLU and the requantisation in its epilogue (swiglu_epilogue.cuh):
  // B is W1 with gate and up interleaved in 64-row blocks and its scales' rows alternating gate, up
  // (common::MoeGateUp::interleaved), and the kernel writes a (e4m3) and its scales where
  // GroupedGemmOperands::swiglu says, never h. The m128 tile only, in clusters of two CTAs along N (the two
  // halves of a requantisation block, trading each row's amax).
  fp8_swiglu_to_fp8,
  // GEMM 2 of the fp8 layer with its rows written home (MoeExpertOutput::home, home_rows_epilogue.cuh):
  // fp8_to_bf16's m128 mainloop, and each row of D goes where GroupedGemmOperands::home says (its home
  // rank's combine buffer), never to d. The m128 tile only; N a multiple of 128.
  fp8_to_bf16_home,
};
const char* grouped_gemm_kind_name(GroupedGemmKind kind);
bool grouped_gemm_is_fp8(GroupedGemmKind kind);

// The CUTLASS kernel's tile (fp8 kinds; the bf16 kinds have m128 only). Every tile gives the same bits
// (the K blocks are summed in one order whatever the tile); they differ in speed by shape (NOTES,
// session 16: the sweep in switchyard-moe-bench --gemm-tiles).
enum class GroupedGemmTile {
  m128,            // cooperative: two consumer warpgroups on one 128 x 128 tile (K 128 a stage)
  m128_cluster2m,  // m128 in clusters of 2 along M: the weights' tile multicast to both
  m128_cluster2n,  // m128 in clusters of 2 along N: the rows' tile multicast to both
  m64_pingpong,    // pingpong: each consumer warpgroup its own 64 x 128 tile, epilogues overlapped
};
constexpr GroupedGemmTile kGroupedGemmTiles[] = {GroupedGemmTile::m128, GroupedGemmTile::m128_cluster2m,
                                                 GroupedGemmTile::m128_cluster2n,
                                                 GroupedGemmTile::m64_pingpong};
const char* grouped_gemm_tile_name(GroupedGemmTile tile);
// The tile named `name` (grouped_gemm_tile_name's spelling); throws InvalidArgument naming `what`, the
// names, and what was given.
GroupedGemmTile grouped_gemm_tile_from_name(const std::string& name, const char* what);

// Where fp8_swiglu_to_fp8 writes: a [L, C, I] e4m3 and its scales [L, C, I / 128] (the layout's
// activation rows, as the separate SwiGLU kernel writes them), and the clamp of docs/MOE.md rounding
// point 3. The groups are the layout's local experts.
struct GroupedGemmSwigluOutputs {
  common::MoeWorkspaceLayout space{};
  float clamp = 0.0f;
  uint8_t* activations = nullptr;
  float* activation_scales = nullptr;
};

// Where fp8_to_bf16_home writes: row r of group g's D goes to places[g * capacity + r] (its 2N bytes, a
// bf16 row; null: the row is not written), an address any rank's mapping reaches (the layer writes them
// from common::SymmetricHomeRows before the GEMM runs, cuda/moe/experts.cu).
struct GroupedGemmHomeOutputs {
  uint8_t* const* places = nullptr;
  int64_t capacity = 0;
};

// Row-major, dense operands of `groups` experts; group g's tensors start at base + g * group_stride
// (elements of the operand's own type). Scales (fp8 kinds only): A's [rows, K / 128] per group, B's
// [N / 128, K / 128] per group, both row-major (K fastest), as the dispatch and the checkpoint lay them.
struct GroupedGemmOperands {
  int groups = 0;
  int n = 0;  // columns of D, rows of B
  int k = 0;  // the reduction
  const void* a = nullptr;
  int64_t a_group_stride = 0;
  const void* b = nullptr;
  int64_t b_group_stride = 0;
  void* d = nullptr;
  int64_t d_group_stride = 0;
  const float* a_scales = nullptr;
  int64_t a_scales_group_stride = 0;
  const float* b_scales = nullptr;
  int64_t b_scales_group_stride = 0;
  GroupedGemmSwigluOutputs swiglu;  // fp8_swiglu_to_fp8 only (d is unused there)
  GroupedGemmHomeOutputs home;      // fp8_to_bf16_home only (d is unused there)
};

class GroupedGemm {
 public:
  virtual ~GroupedGemm() = default;
  // {M_g, N, K} for each group, int32, on the device: the caller writes them (M_g in [0, rows of A's
  // group]) on `stream` before run(). Zero rows is a group with no tiles.
  virtual int32_t* problem_shapes() const = 0;
  // Enqueues the kernel; captured in a CUDA graph as it is (nothing is read on the host).
  virtual void run(cudaStream_t stream) = 0;
};

// Loads every (kind, tile)'s kernel and sets its shared-memory attribute (nothing without CUTLASS).
void prepare_grouped_gemms();

// Allocates the per-group pointer and stride arrays and the kernel's workspace on the current device
// and initialises the kernel's parameters once. Throws Unsupported where the build has no CUTLASS, the
// kind has no such tile, or the kernel cannot implement the operands (alignment), naming why.
std::unique_ptr<GroupedGemm> make_grouped_gemm(GroupedGemmKind kind, const GroupedGemmOperands& operands,
                                               cudaStream_t stream,
                                               GroupedGemmTile tile = GroupedGemmTile::m128);

}  // namespace switchyard::cuda
