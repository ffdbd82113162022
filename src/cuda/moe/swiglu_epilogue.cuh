#pragma once
// GEMM 1's epilogue for the fp8 layer with W1's gate and up rows interleaved in 128-row blocks
// (common::MoeGateUp::interleaved): SwiGLU and the requantisation to e4m3 run on the accumulators, so
// h never leaves the chip. The separate path writes h in bf16 ([L, C, 2I]: 275 MB per rank at
// DeepSeek-V3's 4096 tokens) and reads it back in swiglu_to_fp8_kernel; this rounds the accumulators to
// bf16 in registers as that path's store does, and writes a (1 byte per channel) and its scales, the same
// bits (docs/MOE.md rounding points 3 and 4; the suite checks the two paths against each other).
//
// Why a cluster pair: one tile holding a gate block and its up block would be 256 wide, and CUTLASS's
// blockwise fp8 mainloop keeps two accumulator sets per thread (the sum and each 128-K block's partial),
// which at 256 columns spill (session 19: 1.9x slower). So the tiles stay 128 x 128, in clusters of two
// CTAs along N: with the interleave, the cluster's even N tile is gate block b and its odd one up block b
// (the same rows of x, which the mainloop multicasts to both). The two CTAs trade halves through
// distributed shared memory: the gate CTA's first consumer warpgroup (tile rows 0-63) receives the up
// CTA's rows 0-63, the up CTA's second warpgroup (rows 64-127) receives the gate CTA's rows 64-127, and
// each receiver computes a for its 64 rows x 128 channels: a whole requantisation block per row, so a
// row's amax is the max over the 4 lanes of a quad that hold it, as in the separate kernel.
//
// The sender and the receiver are the same thread index of the same warpgroup in the two CTAs, so they
// hold the same (row, column) coordinates: value i of sender thread t goes to exchange[i / 4][t] (16-byte
// stores, consecutive threads consecutive addresses). Two mbarriers per CTA: `full`, which the stores
// themselves complete (st.async, each counting its bytes on it, as TMA loads do: no fence in the sender)
// and one receiver arms with the tile's 32 KiB, so its phase completes when the data are here; and `read`,
// where the partner's 128 receivers arrive (release, cluster scope) once they have copied the data out. A
// sender waits for `read` before it returns, so it never overwrites data not yet read and no CTA leaves the
// kernel while its partner may still touch its shared memory. The partner runs the same tiles in lockstep
// (CUTLASS's scheduler hands a cluster its tiles together), so these waits end unless the kernel faults;
// like CUTLASS's own pipeline waits, they are not bounded.
//
// A CUTLASS collective epilogue in the operator() form that detail::Sm90TmaWarpSpecializedAdapter wraps
// for the warp-specialised kernels (as CUTLASS's DefaultEpilogueArray is); SwigluPairEpilogue below adds
// the barriers' initialisation, which must precede the kernel's cluster-wide start barrier.
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
#include "device/ptx.cuh"

namespace switchyard::cuda::grouped_gemm_detail {

// The exchange's shape: a 128 x 128 tile over two consumer warpgroups of 128 threads, 64 values each.
constexpr int kSwigluPairThreads = 128;
constexpr int kSwigluPairValues = common::kMoeScaleBlock * common::kMoeScaleBlock / (2 * kSwigluPairThreads);

// Shared memory of one CTA of the pair: the half tile it receives, and its two barriers.
struct SwigluPairStorage {
  float4 exchange[kSwigluPairValues / 4][kSwigluPairThreads];  // 32 KiB
  alignas(8) uint64_t full;
  alignas(8) uint64_t read;
};

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

