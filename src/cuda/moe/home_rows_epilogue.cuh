#pragma once
// GEMM 2's epilogue for MoeExpertOutput::home (fp8_to_bf16_home, grouped_gemm.hpp): each row of o goes
// straight into its home rank's combine buffer instead of the layer's workspace, so the symmetric combine
// that follows moves nothing (it checks the dispatch's tables, waits at its barrier and reduces). That is
// Mega-MoE's combine: the expert GEMM pushes its rows home. The bits are those of the separate path: each
// fp32 accumulator is rounded to bf16 to nearest even (cvt.rn.bf16x2.f32, the instruction CUTLASS's
// epilogue converts D with, after its exact `1 * acc`), and the combine reduces the same rows in the same
// order.
//
// Where a row goes is looked up, not computed here: a kernel before the GEMM writes one address per
// received row (the layer's `places` [L, C], from common::SymmetricHomeRows::place: the home's combine row
// through the heap's peer mapping, or null where nothing is written), so a tile's epilogue makes one load
// per row, issued before it stages the tile, instead of a dozen dependent ones (binary search of the
// homes, token, slot, mask, peer offset) while the tensor cores wait.
//
// How a tile leaves. Session 26 measured consumers storing their 4-byte bf16 pairs straight from
// registers (8 rows a warp instruction) at +80 % on GEMM 2, so the tile is staged: the 256 consumer
// threads write their pairs into shared memory (rows padded by 16 bytes: a quad's 16 bytes of 8 rows fall
// in distinct banks), fence the writes for the async proxy, meet at a named barrier, and then thread r of
// the first 128 sends row r, 256 contiguous bytes of its home's row, with one bulk copy
// (cp.async.bulk.global.shared::cta). Before the next tile overwrites the staging rows, those threads wait
// until their copies have read them; the tile's mainloop has run meanwhile, so that wait is normally
// over. The kernel's last act (store_tail) waits for the copies to complete.
//
// The m128 cooperative tile only (two consumer warpgroups on one 128 x 128 tile: both call this for the
// same tile, which the 256-thread barrier needs); N (the hidden size) a multiple of 128.
#include <cuda_bf16.h>
#include <cutlass/arch/barrier.h>
#include <cutlass/cutlass.h>

#include <cstdint>
#include <cute/tensor.hpp>

#include "cuda/moe/direct_epilogue.cuh"
#include "cuda/moe/fp8_promotion.cuh"
#include "cuda/moe/grouped_gemm.hpp"
#include "device/ptx.cuh"

