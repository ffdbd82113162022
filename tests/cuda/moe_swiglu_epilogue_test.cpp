// GEMM 1 with SwiGLU and the requantisation in its epilogue (GroupedGemmKind::fp8_swiglu_to_fp8: m128 tiles
// of 64 gate and 64 up rows of W1 in MoeGateUp::interleaved, in cluster pairs trading each row's amax; the
// layer takes it whenever its fp8 W1 is interleaved) gives the bits of the separate path on the same
// weights in the checkpoint's layout: the fp8 GEMM writing h in bf16 (W1 in halves, the checkpoint's
// scales), then the SwiGLU kernel (cuda/moe/swiglu_kernel.hpp) on it. Groups with 0, 1, 63, 64, 65, 200,
// 256, 1000 and 1024 rows (partial and empty tiles), four requantisation blocks (four cluster pairs per row
// of tiles: 96 pairs of tiles, more than an H200's 66 clusters, so every pair of CTAs runs several tiles
// and the exchange's two buffers and their barriers go through both phases), with and without a clamp.
// Rows past a group's count keep their poison: the epilogue writes only rows the GEMM computed.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "common/moe_layout.hpp"
#include "cuda/moe/experts.hpp"
#include "cuda/moe/grouped_gemm.hpp"
#include "cuda/moe/swiglu_kernel.hpp"
#include "cuda/rank_device.hpp"
#include "device/cuda_check.hpp"
#include "grouped_gemm_operands.hpp"
#include "switchyard/errors.hpp"

namespace switchyard::testing {
namespace {

constexpr int kIntermediate = 512;  // four requantisation blocks: eight N tiles, four cluster pairs
constexpr int kN = 2 * kIntermediate;
constexpr int kK = 512;
constexpr int kCapacity = 1024;
const std::vector<int32_t> kRows = {0, 1, 63, 64, 65, 200, 256, 1000, 1024};
constexpr uint8_t kPoison = 0xab;

// x (A) and W1 (B) in the checkpoint's layout (MoeGateUp::halves), and W1 with its scales moved into
// MoeGateUp::interleaved by the layout's own mapping (logical row n to w1_stored_row(n), its scale row
// with it).
struct Operands : Fp8Operands {
  int groups = static_cast<int>(kRows.size());
  std::vector<uint8_t> b_interleaved;
  std::vector<float> b_scales_interleaved;
  explicit Operands(uint64_t seed) : Fp8Operands(seed, static_cast<int>(kRows.size()), kCapacity, kN, kK) {
    const common::MoeWeightLayout halves{kK, kIntermediate, common::MoeGateUp::halves};
    const common::MoeWeightLayout interleaved{kK, kIntermediate, common::MoeGateUp::interleaved};
    b_interleaved.resize(b.size());
    b_scales_interleaved.resize(b_scales.size());
    for (int g = 0; g < groups; ++g) {
      for (int64_t n = 0; n < kN; ++n) {
        std::memcpy(&b_interleaved[interleaved.w1_row(g, n)], &b[halves.w1_row(g, n)], kK);
        std::memcpy(&b_scales_interleaved[interleaved.w1_scales_row(g, n)],
                    &b_scales[halves.w1_scales_row(g, n)], (kK / 128) * sizeof(float));
      }
    }
  }
};

struct Activations {
  std::vector<uint8_t> a;
  std::vector<float> scales;
};

class SwigluGemm {
 public:
  explicit SwigluGemm(const Operands& op)
      : op_(op),
        x_(op.a.size()),
        w1_(op.b.size()),
        w1_interleaved_(op.b.size()),
        x_scales_(op.a_scales.size() * 4),
        w1_scales_(op.b_scales.size() * 4),
        w1_scales_interleaved_(op.b_scales.size() * 4),
        counts_(kRows.size() * 4) {
    upload(x_, op.a);
    upload(w1_, op.b);
    upload(w1_interleaved_, op.b_interleaved);
    upload(x_scales_, op.a_scales);
    upload(w1_scales_, op.b_scales);
    upload(w1_scales_interleaved_, op.b_scales_interleaved);
    upload(counts_, kRows);
    SY_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  }
  ~SwigluGemm() { cudaStreamDestroy(stream_); }