  using SharedStorage = SwigluPairStorage;
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
  // N must be whole pairs of 128-column tiles (a gate block and its up block): the layer's I is a
  // multiple of 128.
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
                                 ResidueMNK, int thread_idx, char* smem) {
    using namespace cute;
    static_assert(size<0>(BlockShapeMNK{}) == 2 * 64 && size<1>(BlockShapeMNK{}) == common::kMoeScaleBlock,
                  "a 128 x 128 tile: two warpgroups of 64 rows, one requantisation block wide");
    static_assert(size<1>(FrgLayout{}) == 1, "one MMA atom along M per warpgroup");
    constexpr int kValues = decltype(size(accumulators))::value;
    static_assert(kValues == kSwigluPairValues, "the exchange holds one warpgroup's accumulators");
    SwigluPairStorage& storage = *reinterpret_cast<SwigluPairStorage*>(smem);

    const auto [m_coord, n_coord, k_coord, l_coord] = blk_coord_mnkl;
    const int tile_n = static_cast<int>(n_coord);
    const bool gate_tile = tile_n % 2 == 0;  // with the interleave: even N tiles gate, odd ones up
    const int warpgroup = thread_idx / kSwigluPairThreads;
    const int lane_in_group = thread_idx % kSwigluPairThreads;
    const uint32_t partner = ptx::cluster_cta_rank() ^ 1u;
    const uint32_t phase = tiles_ & 1u;
    ++tiles_;

    // The gate CTA computes rows 0-63 (warpgroup 0), the up CTA rows 64-127 (warpgroup 1).
    if (warpgroup != (gate_tile ? 0 : 1)) {
      const uint32_t slot = ptx::smem_address(&storage.exchange[0][lane_in_group]);
      const uint32_t remote = ptx::map_shared_to_cta(slot, partner);
      const uint32_t remote_full = ptx::map_shared_to_cta(ptx::smem_address(&storage.full), partner);
      CUTLASS_PRAGMA_UNROLL
      for (int i = 0; i < kValues; i += 4) {
        ptx::st_async_cluster_v4_f32(remote + (i / 4) * kSwigluPairThreads * sizeof(float4), accumulators(i),
                                     accumulators(i + 1), accumulators(i + 2), accumulators(i + 3),
                                     remote_full);
      }
      while (!ptx::mbarrier_try_wait_parity_acquire_cluster(&storage.read, phase)) {
      }
      return;
    }

    // One receiver announces the phase's bytes (before or after they land: the transaction count may run
    // ahead of the expectation); the phase completes when all 32 KiB are here.
    if (lane_in_group == 0) ptx::mbarrier_arrive_expect_tx(&storage.full, sizeof(storage.exchange));
    while (!ptx::mbarrier_try_wait_parity(&storage.full, phase)) {
    }
    float other[kValues];
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < kValues; i += 4) {
      const float4 v = storage.exchange[i / 4][lane_in_group];
      other[i] = v.x;
      other[i + 1] = v.y;
      other[i + 2] = v.z;
      other[i + 3] = v.w;
    }
    ptx::mbarrier_arrive_release_cluster(ptx::map_shared_to_cta(ptx::smem_address(&storage.read), partner));

    const int rows = get<0>(problem_shape_mnkl);
    const int local = static_cast<int>(l_coord);
    const int block = tile_n / 2;  // the requantisation block: a channels [128 b, 128 b + 128)

    // Tile-local (row, column) of each accumulator: each thread holds 2 rows (r and r + 8 of its warp's 16).
    Tensor tile_coords = make_identity_tensor(take<0, 2>(blk_shape_mnk));
    Tensor thread_coords = tiled_mma.get_thread_slice(thread_idx).partition_C(tile_coords);
    const int row0 = get<0>(thread_coords(0));

    float a[kValues];
    float amax[2] = {0.0f, 0.0f};  // this thread's two rows: row0 and the other
    int slot_row[2] = {row0, row0};
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < kValues; ++i) {
      // h in bf16 (docs/MOE.md rounding point 2), as the separate path stores it.
      const float gate = common::round_h(gate_tile ? accumulators(i) : other[i]);
      const float up = common::round_h(gate_tile ? other[i] : accumulators(i));
      a[i] = common::swiglu(gate, up, params_.clamp);
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
    for (int i = 0; i < kValues; i += 2) {
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
  uint32_t tiles_ = 0;  // tiles this thread's epilogue has run: the barriers' phase
};

// The collective epilogue the kernel holds: CUTLASS's adapter, plus the barriers' initialisation. The
// kernel constructs its epilogue in every thread before the cluster-wide barrier that publishes every
// pipeline's initialisation, so the partner's first arrival finds these initialised.
//
// The adapter would also reserve its operator's SharedStorage a second time as tensor-map storage (32 KiB
// the mainloop's stages need); this epilogue has no tensor maps, so that storage is empty here and the
// members that take it are the adapter's no-ops over the empty type.
class SwigluPairEpilogue
    : public cutlass::epilogue::collective::detail::Sm90TmaWarpSpecializedAdapter<SwigluFp8Epilogue> {
  using Base = cutlass::epilogue::collective::detail::Sm90TmaWarpSpecializedAdapter<SwigluFp8Epilogue>;

 public:
  struct TensorMapStorage {};

  CUTLASS_DEVICE SwigluPairEpilogue(Params const& params, TensorStorage& storage) : Base(params, storage) {
    if (threadIdx.x == 0) {
      ptx::mbarrier_init(&storage.full, 1);  // the receiver's arrival with the phase's byte count
      ptx::mbarrier_init(&storage.read, kSwigluPairThreads);
      ptx::fence_mbarrier_init();
    }
  }

  CUTLASS_DEVICE auto load_init(Params const&, TensorMapStorage&, int32_t, int32_t) {
    return cute::make_tuple(nullptr);
  }
  CUTLASS_DEVICE auto store_init(Params const&, TensorMapStorage&, int32_t, int32_t, int32_t) {
    return cute::make_tuple(nullptr);
  }
  template <bool IsLoad, class ProblemShapeMNKL>
  CUTLASS_DEVICE void tensormaps_perform_update(TensorMapStorage&, Params const&, cute::TmaDescriptor const*,
                                                ProblemShapeMNKL, int32_t, int32_t) {}
  template <bool IsLoad>
  CUTLASS_DEVICE void tensormaps_cp_fence_release(TensorMapStorage&, cute::TmaDescriptor const*, int32_t) {}
};

}  // namespace switchyard::cuda::grouped_gemm_detail