namespace switchyard::cuda::grouped_gemm_detail {

constexpr int kHomeTileRows = 128;
constexpr int kHomeTileColumns = 128;
constexpr int kHomeRowBytes = kHomeTileColumns * 2;  // one tile's part of a bf16 row
constexpr int kHomeRowPitch = kHomeRowBytes + 16;    // staging rows, padded (bank spread; 16-byte aligned)
constexpr int kHomeConsumerThreads = 256;
constexpr int kHomeValues = 64;  // accumulators a consumer thread holds of a tile

struct HomeRowsStorage {
  alignas(128) uint8_t rows[kHomeTileRows * kHomeRowPitch];
};

// The op: D is o's rows, written to their places by this class rather than through a stride.
class HomeRowsEpilogueOp
    : public DirectEpilogueOp<HomeRowsStorage, GroupedGemmHomeOutputs, cutlass::bfloat16_t> {
 public:
  template <class ProblemShape>
  static bool can_implement(ProblemShape const&, Arguments const& args) {
    return args.places != nullptr && args.capacity > 0;
  }

  CUTLASS_HOST_DEVICE explicit HomeRowsEpilogueOp(Params const& params) : params_(params) {}

  template <class ProblemShapeMNKL, class BlockShapeMNK, class BlockCoordMNKL, class FrgEngine,
            class FrgLayout, class TiledMma, class ResidueMNK>
  CUTLASS_DEVICE void operator()(ProblemShapeMNKL problem_shape_mnkl, BlockShapeMNK blk_shape_mnk,
                                 BlockCoordMNKL blk_coord_mnkl,
                                 cute::Tensor<FrgEngine, FrgLayout> const& accumulators, TiledMma tiled_mma,
                                 ResidueMNK, int thread_idx, char* smem) {
    using namespace cute;
    static_assert(size<0>(BlockShapeMNK{}) == kHomeTileRows && size<1>(BlockShapeMNK{}) == kHomeTileColumns,
                  "a 128 x 128 tile: a staging row is one bulk copy of 256 bytes");
    static_assert(size(TiledMma{}) == kHomeConsumerThreads,
                  "two consumer warpgroups on one tile (the cooperative schedule): the barrier counts both");
    static_assert(cute::is_same_v<FrgLayout, fp8_promotion::Fragments<128, 64>::AccumLayout>,
                  "one warpgroup's m64n128 accumulators: value i = v0 + 2 v1 + 4 j is row 8 v1 and column "
                  "8 j + v0 of the thread's first");
    HomeRowsStorage& storage = *reinterpret_cast<HomeRowsStorage*>(smem);
    const auto [m_coord, n_coord, k_coord, l_coord] = blk_coord_mnkl;
    const int rows = get<0>(problem_shape_mnkl);
    const int local = static_cast<int>(l_coord);
    const bool sender = thread_idx < kHomeTileRows;  // sends tile row thread_idx
    const int row = static_cast<int>(m_coord) * kHomeTileRows + thread_idx;

    // The row's place, loaded first: its latency hides behind the staging below.
    uint8_t* place = nullptr;
    if (sender && row < rows) place = params_.places[static_cast<int64_t>(local) * params_.capacity + row];

    // The previous tile's copies have read the staging rows (each sender waits for its own).
    if (sender) ptx::tma_store_wait_read();
    cutlass::arch::NamedBarrier::sync(kHomeConsumerThreads,
                                      cutlass::arch::ReservedNamedBarriers::EpilogueBarrier);

    Tensor tile_coords = make_identity_tensor(take<0, 2>(blk_shape_mnk));
    Tensor thread_coords = tiled_mma.get_thread_slice(thread_idx).partition_C(tile_coords);
    const int row0 = get<0>(thread_coords(0));
    const int col0 = get<1>(thread_coords(0));
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < kHomeValues; i += 2) {
      const int tile_row = row0 + 8 * ((i / 2) % 2);
      const int column = col0 + 8 * (i / 4);
      // .x (the lower address) is value i's column, .y the next.
      const __nv_bfloat162 pair = __floats2bfloat162_rn(accumulators(i), accumulators(i + 1));
      *reinterpret_cast<__nv_bfloat162*>(storage.rows + tile_row * kHomeRowPitch + column * 2) = pair;
    }
    ptx::fence_proxy_async_shared();
    cutlass::arch::NamedBarrier::sync(kHomeConsumerThreads,
                                      cutlass::arch::ReservedNamedBarriers::EpilogueBarrier);

    if (sender) {
      if (place != nullptr) {
        ptx::tma_store_1d(place + static_cast<int64_t>(n_coord) * kHomeRowBytes,
                          storage.rows + thread_idx * kHomeRowPitch, kHomeRowBytes);
      }
      ptx::tma_store_commit();
    }
  }

 private:
  Params params_;
};

// The collective epilogue the kernel holds: the adapter (direct_epilogue.cuh), whose store_tail waits for
// this CTA's copies to complete (the next kernel on the stream, the cross-rank barrier, then reads them on
// their homes).
class HomeRowsEpilogue : public DirectEpilogue<HomeRowsEpilogueOp> {
  using Base = DirectEpilogue<HomeRowsEpilogueOp>;

 public:
  using Base::Base;

  template <class LoadPipeline, class LoadPipelineState, class StorePipeline, class StorePipelineState>
  CUTLASS_DEVICE auto store_tail(LoadPipeline load_pipeline, LoadPipelineState load_state,
                                 StorePipeline store_pipeline, StorePipelineState store_state) {
    ptx::tma_store_wait_all();  // a thread without copies in flight passes at once
    return Base::store_tail(load_pipeline, load_state, store_pipeline, store_state);
  }
};

}  // namespace switchyard::cuda::grouped_gemm_detail
