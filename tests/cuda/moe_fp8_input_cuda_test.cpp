// The MoE layer (docs/MOE.md) on the CUDA backend with fp8 x that the caller cast itself
// (MoeArgs::x_scales), ranks as threads on the GPU(s): y of fp8 x equals, bit for bit, y of the bf16 x
// whose cast (common::cast_row_to_fp8) gives those bytes and scales (the layer past the dispatch sees the
// same recv_x and recv_x_scales), and is within docs/MOE.md's tolerance of the reference fed the same fp8
// x; arbitrary e4m3 rows and scales (no cast gives them) within the tolerance too, bitwise run to run.
// Edge cases: N = 0, all slots -1, k = 1, ranks 1, 2 and 4. Skipped (reported as skipped) without a GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cuda/device_tensors.hpp"
#include "cuda/expert_major_round_trip.hpp"
#include "cuda/rank_device.hpp"
#include "support/expert_major_gtest.hpp"
#include "support/fp8_inputs.hpp"
#include "support/test_seed.hpp"
#include "switchyard/moe.hpp"
#include "switchyard/reference.hpp"
#include "workload/moe_weights.hpp"
#include "workload/workload.hpp"

namespace switchyard::testing::expert_major {
namespace {

constexpr double kTimeoutSeconds = 120.0;
constexpr int kIntermediate = 128;

#define SWITCHYARD_REQUIRE_GPU() \
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device: GPU tests are skipped, not passed"

// Every rank's fp8 weights (H 256, I 128), bf16 tokens, their cast, and arbitrary fp8 rows on the same
// routing; the reference's y (and tolerance scale S) of the cast and of the arbitrary rows.
struct Fp8Layer {
  std::vector<workload::MoeExpertWeights> weights;
  std::vector<workload::RankData> bf16, cast, arbitrary;
  std::vector<Tensor> y_cast, scale_cast, y_arbitrary, scale_arbitrary;
};

std::vector<Tensor> reference_y(const Case& c, const Fp8Layer& f, const std::vector<workload::RankData>& data,
                                std::vector<Tensor>* scales) {
  std::vector<reference::RankInputs> inputs;
  std::vector<MoeWeights> views;
  for (int rank = 0; rank < c.ranks; ++rank) {
    inputs.push_back(data[rank].inputs());
    views.push_back(f.weights[rank].weights());
  }
  return reference::moe_layer(inputs, views, c.num_experts, Topology::single_node(c.ranks), 0.0f, scales);
}

Fp8Layer fp8_layer(const Case& c, uint64_t seed) {
  Fp8Layer f;
  for (int rank = 0; rank < c.ranks; ++rank) {
    f.weights.push_back(workload::generate_moe_weights(c.num_experts / c.ranks, c.hidden, kIntermediate,
                                                       DType::fp8_e4m3, seed, rank));
  }
  f.bf16 = workload::generate(shape_of(c), seed);
  f.cast = cast_inputs(f.bf16);
  f.arbitrary = precast_inputs(c, seed + 1);
  for (int rank = 0; rank < c.ranks; ++rank) {
    f.arbitrary[rank].topk_idx = f.bf16[rank].topk_idx;
    f.arbitrary[rank].topk_weights = f.bf16[rank].topk_weights;
  }
  f.y_cast = reference_y(c, f, f.cast, &f.scale_cast);
  f.y_arbitrary = reference_y(c, f, f.arbitrary, &f.scale_arbitrary);
  return f;
}

void bitwise(const TensorView& got, const TensorView& want, int rank, const std::string& what,
             Failures& failures) {
  std::string why;
  if (!workload::bitwise_equal(got, want, &why)) failures.add(rank, what + ": " + why);
}

void within(const TensorView& got, const TensorView& want, const TensorView& scale, int rank,
            const std::string& what, Failures& failures) {
  std::string why;
  if (!reference::within_moe_tolerance(got, want, scale, DType::fp8_e4m3, &why))
    failures.add(rank, what + " outside docs/MOE.md's tolerance: " + why);
}

class MoeLayerCudaPrecastFp8 : public ::testing::TestWithParam<Case> {};

TEST_P(MoeLayerCudaPrecastFp8, EqualsTheLayerThatCastsTheSameRowsAndIsWithinToleranceOfTheReference) {
  SWITCHYARD_REQUIRE_GPU();
  const Case& c = GetParam();
  const uint64_t seed = seed_for("moe_cuda/precast_fp8/" + c.name);
  const Fp8Layer f = fp8_layer(c, seed);
  MoeLayerOptions options;
  options.num_experts = c.num_experts;
  options.max_tokens_per_rank = c.max_tokens;
  Failures failures;
  with_gpu_ranks(
      c, Regions::symmetric,
      [&](Group& group, Buffer& buffer, cudaStream_t stream) {
        const int rank = group.rank();
        const int device = device_for_rank(rank, c.ranks);
        const workload::MoeExpertWeights& host = f.weights[rank];
        const Tensor w1 = to_device(host.w1, device, stream),
                     w1_scales = to_device(host.w1_scales, device, stream);
        const Tensor w2 = to_device(host.w2, device, stream),
                     w2_scales = to_device(host.w2_scales, device, stream);
        MoeLayer layer(buffer, {w1, w1_scales, w2, w2_scales}, options);
        group.barrier();  // every layer made before any rank's first call (switchyard/moe.hpp)
        const auto forward = [&](const workload::RankData& data) {
          const DeviceInputs in = upload_inputs(data, device, stream);
          const Tensor scales = to_device(data.x_scales, device, stream);  // undefined for bf16 x
          MoeArgs args;
          args.x = in.x;
          args.x_scales = scales;
          args.topk_idx = in.topk_idx;
          args.topk_weights = in.topk_weights;
          args.stream = stream;
          return to_host(layer.forward(args).y, stream);
        };
        const Tensor from_cast = forward(f.cast[rank]);
        bitwise(from_cast, forward(f.bf16[rank]), rank, "y of fp8 x vs y of the bf16 x it is the cast of",
                failures);
        within(from_cast, f.y_cast[rank], f.scale_cast[rank], rank, "y of fp8 x", failures);
        const Tensor from_arbitrary = forward(f.arbitrary[rank]);
        within(from_arbitrary, f.y_arbitrary[rank], f.scale_arbitrary[rank], rank,
               "y of arbitrary fp8 rows and scales", failures);
        bitwise(forward(f.arbitrary[rank]), from_arbitrary, rank, "y of arbitrary fp8 rows, run to run",
                failures);
      },
      kTimeoutSeconds);
  expect_none(failures, seed);
}

std::vector<Case> precast_layer_cases() {
  using workload::Routing;
  return {
      make("Small_R1", 1, {7}, 8, 2, 4, 256),
      make("r2_k1", 2, {6, 5}, 8, 1, 4, 256),
      make("r4_some_ranks_empty", 4, {5, 0, 3, 0}, 6, 3, 8, 256),
      make("r2_no_tokens", 2, {0, 0}, 4, 2, 4, 256),
      with_routing(make("r4_all_slots_empty", 4, {3, 2, 4, 1}, 4, 2, 8, 256), Routing::all_invalid),
      with_routing(make("r4_skewed", 4, {6, 5, 6, 3}, 6, 4, 8, 256), Routing::skewed),
  };
}

INSTANTIATE_TEST_SUITE_P(EdgeCases, MoeLayerCudaPrecastFp8, ::testing::ValuesIn(precast_layer_cases()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace switchyard::testing::expert_major
