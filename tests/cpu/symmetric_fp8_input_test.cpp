// fp8 x that the caller cast itself (ExpertMajorDispatchArgs::x_scales) through the CPU `symmetric`
// engine, with ranks as threads: its rows and scales arrive bit for bit as the caller gave them (against
// the reference, and against the callers' own tensors), the combine on top matches the reference, on both
// combine paths and both dispatch settings (fp8 is always published); and each bad combination is refused
// by name before any output is written, the low_latency engine's refusal included.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "support/expert_major_gtest.hpp"
#include "support/fp8_inputs.hpp"
#include "support/test_seed.hpp"
#include "switchyard/buffer.hpp"
#include "switchyard/errors.hpp"
#include "switchyard/group.hpp"
#include "workload/workload.hpp"

namespace switchyard::testing::expert_major {
namespace {

// A case and whether token 0 of its rank 0 (when it has one) is routed nowhere (every slot -1).
struct Fp8Case {
  Case c;
  bool first_token_unrouted = false;
};

void PrintTo(const Fp8Case& f, std::ostream* out) {
  *out << f.c.name;
}

class SymmetricPrecastFp8 : public ::testing::TestWithParam<Fp8Case> {};

TEST_P(SymmetricPrecastFp8, RowsAndScalesArriveAsTheCallerGaveThemAndCombineMatchesTheReference) {
  const Fp8Case& f = GetParam();
  const Case& c = f.c;
  const uint64_t seed = testing::seed_for("symmetric/precast_fp8/" + c.name);
  std::vector<workload::RankData> data = precast_inputs(c, seed);
  if (f.first_token_unrouted) {
    ASSERT_GT(data[0].topk_idx.size(0), 0);
    std::fill(data[0].topk_idx.as<int64_t>(), data[0].topk_idx.as<int64_t>() + c.topk, -1);
  }
  const Expected expected = expected_from(c, data);
  Failures failures;
  with_buffers(c, Regions::symmetric, [&](Group& group, Buffer& buffer) {
    const int rank = group.rank();
    const workload::RankData& mine = expected.data[rank];
    // Preallocated, poisoned outputs on even ranks; the library allocates on odd ones.
    const PoisonedOutputs out = rank % 2 == 0 ? poisoned_outputs(c, mine.x.size(0)) : PoisonedOutputs();
    LowLatencyDispatchArgs args = precast_dispatch_args(c, mine);
    out.attach(args);
    LowLatencyDispatchResult dispatched = buffer.symmetric_dispatch(args);
    check_dispatch(dispatched, expected.dispatched[rank], "reference", rank, failures);
    check_rows_are_the_callers(dispatched, expected.data, rank, failures);

    Tensor y = expert_outputs(dispatched.recv_x, dispatched.recv_x_scales, rank);
    LowLatencyCombineResult combined = buffer.symmetric_combine(combine_args(mine, dispatched.handle, y));
    compare(combined.combined_x, expected.combined[rank], "combined_x vs reference", rank, failures);
  });
  expect_none(failures, seed);
}

std::vector<Fp8Case> precast_cases() {
  using workload::Routing;
  std::vector<Fp8Case> cases;
  for (const Case& c : on_both_combine_paths({
           make("r1_k1", 1, {5}, 8, 1, 4),
           make("r2_k3", 2, {7, 4}, 8, 3, 8, 384),
           make("r4_k4_some_ranks_empty", 4, {6, 0, 5, 2}, 6, 4, 16, 128),
           make("r4_zero_tokens", 4, {0, 0, 0, 0}, 4, 2, 8),
           with_routing(make("r2_all_invalid", 2, {4, 3}, 4, 3, 4), Routing::all_invalid),
           with_routing(make("r4_skewed", 4, {6, 6, 5, 6}, 6, 3, 8), Routing::skewed),
       })) {
    cases.push_back({with_precast_x(c)});
  }
  Fp8Case unrouted{with_precast_x(make("r2_k2_first_token_unrouted", 2, {5, 6}, 6, 2, 4))};
  unrouted.first_token_unrouted = true;
  cases.push_back(unrouted);
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Shapes, SymmetricPrecastFp8, ::testing::ValuesIn(precast_cases()),
                         [](const auto& info) { return info.param.c.name; });

// The dispatch of rows the caller cast equals, bit for bit, the dispatch of the bf16 rows whose cast
// (use_fp8, no rounding of the scales) gives those bytes and scales.
TEST(SymmetricPrecastFp8Cast, EqualsTheDispatchThatCastsTheSameRows) {
  const Case c = with_precast_x(make("r3_k2_cast", 3, {6, 4, 5}, 6, 2, 6, 256));
  const uint64_t seed = testing::seed_for("symmetric/precast_fp8/cast");
  const std::vector<workload::RankData> bf16 = workload::generate(shape_of(c), seed);
  const std::vector<workload::RankData> cast = cast_inputs(bf16);
  Failures failures;
  with_buffers(c, Regions::symmetric, [&](Group& group, Buffer& buffer) {
    const int rank = group.rank();
    LowLatencyDispatchResult from_bf16 = buffer.symmetric_dispatch(dispatch_args(c, bf16[rank]));
    const Outputs cast_here{host_copy(from_bf16.recv_x),     host_copy(from_bf16.recv_x_scales),
                            host_copy(from_bf16.recv_count), host_copy(from_bf16.layout_range),
                            host_copy(from_bf16.src_info),   Tensor()};
    LowLatencyDispatchResult precast = buffer.symmetric_dispatch(precast_dispatch_args(c, cast[rank]));
    check_dispatch(precast, cast_here, "the dispatch's own cast", rank, failures);
    check_rows_are_the_callers(precast, cast, rank, failures);
  });
  expect_none(failures, seed);
}

// ---- refusals -----------------------------------------------------------------------------------

using SpoilArgs = std::function<void(LowLatencyDispatchArgs&)>;

// One rank (4 tokens, k = 2, 4 experts, H 256) dispatching fp8 x with its scales into poisoned fp8
// outputs; `spoil` breaks the call, which `engine` must refuse with `Exception` whose message starts
// with `names` and contains `detail`, writing none of the outputs. The unspoiled call then passes on the
// symmetric engine.
template <typename Exception>
void expect_precast_refused(Engine engine, const SpoilArgs& spoil, const std::string& names,
                            const std::string& detail) {
  SingleRank single(Regions::both);
  const Case c = with_precast_x(single.c);
  const workload::RankData data = precast_inputs(c, 5)[0];
  const PoisonedOutputs out = poisoned_outputs(c, data.x.size(0));
  LowLatencyDispatchArgs args = precast_dispatch_args(c, data);
  out.attach(args);
  LowLatencyDispatchArgs spoiled = args;
  spoil(spoiled);
  const std::string message = refused<Exception>([&] { dispatch_with(engine, *single.buffer, spoiled); });
  EXPECT_EQ(message.rfind(names, 0), 0u)
      << "expected a message starting with \"" << names << "\", got: " << message;
  EXPECT_NE(message.find(detail), std::string::npos) << "expected \"" << detail << "\" in: " << message;
  for (const Tensor& output : out.dispatch_outputs())
    EXPECT_TRUE(all_poison(output)) << "outputs were written";
  EXPECT_NO_THROW(single.buffer->symmetric_dispatch(args)) << "the unspoiled call, on the same buffer";
}

TEST(SymmetricPrecastFp8Refusal, EachBadCombinationIsNamedAndWritesNothing) {
  auto invalid = [](const SpoilArgs& spoil, const std::string& names, const std::string& detail) {
    SCOPED_TRACE(names + " " + detail);
    expect_precast_refused<InvalidArgument>(Engine::symmetric, spoil, names, detail);
  };
  invalid([](LowLatencyDispatchArgs& a) { a.use_fp8 = false; }, "use_fp8:", "expected true with fp8_e4m3 x");
  invalid([](LowLatencyDispatchArgs& a) { a.round_scale = true; },
          "round_scale:", "expected false with fp8_e4m3 x");
  invalid([](LowLatencyDispatchArgs& a) { a.use_ue8m0 = true; },
          "use_ue8m0:", "expected false with fp8_e4m3 x");
  invalid([](LowLatencyDispatchArgs& a) { a.x_scales = TensorView(); },
          "x_scales:", "expected a f32 tensor with 2 dimensions, got none");
  Tensor scales_bf16 = Tensor::empty(DType::bf16, {4, 2});
  invalid([&](LowLatencyDispatchArgs& a) { a.x_scales = scales_bf16; },
          "x_scales:", "expected dtype f32, got bf16[4, 2]");
  Tensor scales_one_block = Tensor::empty(DType::f32, {4, 1});
  invalid([&](LowLatencyDispatchArgs& a) { a.x_scales = scales_one_block; },
          "x_scales:", "expected size 2 in dimension 1 (hidden / 128 of x");
  Tensor scales_short = Tensor::empty(DType::f32, {3, 2});
  invalid([&](LowLatencyDispatchArgs& a) { a.x_scales = scales_short; },
          "x_scales:", "expected size 4 in dimension 0 (num_tokens of x)");
  Tensor x_192 = Tensor::empty(DType::fp8_e4m3, {4, 192});
  invalid([&](LowLatencyDispatchArgs& a) { a.x = x_192; }, "x:", "a positive multiple of 128");
  // bf16 x with scales: the scales come only with fp8 rows.
  Tensor x_bf16 = Tensor::empty(DType::bf16, {4, 256});
  std::fill(x_bf16.as<uint16_t>(), x_bf16.as<uint16_t>() + x_bf16.numel(), uint16_t{0x3f80});
  invalid([&](LowLatencyDispatchArgs& a) { a.x = x_bf16; },
          "x_scales:", "expected none (scales come only with fp8_e4m3 x");

  // The low_latency engine (same args) carries no pre-cast rows: Unsupported, naming x and the engine
  // that does.
  SCOPED_TRACE("low_latency");
  expect_precast_refused<Unsupported>(
      Engine::low_latency, [](LowLatencyDispatchArgs&) {}, "x:",
      "not supported by the low_latency engine (expected bf16 x, which use_fp8 casts; got fp8_e4m3[4, 256]");
}

}  // namespace
}  // namespace switchyard::testing::expert_major
