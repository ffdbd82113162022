#pragma once
// GEMM 1's epilogue for the fp8 layer with W1's gate and up rows interleaved in 64-row blocks
// (common::MoeGateUp::interleaved): SwiGLU and the requantisation to e4m3 run on the accumulators, so
// h never leaves the chip. The separate path writes h in bf16 ([L, C, 2I]: 275 MB per rank at
// DeepSeek-V3's 4096 tokens) and reads it back in swiglu_to_fp8_kernel; this rounds the accumulators to
// bf16 in registers as that path's store does, and writes a (1 byte per channel) and its scales, the same
// bits (docs/MOE.md rounding points 3 and 4; the suite checks the two paths against each other).
//
// With the interleave, 128-wide N tile t holds gate channels [64 t, 64 t + 64) in its columns 0-63 and the
// same up channels in columns 64-127, and WGMMA's accumulator layout puts column c and c + 64 in one
// thread (value i and i + 32 of its fragment): each thread computes a for its own values, with no data
// from another thread. What one tile cannot do alone is the requantisation: a block of 128 a channels
// spans tiles 2b and 2b + 1. Those run as a cluster of two CTAs along N (CUTLASS's scheduler hands a
// cluster its tiles together, and x's tile is multicast to both), and the pair trades one float per row:
// each CTA's amax over its 64 channels (a quad's shuffle), 512 bytes a tile, by st.async into the
// partner's shared memory, completing on the partner's mbarrier (as TMA loads do: no fence in the
// sender). Both then hold max(mine, partner's), the row's amax over its 128 channels, so both compute
// the same scale; each writes its 64 bytes of a row, and the even tile writes the scale.
//
// No sender waits for its reader. The exchange is double-buffered by tile parity, and a CTA sends tile
// t + 2's amax only after it has received the partner's tile t + 1, which the partner sends after it
// has read tile t's (the same quad reads a row's value and later sends that row's next one). A CTA leaves
// the kernel only after receiving its last tile's amax, so no st.async ever targets a CTA that has left.
// Like CUTLASS's own pipeline waits, the wait for the partner's amax is not bounded: the partner runs the
// same tiles in lockstep, so it ends unless the kernel faults.
//
// Session 21's pair traded whole half tiles (32 KiB, with a release/acquire handshake) in 128-row
// blocks, and GEMM 1 took 1.27x as long (bench/NOTES.md): this one trades 1/64 of those bytes, and
// neither CTA waits for its partner to read.
//
// A CUTLASS collective epilogue in the operator() form that the warp-specialised kernels' adapter wraps
// (direct_epilogue.cuh); SwigluPairEpilogue below adds the barriers' initialisation, which must precede the
// kernel's cluster-wide start barrier.
#include <cutlass/cutlass.h>

#include <cstdint>
#include <cute/tensor.hpp>
#include <cutlass/epilogue/collective/detail.hpp>
#include <cutlass/epilogue/dispatch_policy.hpp>

#include "common/fp8_cast.hpp"
#include "common/moe_layout.hpp"
#include "common/moe_numerics.hpp"
#include "cuda/moe/direct_epilogue.cuh"
#include "cuda/moe/fp8_promotion.cuh"
#include "cuda/moe/grouped_gemm.hpp"
#include "device/fp8_cast.cuh"
#include "device/ptx.cuh"

namespace switchyard::cuda::grouped_gemm_detail {

// The exchange: a 128 x 128 tile over two consumer warpgroups, 64 accumulators a thread.
constexpr int kSwigluTileRows = 128;
constexpr int kSwigluValues = 64;

// Shared memory of one CTA of the pair: the partner's per-row amax, by tile parity, and its barriers.
struct SwigluPairStorage {
  float partner_amax[2][kSwigluTileRows];
  alignas(8) uint64_t full[2];
};

// The op: D is the e4m3 activations and their scales, written by this class rather than through a stride.
class SwigluFp8Epilogue : public DirectEpilogueOp<SwigluPairStorage, GroupedGemmSwigluOutputs, uint8_t> {
 public:
  // N must be whole pairs of 128-column tiles (a requantisation block): the layer's I is a multiple of 128.
  template <class ProblemShape>
  static bool can_implement(ProblemShape const&, Arguments const& args) {
    return args.activations != nullptr && args.activation_scales != nullptr &&
           args.space.intermediate % common::kMoeScaleBlock == 0;
  }

