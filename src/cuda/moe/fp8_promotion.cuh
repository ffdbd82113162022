#pragma once
// The fp8 blockwise mainloop's promotion when a tile spans two weight scale blocks along N, as the fused
// SwiGLU GEMM's does (a gate block and its up block in one 256-wide tile; swiglu_epilogue.cuh).
//
// CUTLASS 4.2's Sm90 blockwise mainloop promotes each 128-deep partial sum p with
// GmmaFP8Accumulation::scale_core. With one B scale per tile (every other kernel here) it computes
// h = fma(p, sa * sb, h): the product of the two scales first, docs/MOE.md rounding point 2. With A scales
// per row and several B scales per tile it would compute h = fma(p * sa, sb, h) instead, another rounding,
// and its shape check refuses the B scales' (2, 2, (16, 2)) fragment beside the accumulators' (2, 2, 32).
// This explicit specialisation of that member, for exactly the fused kernels' fragments, keeps rounding
// point 2's arithmetic, so the fused GEMM's h is the separate GEMM's bit for bit (the suite compares the
// two paths). A fragment of any other shape still reaches CUTLASS's own member, whose static_assert then
// stops the build: nothing changes silently.
#include <cute/tensor.hpp>
#include <cutlass/gemm/collective/fp8_accumulation.hpp>

namespace switchyard::cuda::fp8_promotion {

using namespace cute;
// One warpgroup's 64 x 256 fp32 accumulators (WGMMA m64n256): (2 columns, 2 rows, 32 column groups).
using AccumEngine = ArrayEngine<float, 128>;
using AccumLayout = Layout<Shape<Shape<_2, _2, _32>, _1, _1>, Stride<Stride<_1, _2, _4>, _0, _0>>;
// A's scales, one per row: broadcast along the columns.
using ScaleAEngine = ArrayEngine<float, 2>;
using ScaleALayout = Layout<Shape<Shape<_2, _2, _32>, _1, _1>, Stride<Stride<_0, _1, _0>, _0, _0>>;
// B's scales, one per 128 columns: broadcast within each half of the tile.
using ScaleBEngine = ArrayEngine<float, 2>;
using ScaleBLayout =
    Layout<Shape<Shape<_2, _2, Shape<_16, _2>>, _1, _1>, Stride<Stride<_0, _0, Stride<_0, _1>>, _0, _0>>;

}  // namespace switchyard::cuda::fp8_promotion

namespace cutlass::gemm::collective {

template <>
template <>
CUTLASS_DEVICE void GmmaFP8Accumulation<switchyard::cuda::fp8_promotion::AccumEngine,
                                        switchyard::cuda::fp8_promotion::AccumLayout>::
    scale_core<switchyard::cuda::fp8_promotion::ScaleAEngine, switchyard::cuda::fp8_promotion::ScaleALayout,
               switchyard::cuda::fp8_promotion::ScaleBEngine, switchyard::cuda::fp8_promotion::ScaleBLayout>(
        const cute::Tensor<switchyard::cuda::fp8_promotion::ScaleAEngine,
                           switchyard::cuda::fp8_promotion::ScaleALayout>& scale_a,
        const cute::Tensor<switchyard::cuda::fp8_promotion::ScaleBEngine,
                           switchyard::cuda::fp8_promotion::ScaleBLayout>& scale_b) {
  static_assert(cute::size(switchyard::cuda::fp8_promotion::ScaleBLayout{}) ==
                cute::size(switchyard::cuda::fp8_promotion::AccumLayout{}));
  // Both fragments are indexed in the accumulators' order (colexicographic over the same 128 values).
  CUTLASS_PRAGMA_UNROLL
  for (int i = 0; i < cute::size(accum_); ++i) {
    accum_(i) = fmaf(accum_temp_(i), scale_a(i) * scale_b(i), accum_(i));
  }
}

}  // namespace cutlass::gemm::collective
