#pragma once
// GEMM 1's epilogue for the fp8 layer with W1's gate and up rows interleaved in 128-row blocks
// (common::MoeGateUp::interleaved): SwiGLU and the requantisation to e4m3 run on the accumulators, so
// h never leaves the registers. The separate path writes h in fp32 ([L, C, 2I]: 550 MB per rank at
// DeepSeek-V3's 4096 tokens) and reads it back in swiglu_to_fp8_kernel; this writes a (1 byte per
// channel) and its scales, the same bits (docs/MOE.md rounding points 3 and 4; the suite checks the two
// paths against each other).
//
// Why the interleave: an N tile of 256 columns then holds gate block b in columns [0, 128) and up block b
// in [128, 256), so every thread's accumulators hold gate and up of the same channels (a WGMMA thread
// holds the same columns of both halves), and the 128 channels of one requantisation block are one
// tile's row: their amax is the max over the 4 lanes of a quad that hold the row. The weights' 128 x 128
// scale blocks stay whole, which the blockwise mainloop needs.
//
// A CUTLASS collective epilogue in the operator() form that detail::Sm90TmaWarpSpecializedAdapter wraps
// for the warp-specialised kernels (as CUTLASS's DefaultEpilogueArray is): no shared memory, so the
// mainloop keeps every stage.
#include <cutlass/cutlass.h>

#include <cstdint>
#include <cute/tensor.hpp>
#include <cutlass/epilogue/collective/detail.hpp>
#include <cutlass/epilogue/dispatch_policy.hpp>

#include "common/fp8_cast.hpp"
#include "common/moe_layout.hpp"
#include "common/moe_numerics.hpp"
#include "cuda/moe/grouped_gemm.hpp"
#include "device/fp8_cast.cuh"

namespace switchyard::cuda::grouped_gemm_detail {

class SwigluFp8Epilogue {
 public:
  using EpilogueSchedule = cutlass::epilogue::PtrArrayNoSmemWarpSpecialized;
  using DispatchPolicy = EpilogueSchedule;
  // The kernel's and the adapter's type plumbing: no C is read, and D is the e4m3 activations, written
  // by this class rather than through a stride.
  using ThreadEpilogueOp = void;
  using ElementAccumulator = float;
  using ElementC = void;
  using ElementD = uint8_t;
  using StrideC = cute::Stride<int64_t, cute::Int<1>, cute::Int<0>>*;
  using StrideD = StrideC;
  using InternalStrideC = cute::remove_pointer_t<StrideC>;
  using InternalStrideD = cute::remove_pointer_t<StrideD>;
  using GmemTiledCopyC = void;
  using GmemTiledCopyD = void;

  struct SharedStorage {};
  using TensorMapStorage = SharedStorage;

  using Arguments = GroupedGemmSwigluOutputs;
  using Params = GroupedGemmSwigluOutputs;

  template <class ProblemShape>
  static constexpr Params to_underlying_arguments(ProblemShape const&, Arguments const& args, void*) {
    return args;
  }
  template <class ProblemShape>
  static size_t get_workspace_size(ProblemShape const&, Arguments const&, int) {
    return 0;
  }
  template <class ProblemShape>
  static cutlass::Status initialize_workspace(ProblemShape const&, Arguments const&, void*, cudaStream_t,
                                              cutlass::CudaHostAdapter* = nullptr) {
    return cutlass::Status::kSuccess;
  }
  // N must be whole 256-column tiles (128 gate and 128 up channels): the layer's I is a multiple of 128.
  template <class ProblemShape>
  static bool can_implement(ProblemShape const&, Arguments const& args) {
    return args.activations != nullptr && args.activation_scales != nullptr &&
           args.space.intermediate % common::kMoeScaleBlock == 0;
  }

  CUTLASS_HOST_DEVICE explicit SwigluFp8Epilogue(Params const& params) : params_(params) {}

  CUTLASS_DEVICE bool is_source_needed() { return false; }

