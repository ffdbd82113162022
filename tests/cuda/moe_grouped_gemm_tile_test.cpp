// The fp8 grouped GEMM in every CUTLASS tile (cuda/moe/grouped_gemm.hpp, GroupedGemmTile) gives the m128
// tile's bits: every tile sums each element's 128-K blocks in one order, one promotion each, so the tile
// may change the speed (switchyard-moe-bench --gemm-tiles) but never the layer's output. Groups with 0,
// 1, 63, 64, 65 and 200 rows, an odd count of N blocks (clusters along N get a partial pair), and both
// output types. m128 itself is held to the blockwise formula within fp32 summation error, so that a
// tile agreeing with a broken m128 cannot pass.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/numeric.hpp"
#include "cuda/moe/experts.hpp"
#include "cuda/moe/grouped_gemm.hpp"
#include "cuda/rank_device.hpp"
#include "device/cuda_check.hpp"
#include "grouped_gemm_operands.hpp"
#include "switchyard/buffer.hpp"
#include "switchyard/errors.hpp"

namespace switchyard::testing {
namespace {

constexpr int kN = 384;  // 3 blocks of 128: clusters of 2 along N leave one alone
constexpr int kK = 512;  // 4 scale blocks
constexpr int kCapacity = 256;
const std::vector<int32_t> kRows = {0, 1, 63, 64, 65, 200, 256};

struct Operands : Fp8Operands {
  int groups = static_cast<int>(kRows.size());
  explicit Operands(uint64_t seed) : Fp8Operands(seed, static_cast<int>(kRows.size()), kCapacity, kN, kK) {}
};

// D (bf16) of one tile.
std::vector<uint16_t> run_tile(const Operands& op, cuda::GroupedGemmTile tile) {
  const size_t d_elements = static_cast<size_t>(op.groups) * kCapacity * kN;
  DeviceBuffer a(op.a.size()), b(op.b.size()), sa(op.a_scales.size() * 4), sb(op.b_scales.size() * 4),
      d(d_elements * 2);
  upload(a, op.a);
  upload(b, op.b);
  upload(sa, op.a_scales);
  upload(sb, op.b_scales);
  cuda::GroupedGemmOperands operands;
  operands.groups = op.groups;
  operands.n = kN;
  operands.k = kK;
  operands.a = a.pointer;
  operands.a_group_stride = int64_t{kCapacity} * kK;
  operands.b = b.pointer;
  operands.b_group_stride = int64_t{kN} * kK;
  operands.d = d.pointer;
  operands.d_group_stride = int64_t{kCapacity} * kN;
  operands.a_scales = static_cast<const float*>(sa.pointer);
  operands.a_scales_group_stride = int64_t{kCapacity} * (kK / 128);
  operands.b_scales = static_cast<const float*>(sb.pointer);
  operands.b_scales_group_stride = int64_t{kN / 128} * (kK / 128);
  cudaStream_t stream = nullptr;
  SY_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  std::unique_ptr<cuda::GroupedGemm> gemm =
      cuda::make_grouped_gemm(cuda::GroupedGemmKind::fp8_to_bf16, operands, stream, tile);
  std::vector<int32_t> shapes;
  for (int32_t m : kRows) shapes.insert(shapes.end(), {m, kN, kK});
  SY_CUDA_CHECK(cudaMemcpyAsync(gemm->problem_shapes(), shapes.data(), shapes.size() * 4,
                                cudaMemcpyHostToDevice, stream));
  gemm->run(stream);
  SY_CUDA_CHECK(cudaStreamSynchronize(stream));
  SY_CUDA_CHECK(cudaGetLastError());
  std::vector<uint16_t> halves(d_elements);
  SY_CUDA_CHECK(cudaMemcpy(halves.data(), d.pointer, d_elements * 2, cudaMemcpyDeviceToHost));
  gemm.reset();
  cudaStreamDestroy(stream);
  return halves;
}

// The layer's two GEMMs are both fp8_to_bf16 in the fp8 recipe (h and o rounded to bf16).
TEST(MoeGroupedGemmTiles, EveryTileGivesTheM128TilesBits) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device: GPU tests are skipped, not passed";
  const Operands op(20261202);
  const std::vector<uint16_t> m128 = run_tile(op, cuda::GroupedGemmTile::m128);