  CUTLASS_HOST_DEVICE explicit SwigluFp8Epilogue(Params const& params) : params_(params) {}

  template <class ProblemShapeMNKL, class BlockShapeMNK, class BlockCoordMNKL, class FrgEngine,
            class FrgLayout, class TiledMma, class ResidueMNK>
  CUTLASS_DEVICE void operator()(ProblemShapeMNKL problem_shape_mnkl, BlockShapeMNK blk_shape_mnk,
                                 BlockCoordMNKL blk_coord_mnkl,
                                 cute::Tensor<FrgEngine, FrgLayout> const& accumulators, TiledMma tiled_mma,
                                 ResidueMNK, int thread_idx, char* smem) {
    using namespace cute;
    static_assert(size<0>(BlockShapeMNK{}) == kSwigluTileRows &&
                      size<1>(BlockShapeMNK{}) == 2 * common::kMoeGateUpBlock,
                  "a 128 x 128 tile: two warpgroups of 64 rows, 64 gate and 64 up columns");
    static_assert(cute::is_same_v<FrgLayout, fp8_promotion::Fragments<128, 64>::AccumLayout>,
                  "one warpgroup's m64n128 accumulators, the fragment fp8_promotion.cuh specialises: value "
                  "i is column 8 (i / 4) + 2 (lane % 4) + i % 2, so value i + 32 is column + 64");
    constexpr int kHalf = kSwigluValues / 2;  // the gate values; value i + kHalf is the same channel's up
    SwigluPairStorage& storage = *reinterpret_cast<SwigluPairStorage*>(smem);

    const auto [m_coord, n_coord, k_coord, l_coord] = blk_coord_mnkl;
    const int tile_n = static_cast<int>(n_coord);
    const uint32_t buffer = tiles_ & 1u;
    const uint32_t phase = (tiles_ >> 1) & 1u;
    ++tiles_;

    // The thread's first value's tile-local (row, column). By the fragment's layout (asserted above), value
    // i = v0 + 2 v1 + 4 j sits at row row0 + 8 v1 and column col0 + 8 j + v0: the thread's two rows are its
    // two slots, slot (i / 2) % 2, known at compile time for every i.
    Tensor tile_coords = make_identity_tensor(take<0, 2>(blk_shape_mnk));
    Tensor thread_coords = tiled_mma.get_thread_slice(thread_idx).partition_C(tile_coords);
    const int row0 = get<0>(thread_coords(0));
    const int col0 = get<1>(thread_coords(0));
    const int slot_row[2] = {row0, row0 + 8};

    float a[kHalf];
    float amax[2] = {0.0f, 0.0f};
    // The clamp's test once, not per value (common::swiglu folds it away for a constant 0).
    if (params_.clamp > 0.0f) {
      activate(accumulators, params_.clamp, a, amax);
    } else {
      activate(accumulators, 0.0f, a, amax);
    }
    // The quad (lanes 4q .. 4q + 3) holds a row's 64 channels of this tile; max is exact in any order, and
    // fmaxf drops a NaN as the separate kernel and the CPU do.
    CUTLASS_PRAGMA_UNROLL
    for (int slot = 0; slot < 2; ++slot) {
      amax[slot] = fmaxf(amax[slot], __shfl_xor_sync(0xffffffffu, amax[slot], 1));
      amax[slot] = fmaxf(amax[slot], __shfl_xor_sync(0xffffffffu, amax[slot], 2));
    }

    // Trade the rows' amax with the partner (tile tile_n ^ 1 of the same rows).
    const bool quad_leader = thread_idx % 4 == 0;
    if (quad_leader) {
      const uint32_t partner = ptx::cluster_cta_rank() ^ 1u;
      const uint32_t remote_full = ptx::map_shared_to_cta(ptx::smem_address(&storage.full[buffer]), partner);
      CUTLASS_PRAGMA_UNROLL
      for (int slot = 0; slot < 2; ++slot) {
        const uint32_t remote =
            ptx::map_shared_to_cta(ptx::smem_address(&storage.partner_amax[buffer][slot_row[slot]]), partner);
        ptx::st_async_cluster_f32(remote, amax[slot], remote_full);
      }
    }
    // One thread announces the phase's bytes (before or after they land: the transaction count may run
    // ahead of the expectation); the phase completes when all 128 rows' values are here.
    if (thread_idx == 0) {
      ptx::mbarrier_arrive_expect_tx(&storage.full[buffer], sizeof(storage.partner_amax[buffer]));
    }
    while (!ptx::mbarrier_try_wait_parity(&storage.full[buffer], phase)) {
    }
    float scale[2], inverse[2];
    CUTLASS_PRAGMA_UNROLL
    for (int slot = 0; slot < 2; ++slot) {
      amax[slot] = fmaxf(amax[slot], storage.partner_amax[buffer][slot_row[slot]]);
      scale[slot] = common::fp8_block_scale(amax[slot], false);
      inverse[slot] = 1.0f / scale[slot];
    }

    const int rows = get<0>(problem_shape_mnkl);
    const int local = static_cast<int>(l_coord);
    const int tile_row0 = static_cast<int>(m_coord) * kSwigluTileRows;
    const int channel0 = tile_n * common::kMoeGateUpBlock + col0;  // value 0's a channel
    const common::MoeWorkspaceLayout& space = params_.space;
    // Adjacent pairs of the fragment are adjacent columns of one row (a WGMMA thread's 2 consecutive
    // values): one 2-byte store each, value i's at its row's channel0 + 8 (i / 4).
    CUTLASS_PRAGMA_UNROLL
    for (int slot = 0; slot < 2; ++slot) {
      const int row = tile_row0 + slot_row[slot];
      if (row >= rows) continue;
      uint8_t* out = params_.activations + space.activation_row(local, row) + channel0;
      CUTLASS_PRAGMA_UNROLL
      for (int i = 2 * slot; i < kHalf; i += 4) {
        const uint32_t pair = fp8x2_e4m3(a[i] * inverse[slot], a[i + 1] * inverse[slot]);
        *reinterpret_cast<uint16_t*>(out + 8 * (i / 4)) = static_cast<uint16_t>(pair);
      }
    }
    // Both tiles of the pair hold the block's scale; the even one writes it.
    if (quad_leader && tile_n % 2 == 0) {
      CUTLASS_PRAGMA_UNROLL
      for (int slot = 0; slot < 2; ++slot) {
        const int row = tile_row0 + slot_row[slot];
        if (row < rows) {
          params_.activation_scales[space.activation_scales_row(local, row) + tile_n / 2] = scale[slot];
        }
      }
    }
  }