  template <class ProblemShapeMNKL, class BlockShapeMNK, class BlockCoordMNKL, class FrgEngine,
            class FrgLayout, class TiledMma, class ResidueMNK>
  CUTLASS_DEVICE void operator()(ProblemShapeMNKL problem_shape_mnkl, BlockShapeMNK blk_shape_mnk,
                                 BlockCoordMNKL blk_coord_mnkl,
                                 cute::Tensor<FrgEngine, FrgLayout> const& accumulators, TiledMma tiled_mma,
                                 ResidueMNK, int thread_idx, char*) {
    using namespace cute;
    static_assert(size<1>(BlockShapeMNK{}) == 2 * common::kMoeScaleBlock,
                  "the tile's N is one gate block and its up block");
    // One WGMMA atom along M per warpgroup: each thread holds 2 rows (r and r + 8 of its warp's 16), and
    // the N mode is the outermost of the fragment, so the first half of the flat fragment is the gate
    // columns [0, 128) and the second half the same rows and columns + 128 (the up columns), in order.
    static_assert(size<1>(FrgLayout{}) == 1, "one MMA atom along M per warpgroup");
    constexpr int kValues = decltype(size(accumulators))::value;
    constexpr int kHalf = kValues / 2;

    const int rows = get<0>(problem_shape_mnkl);
    const auto [m_coord, n_coord, k_coord, l_coord] = blk_coord_mnkl;
    const int local = static_cast<int>(l_coord);
    const int block = static_cast<int>(n_coord);  // the requantisation block: a channels [128 b, 128 b + 128)

    // Tile-local (row, column) of each accumulator.
    Tensor tile_coords = make_identity_tensor(take<0, 2>(blk_shape_mnk));
    Tensor thread_coords = tiled_mma.get_thread_slice(thread_idx).partition_C(tile_coords);
    const int row0 = get<0>(thread_coords(0));

    float a[kHalf];
    float amax[2] = {0.0f, 0.0f};  // this thread's two rows: row0 and the other
    int slot_row[2] = {row0, row0};
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < kHalf; ++i) {
      a[i] = common::swiglu(accumulators(i), accumulators(i + kHalf), params_.clamp);
      const int slot = get<0>(thread_coords(i)) == row0 ? 0 : 1;
      slot_row[slot] = get<0>(thread_coords(i));
      amax[slot] = fmaxf(amax[slot], fabsf(a[i]));
    }
    // The quad (lanes 4q .. 4q + 3) holds a row's 128 channels; max is exact in any order, and fmaxf drops
    // a NaN as the separate kernel and the CPU do.
    CUTLASS_PRAGMA_UNROLL
    for (int slot = 0; slot < 2; ++slot) {
      amax[slot] = fmaxf(amax[slot], __shfl_xor_sync(0xffffffffu, amax[slot], 1));
      amax[slot] = fmaxf(amax[slot], __shfl_xor_sync(0xffffffffu, amax[slot], 2));
    }
    float scale[2], inverse[2];
    CUTLASS_PRAGMA_UNROLL
    for (int slot = 0; slot < 2; ++slot) {
      scale[slot] = common::fp8_block_scale(amax[slot], false);
      inverse[slot] = 1.0f / scale[slot];
    }

    const int tile_row0 = static_cast<int>(m_coord) * size<0>(BlockShapeMNK{});
    const common::MoeWorkspaceLayout& space = params_.space;
    // Adjacent pairs of the fragment are adjacent columns of one row (a WGMMA thread's 2 consecutive
    // values): one 2-byte store each.
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < kHalf; i += 2) {
      const int row = tile_row0 + get<0>(thread_coords(i));
      if (row >= rows) continue;
      const int slot = get<0>(thread_coords(i)) == row0 ? 0 : 1;
      const int channel = block * common::kMoeScaleBlock + get<1>(thread_coords(i));
      const uint32_t pair = fp8x2_e4m3(a[i] * inverse[slot], a[i + 1] * inverse[slot]);
      *reinterpret_cast<uint16_t*>(params_.activations + space.activation_row(local, row) + channel) =
          static_cast<uint16_t>(pair);
    }
    if (thread_idx % 4 == 0) {
      CUTLASS_PRAGMA_UNROLL
      for (int slot = 0; slot < 2; ++slot) {
        const int row = tile_row0 + slot_row[slot];
        if (row < rows)
          params_.activation_scales[space.activation_scales_row(local, row) + block] = scale[slot];
      }
    }
  }

 private:
  Params params_;
};

}  // namespace switchyard::cuda::grouped_gemm_detail