  // m128 against the blockwise formula: sum over K blocks of sa * sb * (the block's exact products).
  double worst = 0.0;
  size_t written = 0;
  for (int g = 0; g < op.groups; ++g) {
    for (int m = 0; m < kCapacity; ++m) {
      for (int n = 0; n < kN; ++n) {
        const size_t at = (static_cast<size_t>(g) * kCapacity + m) * kN + n;
        if (m >= kRows[static_cast<size_t>(g)]) {
          ASSERT_EQ(m128[at], 0) << "a row past M_g was written: group " << g << " row " << m;
          continue;
        }
        double expected = 0.0, magnitude = 0.0;
        for (int kb = 0; kb < kK / 128; ++kb) {
          double block = 0.0;
          for (int k = kb * 128; k < kb * 128 + 128; ++k) {
            block += static_cast<double>(
                         common::fp8_e4m3_to_float(op.a[(static_cast<size_t>(g) * kCapacity + m) * kK + k])) *
                     common::fp8_e4m3_to_float(op.b[(static_cast<size_t>(g) * kN + n) * kK + k]);
          }
          const double scale =
              static_cast<double>(op.a_scales[(static_cast<size_t>(g) * kCapacity + m) * (kK / 128) + kb]) *
              op.b_scales[(static_cast<size_t>(g) * (kN / 128) + n / 128) * (kK / 128) + kb];
          expected += scale * block;
          magnitude += std::fabs(scale * block);
        }
        const double error = std::fabs(common::bf16_to_float(m128[at]) - expected) / std::max(1.0, magnitude);
        worst = std::max(worst, error);
        ++written;
      }
    }
  }
  // Hopper's fp8 WGMMA keeps only about 14 bits while it sums a 128-K block (why the recipe promotes every
  // 128 K into fp32; DeepSeek-V3's report): up to ~128 x 2^-14 of the block's magnitude. Measured 0.0043
  // (H200, session 16); a wrong scale, row or block gives errors of order 1.
  EXPECT_LT(worst, 1.5e-2) << "m128 against the blockwise formula";
  EXPECT_GT(written, 0u);

  for (cuda::GroupedGemmTile tile : cuda::kGroupedGemmTiles) {
    if (tile == cuda::GroupedGemmTile::m128) continue;
    const std::vector<uint16_t> other = run_tile(op, tile);
    size_t differing = 0, first = other.size();
    for (size_t i = 0; i < other.size(); ++i) {
      if (other[i] != m128[i]) {
        if (differing++ == 0) first = i;
      }
    }
    EXPECT_EQ(differing, 0u) << cuda::grouped_gemm_tile_name(tile) << " differs from m128 in " << differing
                             << " elements, the first at " << first;
  }
}

TEST(MoeGroupedGemmTileNames, RoundTripAndBadNamesAreRefusedByName) {
  for (cuda::GroupedGemmTile tile : cuda::kGroupedGemmTiles) {
    EXPECT_EQ(cuda::grouped_gemm_tile_from_name(cuda::grouped_gemm_tile_name(tile), "tile"), tile);
  }
  try {
    cuda::grouped_gemm_tile_from_name("m256", "SWITCHYARD_MOE_GEMM_TILES (gemm 1)");
    ADD_FAILURE() << "expected InvalidArgument";
  } catch (const InvalidArgument& error) {
    const std::string what = error.what();
    EXPECT_EQ(what.rfind("SWITCHYARD_MOE_GEMM_TILES (gemm 1): expected a grouped GEMM tile (m128, ", 0), 0u)
        << what;
    EXPECT_NE(what.find("got 'm256'"), std::string::npos) << what;
  }
}

// The tiles a layer's GEMMs run in: the SwiGLU GEMM 1 (fp8, W1 interleaved) and GEMM 2 writing rows home
// come in m128 alone, and so do the bf16 kernels; the other fp8 GEMMs run in the tile asked for. The layer
// builds its few-rows pair only where these differ from its many-rows pair's (CudaMoeExperts), so a wrong
// answer here either runs a kernel that does not exist or builds the same one twice.
TEST(MoeGemmTilesInEffect, OnlyTheKernelsThatComeInOtherTilesTakeThem) {
  const cuda::MoeGemmTiles pingpong{cuda::GroupedGemmTile::m64_pingpong, cuda::GroupedGemmTile::m64_pingpong};
  const auto in_effect = [&](bool fp8, common::MoeGateUp gate_up, bool home) {
    detail::MoeExpertsPlan plan;
    plan.fp8 = fp8;
    plan.weights.gate_up = gate_up;
    plan.rows_home = home;
    const cuda::MoeGemmTiles tiles = cuda::moe_gemm_tiles_in_effect(plan, pingpong);
    return std::string(cuda::grouped_gemm_tile_name(tiles.gemm1)) + "," +
           cuda::grouped_gemm_tile_name(tiles.gemm2);
  };
  EXPECT_EQ(in_effect(true, common::MoeGateUp::halves, false), "m64_pingpong,m64_pingpong");
  EXPECT_EQ(in_effect(true, common::MoeGateUp::interleaved, false), "m128,m64_pingpong");
  EXPECT_EQ(in_effect(true, common::MoeGateUp::halves, true), "m64_pingpong,m128");
  EXPECT_EQ(in_effect(true, common::MoeGateUp::interleaved, true), "m128,m128");
  EXPECT_EQ(in_effect(false, common::MoeGateUp::halves, false), "m128,m128");
  EXPECT_EQ(in_effect(false, common::MoeGateUp::interleaved, false), "m128,m128");
}

}  // namespace
}  // namespace switchyard::testing
