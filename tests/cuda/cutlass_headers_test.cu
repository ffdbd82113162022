// The CUTLASS/CuTe headers that the CUDA MoE path's grouped GEMMs come from (docs/MOE.md) are the pinned
// version and compile with the project's CUDA flags (sm_90a, C++17), including the Hopper collectives that
// path needs: the grouped (pointer-array) warp-specialised TMA + WGMMA mainloops, bf16 and fp8 with
// blockwise scaling. Runs without a GPU: CuTe's layout algebra is host code too.
#include <cutlass/cutlass.h>
#include <cutlass/version.h>
#include <gtest/gtest.h>

#include <cute/tensor.hpp>
#include <cutlass/gemm/collective/collective_builder.hpp>

namespace {

// NOTES: scripts/cutlass-version.txt pins 4.2.0.0; CMake refuses other headers, and this says so again
// where the code that depends on them is compiled.
static_assert(CUTLASS_MAJOR == 4 && CUTLASS_MINOR == 2, "CUTLASS headers of another version than the pin");

TEST(CutlassHeaders, CuteLayoutsComputeOnTheHost) {
  // A 128 x 64 K-major tile (a weight tile of a grouped GEMM): element (m, k) at m * 64 + k.
  auto layout = cute::make_layout(cute::make_shape(128, 64), cute::make_stride(64, 1));
  EXPECT_EQ(cute::size(layout), 128 * 64);
  EXPECT_EQ(layout(3, 5), 3 * 64 + 5);
}

}  // namespace