  common::MoeWorkspaceLayout space() const { return {op_.groups, kCapacity, kK, kIntermediate}; }

  // The separate path on W1 in halves: h in bf16 by fp8_to_bf16 (m128), then swiglu_to_fp8_kernel.
  Activations separate(float clamp) {
    DeviceBuffer h(static_cast<size_t>(op_.groups) * kCapacity * kN * 2);
    std::unique_ptr<cuda::GroupedGemm> gemm =
        make(cuda::GroupedGemmKind::fp8_to_bf16, cuda::GroupedGemmTile::m128, h.pointer, {}, false);
    gemm->run(stream_);
    DeviceBuffer a(a_bytes(), kPoison), scales(scale_count() * 4, kPoison);
    cuda::moe_kernels::SwigluArgs args{common::MoeWeightLayout{kK, kIntermediate, common::MoeGateUp::halves},
                                       space(),
                                       static_cast<const uint16_t*>(h.pointer),
                                       static_cast<const int32_t*>(counts_.pointer),
                                       clamp,
                                       a.pointer,
                                       static_cast<float*>(scales.pointer)};
    cuda::moe_kernels::launch_swiglu(args, true, stream_);
    SY_CUDA_CHECK(cudaStreamSynchronize(stream_));
    return {download<uint8_t>(a, a_bytes()), download<float>(scales, scale_count())};
  }

  // GEMM 1 with the SwiGLU epilogue in `tile`, on W1 interleaved.
  Activations fused(cuda::GroupedGemmTile tile, float clamp) {
    DeviceBuffer a(a_bytes(), kPoison), scales(scale_count() * 4, kPoison);
    std::unique_ptr<cuda::GroupedGemm> gemm =
        make(cuda::GroupedGemmKind::fp8_swiglu_to_fp8, tile, nullptr,
             cuda::GroupedGemmSwigluOutputs{space(), clamp, static_cast<uint8_t*>(a.pointer),
                                            static_cast<float*>(scales.pointer)},
             true);
    gemm->run(stream_);
    SY_CUDA_CHECK(cudaStreamSynchronize(stream_));
    SY_CUDA_CHECK(cudaGetLastError());
    return {download<uint8_t>(a, a_bytes()), download<float>(scales, scale_count())};
  }

 private:
  size_t a_bytes() const { return static_cast<size_t>(op_.groups) * kCapacity * kIntermediate; }
  size_t scale_count() const { return static_cast<size_t>(op_.groups) * kCapacity * (kIntermediate / 128); }

  std::unique_ptr<cuda::GroupedGemm> make(cuda::GroupedGemmKind kind, cuda::GroupedGemmTile tile, void* d,
                                          const cuda::GroupedGemmSwigluOutputs& swiglu, bool interleaved) {
    cuda::GroupedGemmOperands operands;
    operands.groups = op_.groups;
    operands.n = kN;
    operands.k = kK;
    operands.a = x_.pointer;
    operands.a_group_stride = int64_t{kCapacity} * kK;
    operands.b = interleaved ? w1_interleaved_.pointer : w1_.pointer;
    operands.b_group_stride = int64_t{kN} * kK;
    operands.d = d;
    operands.d_group_stride = d ? int64_t{kCapacity} * kN : 0;
    operands.a_scales = static_cast<const float*>(x_scales_.pointer);
    operands.a_scales_group_stride = int64_t{kCapacity} * (kK / 128);
    operands.b_scales =
        static_cast<const float*>(interleaved ? w1_scales_interleaved_.pointer : w1_scales_.pointer);
    operands.b_scales_group_stride = int64_t{kN / 128} * (kK / 128);
    operands.swiglu = swiglu;
    std::unique_ptr<cuda::GroupedGemm> gemm = cuda::make_grouped_gemm(kind, operands, stream_, tile);
    std::vector<int32_t> shapes;
    for (int32_t m : kRows) shapes.insert(shapes.end(), {m, kN, kK});
    SY_CUDA_CHECK(cudaMemcpyAsync(gemm->problem_shapes(), shapes.data(), shapes.size() * 4,
                                  cudaMemcpyHostToDevice, stream_));
    SY_CUDA_CHECK(cudaStreamSynchronize(stream_));  // `shapes` is the copy's source
    return gemm;
  }