 private:
  // a = swiglu(gate, up) of the thread's kHalf channels (h rounded to bf16 first, docs/MOE.md rounding point
  // 2, as the separate path stores it) and each slot's amax.
  template <class Accumulators>
  CUTLASS_DEVICE static void activate(Accumulators const& accumulators, float clamp,
                                      float (&a)[kSwigluValues / 2], float (&amax)[2]) {
    constexpr int kHalf = kSwigluValues / 2;
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < kHalf; ++i) {
      a[i] =
          common::swiglu(common::round_h(accumulators(i)), common::round_h(accumulators(i + kHalf)), clamp);
      amax[(i / 2) % 2] = fmaxf(amax[(i / 2) % 2], fabsf(a[i]));
    }
  }

  Params params_;
  uint32_t tiles_ = 0;  // tiles this thread's epilogue has run: the exchange's buffer and its barrier's phase
};

// The collective epilogue the kernel holds: the adapter (direct_epilogue.cuh), plus the barriers'
// initialisation. The kernel constructs its epilogue in every thread before the cluster-wide barrier that
// publishes every pipeline's initialisation, so the partner's first arrival finds these initialised.
class SwigluPairEpilogue : public DirectEpilogue<SwigluFp8Epilogue> {
  using Base = DirectEpilogue<SwigluFp8Epilogue>;

 public:
  CUTLASS_DEVICE SwigluPairEpilogue(Params const& params, TensorStorage& storage) : Base(params, storage) {
    if (threadIdx.x == 0) {
      // One arrival a phase: the receiver's, with the phase's byte count.
      ptx::mbarrier_init(&storage.full[0], 1);
      ptx::mbarrier_init(&storage.full[1], 1);
      ptx::fence_mbarrier_init();
    }
  }
};

}  // namespace switchyard::cuda::grouped_gemm_detail
