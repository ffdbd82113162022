#pragma once
// The fp8 blockwise mainloop's promotion when a tile holds two of B's scale blocks along N: the fused
// SwiGLU GEMM's 128-wide tile of 64 gate and 64 up rows of W1 (MoeGateUp::interleaved), which reads W1's
// scales repeated per 64 rows (grouped_gemm_kernel.cuh, swiglu_epilogue.cuh).
//
// CUTLASS 4.2's Sm90 blockwise mainloop promotes each 128-deep partial sum p with
// GmmaFP8Accumulation::scale_core. With one B scale per tile (the 128-wide tiles) it computes
// h = fma(p, sa * sb, h): the product of the two scales first, docs/MOE.md rounding point 2. With A scales
// per row and several B scales per tile it would compute h = fma(p * sa, sb, h) instead, another rounding,
// and its shape check refuses the B scales' fragment beside the accumulators'. These explicit
// specialisations of that member, for exactly those kernels' fragments, keep rounding point 2's
// arithmetic, so that the fused GEMM gives the separate path's bits
// (tests/cuda/moe_swiglu_epilogue_test.cpp). Session 20 saw a fragment that matched CUTLASS's shape check but
// not this specialisation's exact type fall through to CUTLASS's member and round the other way, silently:
// the epilogue that follows this mainloop static_asserts its accumulators against Fragments::AccumLayout
// (swiglu_epilogue.cuh), and the test compares every byte with the separate path's.
#include <cute/tensor.hpp>
#include <cutlass/gemm/collective/fp8_accumulation.hpp>

namespace switchyard::cuda::fp8_promotion {

using namespace cute;

// One consumer warpgroup's 64 x kColumns fp32 accumulators (WGMMA m64nN): (2 columns, 2 rows, N / 8
// column groups) per thread, with A's scales one per row and B's one per kScaleRows columns.
template <int kColumns, int kScaleRows>
struct Fragments {
  using AccumEngine = ArrayEngine<float, kColumns / 2>;
  using AccumLayout =
      Layout<Shape<Shape<_2, _2, Int<kColumns / 8>>, _1, _1>, Stride<Stride<_1, _2, _4>, _0, _0>>;
  // Broadcast along the columns.
  using ScaleAEngine = ArrayEngine<float, 2>;
  using ScaleALayout =
      Layout<Shape<Shape<_2, _2, Int<kColumns / 8>>, _1, _1>, Stride<Stride<_0, _1, _0>, _0, _0>>;
  // Broadcast within each scale block's column groups.
  using ScaleBEngine = ArrayEngine<float, kColumns / kScaleRows>;
  using ScaleBLayout =
      Layout<Shape<Shape<_2, _2, Shape<Int<kScaleRows / 8>, Int<kColumns / kScaleRows>>>, _1, _1>,
             Stride<Stride<_0, _0, Stride<_0, _1>>, _0, _0>>;
};

}  // namespace switchyard::cuda::fp8_promotion

// h = fma(p, sa * sb, h) for the fragments of Fragments<kColumns, kScaleRows>. Both scale fragments are
// indexed in the accumulators' order (colexicographic over the same values).
#define SWITCHYARD_FP8_PROMOTION(kColumns, kScaleRows)                                                    \
  namespace cutlass::gemm::collective {                                                                   \
  template <>                                                                                             \
  template <>                                                                                             \
  CUTLASS_DEVICE void                                                                                     \
  GmmaFP8Accumulation<switchyard::cuda::fp8_promotion::Fragments<kColumns, kScaleRows>::AccumEngine,      \
                      switchyard::cuda::fp8_promotion::Fragments<kColumns, kScaleRows>::AccumLayout>::    \
      scale_core<switchyard::cuda::fp8_promotion::Fragments<kColumns, kScaleRows>::ScaleAEngine,          \
                 switchyard::cuda::fp8_promotion::Fragments<kColumns, kScaleRows>::ScaleALayout,          \
                 switchyard::cuda::fp8_promotion::Fragments<kColumns, kScaleRows>::ScaleBEngine,          \
                 switchyard::cuda::fp8_promotion::Fragments<kColumns, kScaleRows>::ScaleBLayout>(         \
          const cute::Tensor<                                                                             \
              switchyard::cuda::fp8_promotion::Fragments<kColumns, kScaleRows>::ScaleAEngine,             \
              switchyard::cuda::fp8_promotion::Fragments<kColumns, kScaleRows>::ScaleALayout>& scale_a,   \
          const cute::Tensor<                                                                             \
              switchyard::cuda::fp8_promotion::Fragments<kColumns, kScaleRows>::ScaleBEngine,             \
              switchyard::cuda::fp8_promotion::Fragments<kColumns, kScaleRows>::ScaleBLayout>& scale_b) { \
    static_assert(                                                                                        \
        cute::size(switchyard::cuda::fp8_promotion::Fragments<kColumns, kScaleRows>::ScaleBLayout{}) ==   \
        cute::size(switchyard::cuda::fp8_promotion::Fragments<kColumns, kScaleRows>::AccumLayout{}));     \
    CUTLASS_PRAGMA_UNROLL                                                                                 \
    for (int i = 0; i < cute::size(accum_); ++i) {                                                        \
      accum_(i) = fmaf(accum_temp_(i), scale_a(i) * scale_b(i), accum_(i));                               \
    }                                                                                                     \
  }                                                                                                       \
  }

SWITCHYARD_FP8_PROMOTION(128, 64)  // the fused SwiGLU GEMM: 64 gate and 64 up columns a tile

#undef SWITCHYARD_FP8_PROMOTION