  const Operands& op_;
  DeviceBuffer x_, w1_, w1_interleaved_, x_scales_, w1_scales_, w1_scales_interleaved_, counts_;
  cudaStream_t stream_ = nullptr;
};

// Where two results differ: "" when they agree on every byte (written rows and poisoned ones alike).
std::string first_difference(const Activations& got, const Activations& want) {
  for (size_t i = 0; i < want.a.size(); ++i) {
    if (got.a[i] != want.a[i]) {
      const size_t row = i / kIntermediate;
      return "a differs at group " + std::to_string(row / kCapacity) + " row " +
             std::to_string(row % kCapacity) + " channel " + std::to_string(i % kIntermediate) + ": " +
             std::to_string(got.a[i]) + " vs " + std::to_string(want.a[i]);
    }
  }
  for (size_t i = 0; i < want.scales.size(); ++i) {
    if (std::memcmp(&got.scales[i], &want.scales[i], 4) != 0) {
      const size_t row = i / (kIntermediate / 128);
      return "a scale differs at group " + std::to_string(row / kCapacity) + " row " +
             std::to_string(row % kCapacity) + " block " + std::to_string(i % (kIntermediate / 128));
    }
  }
  return "";
}

class MoeSwigluEpilogue : public ::testing::TestWithParam<float> {};

TEST_P(MoeSwigluEpilogue, GivesTheSeparatePathsBits) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device: GPU tests are skipped, not passed";
  const float clamp = GetParam();
  const Operands op(20261203);
  SwigluGemm gemm(op);
  const Activations want = gemm.separate(clamp);

  // The separate path itself: every computed row written (no poison left), every row past M_g untouched.
  for (size_t g = 0; g < kRows.size(); ++g) {
    for (int r = 0; r < kCapacity; ++r) {
      const uint8_t* row = want.a.data() + (g * kCapacity + r) * kIntermediate;
      float scale;
      std::memcpy(&scale, &want.scales[(g * kCapacity + r) * (kIntermediate / 128)], 4);
      uint32_t scale_bits;
      std::memcpy(&scale_bits, &scale, 4);
      if (r >= kRows[g]) {
        ASSERT_EQ(row[0], kPoison) << "group " << g << " row " << r << " is past M_g but was written";
        ASSERT_EQ(scale_bits, 0xababababu);
      } else {
        ASSERT_GT(scale, 0.0f) << "group " << g << " row " << r << " has no scale";
      }
    }
  }

  const Activations got = gemm.fused(cuda::GroupedGemmTile::m128, clamp);
  EXPECT_EQ(first_difference(got, want), "") << "clamp " << clamp;
  // Run to run.
  EXPECT_EQ(first_difference(gemm.fused(cuda::GroupedGemmTile::m128, clamp), got), "");
}

INSTANTIATE_TEST_SUITE_P(Clamps, MoeSwigluEpilogue, ::testing::Values(0.0f, 3000.0f),
                         [](const auto& info) { return info.param == 0.0f ? "no_clamp" : "clamped"; });

TEST(MoeSwigluEpilogueTiles, OtherTilesAreRefusedByName) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device: GPU tests are skipped, not passed";
  cuda::GroupedGemmOperands operands;
  operands.groups = 1;
  operands.n = kN;
  operands.k = kK;
  for (cuda::GroupedGemmTile tile :
       {cuda::GroupedGemmTile::m128_cluster2m, cuda::GroupedGemmTile::m128_cluster2n,
        cuda::GroupedGemmTile::m64_pingpong}) {
    try {
      cuda::make_grouped_gemm(cuda::GroupedGemmKind::fp8_swiglu_to_fp8, operands, nullptr, tile);
      ADD_FAILURE() << "expected Unsupported for " << cuda::grouped_gemm_tile_name(tile);
    } catch (const Unsupported& error) {
      EXPECT_NE(std::string(error.what())
                    .find(std::string("comes in the m128 tile only; got tile ") +
                          cuda::grouped_gemm_tile_name(tile)),
                std::string::npos)
          << error.what();
    }
  }
}

}  // namespace
}  // namespace switchyard::testing
