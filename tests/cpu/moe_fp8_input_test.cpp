// The MoE layer (docs/MOE.md) on the CPU backend with fp8 x that the caller cast itself (MoeArgs::x_scales),
// ranks as threads: y equals, bit for bit, the reference fed the same fp8 x (which the CPU path matches
// exactly, within docs/MOE.md's tolerance a fortiori), for arbitrary e4m3 rows and scales; and equals, bit
// for bit, the layer fed the bf16 x whose cast (common::cast_row_to_fp8) gives those bytes and scales. Edge
// cases: N = 0, all slots -1, k = 1, ranks 1, 2 and 4. And the refusals of fp8 x's bad combinations.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "support/expert_major_cases.hpp"
#include "support/expert_major_gtest.hpp"
#include "support/fp8_inputs.hpp"
#include "support/refusal.hpp"
#include "support/test_seed.hpp"
#include "switchyard/moe.hpp"
#include "switchyard/reference.hpp"
#include "workload/moe_weights.hpp"
#include "workload/workload.hpp"

namespace switchyard::testing {
namespace {

using expert_major::Case;
using expert_major::Failures;
using expert_major::Regions;

constexpr int kIntermediate = 128;

// Inputs: fp8 weights (H 256, I 128), every rank's bf16 tokens and their cast, and arbitrary fp8 rows.
struct Fp8Layer {
  Case c;
  std::vector<workload::MoeExpertWeights> weights;
  std::vector<workload::RankData> bf16, cast, arbitrary;
};

Fp8Layer fp8_layer(const Case& c, uint64_t seed) {
  Fp8Layer f;
  f.c = c;
  for (int rank = 0; rank < c.ranks; ++rank) {
    f.weights.push_back(workload::generate_moe_weights(c.num_experts / c.ranks, c.hidden, kIntermediate,
                                                       DType::fp8_e4m3, seed, rank));
  }
  f.bf16 = workload::generate(expert_major::shape_of(c), seed);
  f.cast = expert_major::cast_inputs(f.bf16);
  f.arbitrary = expert_major::precast_inputs(c, seed + 1);
  // The arbitrary rows take the drawn routing: one set of edge cases for every input.
  for (int rank = 0; rank < c.ranks; ++rank) {
    f.arbitrary[rank].topk_idx = f.bf16[rank].topk_idx;
    f.arbitrary[rank].topk_weights = f.bf16[rank].topk_weights;
  }
  return f;
}

std::vector<Tensor> reference_y(const Fp8Layer& f, const std::vector<workload::RankData>& data,
                                std::vector<Tensor>* error_scales = nullptr) {
  std::vector<reference::RankInputs> inputs;
  std::vector<MoeWeights> views;
  for (int rank = 0; rank < f.c.ranks; ++rank) {
    inputs.push_back(data[rank].inputs());
    views.push_back(f.weights[rank].weights());
  }
  return reference::moe_layer(inputs, views, f.c.num_experts, Topology::single_node(f.c.ranks), 0.0f,
                              error_scales);
}

MoeArgs layer_args(const workload::RankData& data) {
  MoeArgs args;
  args.x = data.x;
  args.x_scales = data.x_scales;  // undefined for bf16 x
  args.topk_idx = data.topk_idx;
  args.topk_weights = data.topk_weights;
  return args;
}

void compare_y(const TensorView& got, const TensorView& want, const std::string& what, int rank,
               Failures& failures) {
  std::string why;
  if (!workload::bitwise_equal(got, want, &why)) failures.add(rank, what + ": " + why);
}

class MoeLayerPrecastFp8 : public ::testing::TestWithParam<Case> {};

TEST_P(MoeLayerPrecastFp8, MatchesTheReferenceAndTheLayerThatCastsTheSameRows) {
  const Case& c = GetParam();
  const uint64_t seed = seed_for("moe/precast_fp8/" + c.name);
  const Fp8Layer f = fp8_layer(c, seed);
  std::vector<Tensor> error_scales;
  const std::vector<Tensor> want_cast = reference_y(f, f.cast, &error_scales);
  const std::vector<Tensor> want_arbitrary = reference_y(f, f.arbitrary);
  const std::vector<Tensor> want_bf16 = reference_y(f, f.bf16);

  MoeLayerOptions options;
  options.num_experts = c.num_experts;
  options.max_tokens_per_rank = c.max_tokens;
  Failures failures;
  expert_major::with_buffers(c, Regions::symmetric, [&](Group& group, Buffer& buffer) {
    const int rank = group.rank();
    MoeLayer layer(buffer, f.weights[rank].weights(), options);
    // The reference itself: fp8 x that is the cast of bf16 x gives the bf16 x's y.
    compare_y(want_cast[rank], want_bf16[rank], "reference y of the cast x vs of the bf16 x", rank, failures);

    const Tensor from_cast = expert_major::host_copy(layer.forward(layer_args(f.cast[rank])).y);
    compare_y(from_cast, want_cast[rank], "y of fp8 x vs the reference", rank, failures);
    std::string why;
    if (!reference::within_moe_tolerance(from_cast, want_cast[rank], error_scales[rank], DType::fp8_e4m3,
                                         &why))
      failures.add(rank, "y of fp8 x outside docs/MOE.md's tolerance: " + why);
    const Tensor from_bf16 = expert_major::host_copy(layer.forward(layer_args(f.bf16[rank])).y);
    compare_y(from_cast, from_bf16, "y of fp8 x vs y of the bf16 x it is the cast of", rank, failures);

    // A poisoned out_y on even ranks: every byte written.
    MoeArgs args = layer_args(f.arbitrary[rank]);
    Tensor out = expert_major::poisoned(DType::bf16, {f.arbitrary[rank].x.size(0), c.hidden});
    if (rank % 2 == 0) args.out_y = out;
    const Tensor from_arbitrary = expert_major::host_copy(layer.forward(args).y);
    compare_y(from_arbitrary, want_arbitrary[rank], "y of arbitrary fp8 rows and scales vs the reference",
              rank, failures);
  });
  expert_major::expect_none(failures, seed);
}

std::vector<Case> precast_layer_cases() {
  using workload::Routing;
  return {
      expert_major::make("r1", 1, {7}, 8, 2, 4, 256),
      expert_major::make("r2_k1", 2, {6, 5}, 8, 1, 4, 256),
      expert_major::make("r4_some_ranks_empty", 4, {5, 0, 3, 0}, 6, 3, 8, 256),
      expert_major::make("r2_no_tokens", 2, {0, 0}, 4, 2, 4, 256),
      expert_major::with_routing(expert_major::make("r4_all_slots_empty", 4, {3, 2, 4, 1}, 4, 2, 8, 256),
                                 Routing::all_invalid),
      expert_major::with_routing(expert_major::make("r4_skewed", 4, {6, 5, 6, 3}, 6, 4, 8, 256),
                                 Routing::skewed),
  };
}

INSTANTIATE_TEST_SUITE_P(EdgeCases, MoeLayerPrecastFp8, ::testing::ValuesIn(precast_layer_cases()),
                         [](const auto& info) { return info.param.name; });

// ---- refusals -------------------------------------------------------------------------------------

TEST(MoeLayerPrecastFp8Refusal, EachBadCombinationIsNamedAndWritesNothing) {
  const Case c = expert_major::make("refusals", 1, {4}, 4, 2, 4, 256);
  Buffer buffer(expert_major::buffer_options(c, 0, Regions::symmetric));
  buffer.connect({buffer.local_handle()});
  const workload::MoeExpertWeights bf16 = workload::generate_moe_weights(4, 256, 128, DType::bf16, 7, 0);
  const workload::MoeExpertWeights fp8 = workload::generate_moe_weights(4, 256, 128, DType::fp8_e4m3, 7, 0);
  const workload::RankData data = expert_major::precast_inputs(c, 11)[0];
  MoeLayerOptions options;
  options.num_experts = 4;
  options.max_tokens_per_rank = 4;
  MoeLayer fp8_layer(buffer, fp8.weights(), options);
  MoeLayer bf16_layer(buffer, bf16.weights(), options);
  Tensor out = expert_major::poisoned(DType::bf16, {4, 256});
  auto refused = [&](MoeLayer& layer, MoeArgs args) {
    args.out_y = out;
    return invalid_argument_message([&] { layer.forward(args); });
  };

  // bf16 weights take bf16 x only.
  EXPECT_TRUE(contains(refused(bf16_layer, layer_args(data)),
                       "x: expected bf16 with bf16 weights (fp8 x needs fp8 weights), got fp8_e4m3[4, 256]"));
  MoeArgs args = layer_args(data);
  args.x_scales = TensorView();
  EXPECT_TRUE(
      contains(refused(fp8_layer, args), "x_scales: expected a f32 tensor with 2 dimensions, got none"));
  args = layer_args(data);
  args.x_scales.shape[1] = 1;
  EXPECT_TRUE(contains(refused(fp8_layer, args),
                       "x_scales: expected size 2 in dimension 1 (H / 128 of the weights: one scale per 128 "
                       "channels of x), got f32[4, 1]"));
  args = layer_args(data);
  args.x_scales.shape[0] = 3;
  EXPECT_TRUE(
      contains(refused(fp8_layer, args), "x_scales: expected size 4 in dimension 0 (num_tokens of x)"));
  Tensor scales_bf16 = Tensor::empty(DType::bf16, {4, 2});
  args = layer_args(data);
  args.x_scales = scales_bf16;
  EXPECT_TRUE(contains(refused(fp8_layer, args), "x_scales: expected dtype f32, got bf16[4, 2]"));
  // Scales without fp8 x, on either recipe.
  const workload::RankData bf16_data = workload::generate(expert_major::shape_of(c), 11)[0];
  args = layer_args(bf16_data);
  args.x_scales = data.x_scales;
  EXPECT_TRUE(
      contains(refused(fp8_layer, args), "x_scales: expected none (scales come only with fp8_e4m3 x)"));
  EXPECT_TRUE(
      contains(refused(bf16_layer, args), "x_scales: expected none (scales come only with fp8_e4m3 x)"));
  EXPECT_TRUE(expert_major::all_poison(out)) << "a refused call wrote its output";
  // The good call passes on the same layer.
  EXPECT_NO_THROW(fp8_layer.forward(layer_args(data)));
}

}  // namespace
}  // namespace switchyard::testing
