// The CPU `normal` engine through the public Buffer API, ranks as threads, against the reference,
// bit for bit (DESIGN.md, Testing). Every output is poisoned before each run.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <ostream>
#include <sstream>

#include "support/normal_round_trip.hpp"
#include "support/refusal.hpp"
#include "support/released_layout.hpp"
#include "support/test_seed.hpp"
#include "switchyard/buffer.hpp"
#include "switchyard/errors.hpp"
#include "switchyard/group.hpp"
#include "workload/workload.hpp"

namespace switchyard {
namespace {

using testing::Expected;
using testing::RankRun;
using testing::RoundTripOptions;
using workload::Routing;
using workload::Shape;

// NOTES: far above what any case here needs, yet a hung engine still fails the test well before
// ctest's per-test TIMEOUT.
constexpr double kTestTimeoutSeconds = 20.0;

Config ring_config(int num_channels, int ring_slots, int chunk_tokens) {
  Config config;
  config.num_channels = num_channels;
  config.ring_slots = ring_slots;
  config.chunk_tokens = chunk_tokens;
  config.timeout_seconds = kTestTimeoutSeconds;
  return config;
}

// The library's defaults, with the test timeout.
Config default_config() {
  Config config;
  config.timeout_seconds = kTestTimeoutSeconds;
  return config;
}

struct EngineCase {
  std::string name;
  Shape shape;
  Config config = default_config();
  int expert_alignment = 1;
};

// gtest prints a failing parameter with this instead of its bytes.
void PrintTo(const EngineCase& c, std::ostream* out) {
  *out << c.name << " (" << c.shape.describe() << ")";
}

Shape make_shape(Topology topology, std::vector<int64_t> tokens, int hidden, int topk, int num_experts,
                 DType dtype, bool with_weights = true, Routing routing = Routing::random) {
  Shape shape;
  shape.topology = topology;
  if (tokens.size() == 1) {
    shape.tokens_per_rank = tokens[0];
  } else {
    shape.tokens_per_rank_list = std::move(tokens);
  }
  shape.hidden = hidden;
  shape.topk = topk;
  shape.num_experts = num_experts;
  shape.dtype = dtype;
  shape.with_weights = with_weights;
  shape.routing = routing;
  return shape;
}

Topology single(int num_ranks) {
  return Topology::single_node(num_ranks);
}

constexpr DType bf16 = DType::bf16;
constexpr DType fp8 = DType::fp8_e4m3;

std::string describe(const EngineCase& c, uint64_t seed) {
  std::ostringstream out;
  out << "case " << c.name << ": seed=0x" << std::hex << seed << std::dec << " (SWITCHYARD_TEST_SEED=0x"
      << std::hex << testing::base_seed() << std::dec << ") " << c.shape.describe() << " config={"
      << c.config.to_string() << "} expert_alignment=" << c.expert_alignment;
  return out.str();
}

// Runs `body(buffer, rank)` on every rank, ranks as threads, each with its own connected Buffer.
// Returns false (with the reason) when the engine reports the topology Unsupported across nodes.
bool run_on_ranks(const EngineCase& c, const std::function<void(Buffer&, int)>& body,
                  std::string* unsupported) {
  try {
    run_ranks(c.shape.topology.num_ranks, [&](Group& group) {
      BufferOptions options;
      options.topology = c.shape.topology;
      options.rank = group.rank();
      options.backend = Backend::cpu;
      options.config = c.config;
      options.sizing = testing::sizing_for(c.shape);
      Buffer buffer(options);
      buffer.connect(group.allgather(buffer.local_handle()));
      body(buffer, group.rank());
    });
  } catch (const Unsupported& error) {
    // Only the multi-node engine may be missing; a single-node Unsupported is a failure.
    if (c.shape.topology.is_single_node()) throw;
    *unsupported = error.what();
    return false;
  }
  return true;
}

void report(const std::vector<std::string>& failures) {
  for (const std::string& failure : failures) ADD_FAILURE() << failure;
}

std::string case_name(const ::testing::TestParamInfo<EngineCase>& info) {
  return info.param.name;
}

// ---- the edge cases of DESIGN.md, Testing ------------------------------------------------------------
// Every buffer is sized for exactly its case (testing::sizing_for), so every case runs at full capacity.
std::vector<EngineCase> core_cases() {
  return {
      {"r1_bf16", make_shape(single(1), {16}, 256, 4, 8, bf16)},
      {"r1_zero_tokens", make_shape(single(1), {0}, 128, 4, 8, bf16)},
      {"r1_k9_fp8", make_shape(single(1), {7}, 128, 9, 9, fp8)},
      {"r2_bf16", make_shape(single(2), {32}, 512, 8, 16, bf16)},
      {"r2_zero_tokens", make_shape(single(2), {0}, 256, 4, 8, fp8)},
      {"r2_k1", make_shape(single(2), {16}, 256, 1, 4, bf16)},
      {"r2_hidden_8192_bf16", make_shape(single(2), {3}, 8192, 2, 4, bf16)},
      {"r2_hidden_8192_fp8", make_shape(single(2), {2}, 8192, 2, 4, fp8)},
      {"r3_fp8", make_shape(single(3), {20}, 384, 6, 12, fp8)},
      {"r3_one_rank_without_tokens", make_shape(single(3), {5, 0, 7}, 256, 4, 12, fp8)},
      {"r3_hidden_7168_skewed", make_shape(single(3), {4}, 7168, 8, 24, bf16, true, Routing::skewed)},
      {"r4_no_weights_alignment_4", make_shape(single(4), {24}, 128, 8, 32, bf16, false), default_config(),
       4},
      {"r4_all_slots_invalid", make_shape(single(4), {8}, 128, 4, 8, bf16, true, Routing::all_invalid)},
      {"r4_every_token_to_one_expert",
       make_shape(single(4), {10}, 256, 3, 16, fp8, true, Routing::one_expert)},
      {"r4_k9_fp8_alignment_4", make_shape(single(4), {8}, 128, 9, 16, fp8), default_config(), 4},
      {"r8_bf16", make_shape(single(8), {6}, 256, 8, 64, bf16)},
      {"r8_fp8_k9_alignment_4", make_shape(single(8), {4}, 128, 9, 16, fp8), default_config(), 4},
      {"r8_uneven_tokens", make_shape(single(8), {0, 3, 1, 5, 0, 2, 4, 1}, 128, 4, 16, bf16)},
      // Rings smaller than one rank's traffic: the senders wrap around under head/tail flow control.
      {"wrap_r2_ring2_chunk1", make_shape(single(2), {40}, 128, 4, 8, bf16), ring_config(2, 2, 1)},
      {"wrap_r4_ring3_chunk2_fp8", make_shape(single(4), {16}, 256, 4, 16, fp8), ring_config(1, 3, 2)},
      {"wrap_r3_ring4_chunk4_no_weights", make_shape(single(3), {30}, 128, 5, 12, bf16, false),
       ring_config(3, 4, 4)},
      {"wrap_r8_ring1_chunk1", make_shape(single(8), {4}, 128, 4, 16, bf16), ring_config(2, 1, 1)},
      // More channels than tokens: most channels carry nothing.
      {"r2_more_channels_than_tokens", make_shape(single(2), {3}, 128, 2, 4, bf16), ring_config(8, 4, 2)},
      // Each channel's traffic to the one hot rank is exactly one ring (4 channels x 128 slots).
      {"r2_rings_exactly_full", make_shape(single(2), {512}, 128, 2, 4, bf16, true, Routing::one_expert),
       ring_config(4, 128, 16)},
      // More tokens, rings wrapping many times, on every channel.
      {"r4_many_tokens_fp8_wrap", make_shape(single(4), {128}, 512, 8, 32, fp8), ring_config(4, 16, 4), 4},
      {"r8_many_tokens_wrap", make_shape(single(8), {48}, 256, 8, 64, bf16, true, Routing::skewed),
       ring_config(3, 8, 3)},
  };
}

// Smaller set for the properties that run the engine twice.
std::vector<EngineCase> replay_cases() {
  return {
      {"r1_bf16", make_shape(single(1), {12}, 256, 4, 8, bf16)},
      {"r2_bf16", make_shape(single(2), {16}, 256, 8, 16, bf16)},
      {"r3_fp8_wrap", make_shape(single(3), {12}, 256, 4, 12, fp8), ring_config(2, 2, 1)},
      {"r4_alignment_4", make_shape(single(4), {8}, 128, 6, 16, bf16), default_config(), 4},
      {"r4_no_weights_fp8", make_shape(single(4), {6}, 128, 4, 8, fp8, false)},
      {"r8_bf16", make_shape(single(8), {3}, 128, 4, 16, bf16)},
  };
}

// ranks_per_node < num_ranks: the node-grouped combine order of DESIGN.md.
std::vector<EngineCase> multi_node_cases() {
  return {
      {"r2_two_nodes", make_shape(Topology{2, 1}, {10}, 256, 2, 4, bf16)},
      {"r4_two_nodes", make_shape(Topology{4, 2}, {12}, 256, 4, 16, bf16)},
      {"r4_four_nodes_fp8", make_shape(Topology{4, 1}, {8}, 128, 4, 8, fp8)},
      {"r8_two_nodes_fp8", make_shape(Topology{8, 4}, {4}, 128, 8, 32, fp8), default_config(), 4},
      {"r8_four_nodes_wrap", make_shape(Topology{8, 2}, {5}, 128, 4, 16, bf16), ring_config(2, 2, 1)},
  };
}

// ---- properties ------------------------------------------------------------------------------------

void check_round_trip_matches_reference(const EngineCase& c, const RoundTripOptions& options, int draw = 0,
                                        testing::Biases biases = testing::Biases::none) {
  const uint64_t seed = testing::seed_for(c.name + (draw ? "#" + std::to_string(draw) : std::string()));
  SCOPED_TRACE(describe(c, seed) + " biases=" + std::to_string(static_cast<int>(biases)));
  const std::vector<workload::RankData> data = workload::generate(c.shape, seed);
  const Expected expected = testing::compute_expected(c.shape, data, c.expert_alignment,
                                                      testing::make_biases(c.shape, seed, biases));
  const int num_ranks = c.shape.topology.num_ranks;
  std::vector<RankRun> runs(num_ranks);
  std::string unsupported;
  if (!run_on_ranks(
          c,
          [&](Buffer& buffer, int rank) {
            runs[rank] = testing::run_round_trip(buffer, c.shape, data[rank], expected, options);
          },
          &unsupported)) {
    GTEST_SKIP() << unsupported;
  }
  std::vector<std::string> failures;
  for (int rank = 0; rank < num_ranks; ++rank) {
    testing::check_layout(runs[rank], expected, rank, &failures);
    testing::check_dispatch(runs[rank], c.shape, expected, rank, options, true, &failures);
    testing::check_combine(runs[rank], c.shape, expected, rank, c.shape.with_weights, &failures);
  }
  report(failures);
}

class NormalEngineTest : public ::testing::TestWithParam<EngineCase> {};

// NOTES: two independent draws per case; each is a fresh set of buffers.
constexpr int kDrawsPerCase = 2;

TEST_P(NormalEngineTest, LayoutDispatchAndCombineMatchReferenceBitwise) {
  RoundTripOptions options;
  options.expert_alignment = GetParam().expert_alignment;
  for (int draw = 0; draw < kDrawsPerCase && !HasFailure(); ++draw) {
    check_round_trip_matches_reference(GetParam(), options, draw);
  }
}

INSTANTIATE_TEST_SUITE_P(EdgeCases, NormalEngineTest, ::testing::ValuesIn(core_cases()), case_name);

class NormalEngineMultiNodeTest : public ::testing::TestWithParam<EngineCase> {};

TEST_P(NormalEngineMultiNodeTest, CombineReducesPerNodeThenAcrossNodesBitwise) {
  RoundTripOptions options;
  options.expert_alignment = GetParam().expert_alignment;
  check_round_trip_matches_reference(GetParam(), options);
}

// The hierarchical engine takes the caller's allocator (DispatchArgs::allocate_outputs) as one node does.
TEST_P(NormalEngineMultiNodeTest, OutputsFromTheCallersAllocatorMatchReferenceBitwise) {
  RoundTripOptions options;
  options.expert_alignment = GetParam().expert_alignment;
  options.preallocate_outputs = false;
  options.output_allocator = true;
  check_round_trip_matches_reference(GetParam(), options);
}

INSTANTIATE_TEST_SUITE_P(Topologies, NormalEngineMultiNodeTest, ::testing::ValuesIn(multi_node_cases()),
                         case_name);

class NormalEngineReplayTest : public ::testing::TestWithParam<EngineCase> {};

TEST_P(NormalEngineReplayTest, LibraryAllocatedOutputsMatchReferenceBitwise) {
  RoundTripOptions options;
  options.expert_alignment = GetParam().expert_alignment;
  options.preallocate_outputs = false;
  options.pass_layout = false;  // dispatch computes the layout itself
  check_round_trip_matches_reference(GetParam(), options);
}

TEST_P(NormalEngineReplayTest, RepeatedCallsAreBitwiseDeterministic) {
  const EngineCase& c = GetParam();
  const uint64_t seed = testing::seed_for(c.name);
  SCOPED_TRACE(describe(c, seed));
  const std::vector<workload::RankData> data = workload::generate(c.shape, seed);
  const Expected expected = testing::compute_expected(c.shape, data, c.expert_alignment);
  RoundTripOptions options;
  options.expert_alignment = c.expert_alignment;
  const int num_ranks = c.shape.topology.num_ranks;
  std::vector<RankRun> first(num_ranks), second(num_ranks);
  std::string unsupported;
  ASSERT_TRUE(run_on_ranks(
      c,
      [&](Buffer& buffer, int rank) {
        // The same inputs twice on the same buffers: the second call also proves the rings and counters
        // were left ready for reuse.
        first[rank] = testing::run_round_trip(buffer, c.shape, data[rank], expected, options);
        second[rank] = testing::run_round_trip(buffer, c.shape, data[rank], expected, options);
      },
      &unsupported));
  std::vector<std::string> failures;
  for (int rank = 0; rank < num_ranks; ++rank) {
    const int64_t rows = static_cast<int64_t>(expected.dispatched[rank].recv_src_rank.size());
    testing::check_identical(second[rank], first[rank], rows, &failures);
    testing::check_dispatch(second[rank], c.shape, expected, rank, options, true, &failures);
    testing::check_combine(second[rank], c.shape, expected, rank, c.shape.with_weights, &failures);
  }
  report(failures);
}

// `output_allocator`: every dispatch's outputs from DispatchArgs::allocate_outputs (RoundTripOptions).
void check_cached_dispatch(const EngineCase& c, bool with_topk, int64_t num_worst_tokens,
                           bool output_allocator = false) {
  const uint64_t seed = testing::seed_for(c.name);
  SCOPED_TRACE(describe(c, seed) +
               (with_topk ? " cached dispatch with topk_idx" : " cached dispatch without topk_idx") +
               " num_worst_tokens=" + std::to_string(num_worst_tokens) +
               (output_allocator ? ", outputs from allocate_outputs" : ""));
  const std::vector<workload::RankData> data = workload::generate(c.shape, seed);
  const Expected expected = testing::compute_expected(c.shape, data, c.expert_alignment);
  RoundTripOptions options;
  options.expert_alignment = c.expert_alignment;
  options.num_worst_tokens = num_worst_tokens;
  options.preallocate_outputs = !output_allocator;
  options.output_allocator = output_allocator;
  const int num_ranks = c.shape.topology.num_ranks;
  std::vector<RankRun> first(num_ranks), cached(num_ranks);
  std::string unsupported;
  ASSERT_TRUE(run_on_ranks(
      c,
      [&](Buffer& buffer, int rank) {
        first[rank] = testing::run_round_trip(buffer, c.shape, data[rank], expected, options);
        cached[rank] = testing::run_cached_round_trip(buffer, c.shape, data[rank], expected, options,
                                                      first[rank], with_topk);
      },
      &unsupported));
  std::vector<std::string> failures;
  for (int rank = 0; rank < num_ranks; ++rank) {
    testing::check_dispatch(first[rank], c.shape, expected, rank, options, true, &failures);
    testing::check_dispatch(cached[rank], c.shape, expected, rank, options, with_topk, &failures);
    testing::check_combine(cached[rank], c.shape, expected, rank, with_topk && c.shape.with_weights,
                           &failures);
  }
  report(failures);
}

TEST_P(NormalEngineReplayTest, CachedDispatchGivesTheSameOutputs) {
  check_cached_dispatch(GetParam(), true, 0);
}

TEST_P(NormalEngineReplayTest, CachedDispatchWithoutTopkGivesTheSameRowsAndCombine) {
  check_cached_dispatch(GetParam(), false, 0);
}

int64_t worst_tokens(const Shape& shape) {
  int64_t most = 0;
  for (int rank = 0; rank < shape.topology.num_ranks; ++rank) most = std::max(most, shape.tokens_of(rank));
  return shape.topology.num_ranks * most;
}

TEST_P(NormalEngineReplayTest, WorstCaseDispatchPadsRowsAndCombineMatchesReference) {
  const EngineCase& c = GetParam();
  RoundTripOptions options;
  options.expert_alignment = c.expert_alignment;
  options.num_worst_tokens = worst_tokens(c.shape);
  SCOPED_TRACE("num_worst_tokens=" + std::to_string(options.num_worst_tokens));
  check_round_trip_matches_reference(c, options);
}

TEST_P(NormalEngineReplayTest, WorstCaseCachedDispatchGivesTheSameOutputs) {
  check_cached_dispatch(GetParam(), true, worst_tokens(GetParam().shape));
}

// DispatchArgs::allocate_outputs (a framework's allocator, as DeepEP's binding allocates with torch): called
// once with the rows the rank receives (num_worst_tokens in worst-case mode), and its tensors are the
// outputs, bitwise the reference's; fresh, worst-case and cached dispatches, with and without top-k.
TEST_P(NormalEngineReplayTest, OutputsFromTheCallersAllocatorMatchReferenceBitwise) {
  const EngineCase& c = GetParam();
  RoundTripOptions options;
  options.expert_alignment = c.expert_alignment;
  options.preallocate_outputs = false;
  options.output_allocator = true;
  check_round_trip_matches_reference(c, options);
  options.num_worst_tokens = worst_tokens(c.shape);
  check_round_trip_matches_reference(c, options);
  check_cached_dispatch(c, true, 0, true);
  check_cached_dispatch(c, false, worst_tokens(c.shape), true);
}

INSTANTIATE_TEST_SUITE_P(Shapes, NormalEngineReplayTest, ::testing::ValuesIn(replay_cases()), case_name);

// The allocator's outputs are checked as out_recv_* are, each refused by name (one rank: no peer waits on
// it); and it is refused beside out_recv_*, before the call starts.
TEST(NormalEngineOutputAllocator, BadOutputsAndOutputsGivenTwiceAreRefusedByName) {
  EngineCase c{"allocator_refusals", {}, default_config(), 1};
  c.shape.topology = single(1);
  c.shape.tokens_per_rank = 24;
  c.shape.hidden = 256;
  c.shape.topk = 2;
  c.shape.num_experts = 4;
  c.shape.dtype = DType::bf16;
  const std::vector<workload::RankData> data = workload::generate(c.shape, testing::seed_for(c.name));
  std::vector<std::string> messages;
  std::vector<int64_t> rows_asked;
  ASSERT_TRUE(run_on_ranks(
      c,
      [&](Buffer& buffer, int) {
        DispatchArgs base;
        base.x = data[0].x;
        base.topk_idx = data[0].topk_idx;
        base.topk_weights = data[0].topk_weights;
        base.num_experts = c.shape.num_experts;
        const auto with = [&](std::function<DispatchOutputs(int64_t)> allocate) {
          DispatchArgs args = base;
          args.allocate_outputs = [&rows_asked, allocate](int64_t rows) {
            rows_asked.push_back(rows);
            return allocate(rows);
          };
          return args;
        };
        DispatchArgs twice = with([](int64_t) { return DispatchOutputs{}; });
        const Tensor given = Tensor::empty(DType::bf16, {48, 256});
        twice.out_recv_x = given;
        messages.push_back(testing::invalid_argument_message([&] { buffer.dispatch(twice); }));
        messages.push_back(testing::invalid_argument_message([&] {
          buffer.dispatch(with([](int64_t rows) {
            static Tensor x;
            x = Tensor::empty(DType::bf16, {rows + 1, 256});
            return DispatchOutputs{x, {}, {}, {}};
          }));
        }));
        messages.push_back(testing::invalid_argument_message([&] {
          buffer.dispatch(with([](int64_t rows) {
            static Tensor x;
            x = Tensor::empty(DType::f32, {rows, 256});
            return DispatchOutputs{x, {}, {}, {}};
          }));
        }));
        messages.push_back(testing::invalid_argument_message([&] {
          buffer.dispatch(with([](int64_t rows) {
            static Tensor scales;
            scales = Tensor::empty(DType::f32, {rows, 2});
            return DispatchOutputs{{}, scales, {}, {}};
          }));
        }));
        messages.push_back(testing::invalid_argument_message([&] {
          buffer.dispatch(with([](int64_t rows) {
            static Tensor idx;
            idx = Tensor::empty(DType::i64, {rows, 3});
            return DispatchOutputs{{}, {}, idx, {}};
          }));
        }));
      },
      nullptr));
  ASSERT_EQ(messages.size(), 5u);
  EXPECT_NE(messages[0].find("out_recv_x: expected none (allocate_outputs makes the outputs)"),
            std::string::npos)
      << messages[0];
  EXPECT_NE(messages[1].find("allocate_outputs: recv_x: expected"), std::string::npos) << messages[1];
  EXPECT_NE(messages[1].find("rows (tokens received)"), std::string::npos) << messages[1];
  EXPECT_NE(messages[2].find("allocate_outputs: recv_x: expected dtype bf16"), std::string::npos)
      << messages[2];
  EXPECT_NE(messages[3].find("allocate_outputs: recv_x_scales: expected none"), std::string::npos)
      << messages[3];
  EXPECT_NE(messages[4].find("allocate_outputs: recv_topk_idx: expected size 2 in dimension 1 (k)"),
            std::string::npos)
      << messages[4];
  // Refused beside out_recv_x before the call started: the allocator was asked only by the four others.
  EXPECT_EQ(rows_asked.size(), 4u);
}

// Combine biases (DeepEP's `bias`): the sum starts at bias0 + bias1 in fp32, then the rows in rank order,
// rounded once. One bias, the other alone, and both; -0.0 entries check the sign of a zero start.
class NormalEngineBiasTest : public ::testing::TestWithParam<EngineCase> {};

TEST_P(NormalEngineBiasTest, CombineWithBiasesMatchesReferenceBitwise) {
  RoundTripOptions options;
  options.expert_alignment = GetParam().expert_alignment;
  for (testing::Biases biases : {testing::Biases::first, testing::Biases::second, testing::Biases::both}) {
    check_round_trip_matches_reference(GetParam(), options, 0, biases);
  }
}

TEST_P(NormalEngineBiasTest, CombineWithBiasesIntoLibraryOutputsMatchesReferenceBitwise) {
  RoundTripOptions options;
  options.expert_alignment = GetParam().expert_alignment;
  options.preallocate_outputs = false;
  check_round_trip_matches_reference(GetParam(), options, 1, testing::Biases::both);
}

// Dispatch without top-k (DeepEP's topk_idx=None): the layout routes the tokens, the receivers count
// per expert what the sources' layouts claim, no ids or weights travel, and combine is the plain sum.
class NormalEngineWithoutTopkTest : public ::testing::TestWithParam<EngineCase> {};

void check_without_topk(const EngineCase& c, const RoundTripOptions& options, bool then_cached) {
  const uint64_t seed = testing::seed_for(c.name + "/without_topk");
  SCOPED_TRACE(describe(c, seed) +
               " without topk_idx, num_worst_tokens=" + std::to_string(options.num_worst_tokens));
  const std::vector<workload::RankData> data = workload::generate(c.shape, seed);
  const Expected expected = testing::compute_expected_without_topk(c.shape, data, c.expert_alignment);
  const int num_ranks = c.shape.topology.num_ranks;
  std::vector<RankRun> runs(num_ranks), cached(num_ranks);
  std::string unsupported;
  ASSERT_TRUE(run_on_ranks(
      c,
      [&](Buffer& buffer, int rank) {
        runs[rank] = testing::run_round_trip_without_topk(buffer, c.shape, data[rank], expected, options);
        if (then_cached) {
          cached[rank] = testing::run_cached_round_trip(buffer, c.shape, data[rank], expected, options,
                                                        runs[rank], false);
        }
      },
      &unsupported))
      << unsupported;
  std::vector<std::string> failures;
  for (int rank = 0; rank < num_ranks; ++rank) {
    for (const RankRun* run : {&runs[rank], then_cached ? &cached[rank] : nullptr}) {
      if (!run) continue;
      testing::check_dispatch(*run, c.shape, expected, rank, options, false, &failures);
      testing::check_combine(*run, c.shape, expected, rank, false, &failures);
      if (run->dispatch.recv_topk_idx.defined() || run->dispatch.recv_topk_weights.defined()) {
        failures.push_back("rank " + std::to_string(rank) +
                           ": expected no recv_topk_idx and no recv_topk_weights without topk_idx");
      }
    }
  }
  report(failures);
}

TEST_P(NormalEngineWithoutTopkTest, DispatchByLayoutAndPlainCombineMatchReferenceBitwise) {
  RoundTripOptions options;
  options.expert_alignment = GetParam().expert_alignment;
  check_without_topk(GetParam(), options, true);
}

TEST_P(NormalEngineWithoutTopkTest, LibraryAllocatedAndWorstCaseOutputsMatchReferenceBitwise) {
  RoundTripOptions options;
  options.expert_alignment = GetParam().expert_alignment;
  options.preallocate_outputs = false;
  check_without_topk(GetParam(), options, false);
  options.num_worst_tokens = worst_tokens(GetParam().shape);
  check_without_topk(GetParam(), options, false);
  // The caller's allocator (DispatchArgs::allocate_outputs) makes recv_x (and its scales) only.
  options.output_allocator = true;
  check_without_topk(GetParam(), options, false);
}

std::vector<EngineCase> without_topk_cases() {
  return {
      {"r1_bf16", make_shape(single(1), {12}, 256, 4, 8, bf16)},
      {"r2_zero_tokens", make_shape(single(2), {0}, 128, 4, 8, fp8)},
      {"r3_one_rank_without_tokens_fp8", make_shape(single(3), {5, 0, 7}, 256, 4, 12, fp8)},
      {"r4_alignment_4_wrap", make_shape(single(4), {24}, 128, 8, 32, bf16), ring_config(2, 3, 2), 4},
      {"r4_all_slots_invalid", make_shape(single(4), {8}, 128, 4, 8, bf16, true, Routing::all_invalid)},
      {"r8_skewed", make_shape(single(8), {6}, 256, 8, 64, bf16, true, Routing::skewed)},
      {"r4_two_nodes", make_shape(Topology{4, 2}, {12}, 256, 4, 16, bf16)},
      {"r8_four_nodes_fp8_wrap", make_shape(Topology{8, 2}, {5}, 128, 4, 16, fp8), ring_config(2, 2, 1)},
  };
}

INSTANTIATE_TEST_SUITE_P(Shapes, NormalEngineWithoutTopkTest, ::testing::ValuesIn(without_topk_cases()),
                         case_name);

std::vector<EngineCase> bias_cases() {
  return {
      {"r1_bf16", make_shape(single(1), {12}, 256, 4, 8, bf16)},
      {"r2_zero_tokens", make_shape(single(2), {0}, 128, 4, 8, bf16)},
      {"r3_one_rank_without_tokens", make_shape(single(3), {5, 0, 7}, 256, 4, 12, fp8)},
      {"r4_all_slots_invalid", make_shape(single(4), {8}, 128, 4, 8, bf16, true, Routing::all_invalid)},
      {"r4_no_weights_wrap", make_shape(single(4), {16}, 128, 4, 16, bf16, false), ring_config(2, 3, 2)},
      {"r8_bf16", make_shape(single(8), {6}, 256, 8, 64, bf16)},
      {"r4_two_nodes", make_shape(Topology{4, 2}, {12}, 256, 4, 16, bf16)},
      {"r8_four_nodes_fp8", make_shape(Topology{8, 2}, {5}, 128, 4, 16, fp8)},
  };
}

INSTANTIATE_TEST_SUITE_P(Shapes, NormalEngineBiasTest, ::testing::ValuesIn(bias_cases()), case_name);

// DispatchArgs::layout is borrowed for the dispatch only: the caller may overwrite and free it once
// dispatch has returned, and the combine and a cached dispatch with the handle still route as the
// dispatch did (the handle owns its routing).
class NormalEngineReleasedLayoutTest : public ::testing::TestWithParam<EngineCase> {};

void check_released_layout(const EngineCase& c, bool with_topk, int64_t num_worst_tokens) {
  const uint64_t seed = testing::seed_for(c.name + "/released_layout");
  SCOPED_TRACE(describe(c, seed) + (with_topk ? " with topk_idx" : " without topk_idx") +
               " num_worst_tokens=" + std::to_string(num_worst_tokens));
  const std::vector<workload::RankData> data = workload::generate(c.shape, seed);
  const Expected expected = with_topk
                                ? testing::compute_expected(c.shape, data, c.expert_alignment)
                                : testing::compute_expected_without_topk(c.shape, data, c.expert_alignment);
  RoundTripOptions options;
  options.expert_alignment = c.expert_alignment;
  options.num_worst_tokens = num_worst_tokens;
  const int num_ranks = c.shape.topology.num_ranks;
  std::vector<testing::ReleasedLayoutRuns> runs(num_ranks);
  std::string unsupported;
  ASSERT_TRUE(run_on_ranks(
      c,
      [&](Buffer& buffer, int rank) {
        runs[rank] = testing::run_round_trip_releasing_layout(buffer, c.shape, data[rank], expected, options,
                                                              with_topk);
      },
      &unsupported))
      << unsupported;
  const bool with_weights = with_topk && c.shape.with_weights;
  std::vector<std::string> failures;
  for (int rank = 0; rank < num_ranks; ++rank) {
    for (const RankRun* run : {&runs[rank].first, &runs[rank].cached}) {
      testing::check_dispatch(*run, c.shape, expected, rank, options, with_topk, &failures);
      testing::check_combine(*run, c.shape, expected, rank, with_weights, &failures);
    }
  }
  report(failures);
}

TEST_P(NormalEngineReleasedLayoutTest, CombineAndCachedDispatchAfterTheLayoutWasFreedMatchReferenceBitwise) {
  check_released_layout(GetParam(), true, 0);
}

TEST_P(NormalEngineReleasedLayoutTest,
       WorstCaseCombineAndCachedDispatchAfterTheLayoutWasFreedMatchReference) {
  check_released_layout(GetParam(), true, worst_tokens(GetParam().shape));
}

TEST_P(NormalEngineReleasedLayoutTest,
       WithoutTopkCombineAndCachedDispatchAfterTheLayoutWasFreedMatchReference) {
  check_released_layout(GetParam(), false, 0);
}

std::vector<EngineCase> released_layout_cases() {
  return {
      {"r1_bf16", make_shape(single(1), {12}, 256, 4, 8, bf16)},
      {"r2_zero_tokens", make_shape(single(2), {0}, 128, 4, 8, bf16)},
      {"r3_fp8_wrap", make_shape(single(3), {12}, 256, 4, 12, fp8), ring_config(2, 2, 1)},
      {"r4_no_weights_alignment_4", make_shape(single(4), {8}, 128, 6, 16, bf16, false), default_config(), 4},
      {"r8_skewed", make_shape(single(8), {6}, 256, 8, 64, bf16, true, Routing::skewed)},
  };
}

INSTANTIATE_TEST_SUITE_P(Shapes, NormalEngineReleasedLayoutTest, ::testing::ValuesIn(released_layout_cases()),
                         case_name);

// ---- per-call tuning (CallTuning: DeepEP's per-call Config) ---------------------------------------------
// A call tuned differently from its Buffer gives the reference's bits, and so does the combine and the
// cached dispatch that follow it; calls of different tunings in a row on the same buffers too.
struct TuningCase {
  std::string name;
  EngineCase engine;
  CallTuning dispatch;  // also the cached dispatch's
  CallTuning combine;
};

void PrintTo(const TuningCase& c, std::ostream* out) {
  *out << c.name << " dispatch " << c.dispatch.to_string() << " combine " << c.combine.to_string();
}

std::vector<TuningCase> tuning_cases() {
  return {
      // Fewer channels and rings smaller than the Buffer's: the senders wrap.
      {"r2_fewer_channels_small_rings",
       {"r2", make_shape(single(2), {24}, 256, 4, 8, bf16), ring_config(4, 16, 4)},
       {2, 3, 1},
       {0, 2, 2}},
      {"r4_one_channel_ring1_fp8",
       {"r4_fp8", make_shape(single(4), {12}, 128, 4, 16, fp8), ring_config(3, 8, 3)},
       {1, 1, 1},
       {0, 5, 0}},
      // Only the chunk: the Buffer's channels and rings.
      {"r8_chunk_only", {"r8", make_shape(single(8), {6}, 256, 8, 64, bf16)}, {0, 0, 2}, {0, 0, 5}},
      // More channels than the Buffer's, in rings that still fit its heap.
      {"r3_more_channels_than_the_buffer",
       {"r3", make_shape(single(3), {20}, 128, 5, 12, bf16, false), ring_config(2, 32, 4)},
       {5, 4, 2},
       {5, 6, 3}},
      // Across nodes: the RDMA rings take the call's ring slots too.
      {"r4_two_nodes",
       {"r4_nodes", make_shape(Topology{4, 2}, {10}, 256, 4, 16, bf16), ring_config(3, 8, 4)},
       {2, 2, 1},
       {0, 3, 2}},
  };
}

class NormalEngineTuningTest : public ::testing::TestWithParam<TuningCase> {};

TEST_P(NormalEngineTuningTest, TunedCallsMatchReferenceBitwise) {
  const TuningCase& t = GetParam();
  const EngineCase& c = t.engine;
  const uint64_t seed = testing::seed_for(t.name);
  SCOPED_TRACE(describe(c, seed) + " dispatch " + t.dispatch.to_string() + " combine " +
               t.combine.to_string());
  const std::vector<workload::RankData> data = workload::generate(c.shape, seed);
  const Expected expected = testing::compute_expected(c.shape, data, c.expert_alignment);
  RoundTripOptions tuned;
  tuned.dispatch_tuning = t.dispatch;
  tuned.combine_tuning = t.combine;
  const RoundTripOptions plain;
  const int num_ranks = c.shape.topology.num_ranks;
  std::vector<RankRun> first(num_ranks), cached(num_ranks), untuned(num_ranks);
  std::string unsupported;
  if (!run_on_ranks(
          c,
          [&](Buffer& buffer, int rank) {
            first[rank] = testing::run_round_trip(buffer, c.shape, data[rank], expected, tuned);
            cached[rank] = testing::run_cached_round_trip(buffer, c.shape, data[rank], expected, tuned,
                                                          first[rank], true);
            // The Buffer's own tuning right after: the rings and counters the tuned calls left are reset.
            untuned[rank] = testing::run_round_trip(buffer, c.shape, data[rank], expected, plain);
          },
          &unsupported)) {
    GTEST_SKIP() << unsupported;
  }
  std::vector<std::string> failures;
  for (int rank = 0; rank < num_ranks; ++rank) {
    const int expected_channels =
        t.dispatch.num_channels != 0 ? t.dispatch.num_channels : c.config.num_channels;
    if (expected_channels != Config::kAutoChannels &&
        first[rank].dispatch.handle.num_channels() != expected_channels) {
      failures.push_back("rank " + std::to_string(rank) + ": the handle holds " +
                         std::to_string(first[rank].dispatch.handle.num_channels()) + " channels, expected " +
                         std::to_string(expected_channels));
    }
    for (const RankRun* run : {&first[rank], &cached[rank], &untuned[rank]}) {
      testing::check_dispatch(*run, c.shape, expected, rank, tuned, true, &failures);
      testing::check_combine(*run, c.shape, expected, rank, c.shape.with_weights, &failures);
    }
  }
  report(failures);
}

INSTANTIATE_TEST_SUITE_P(Tunings, NormalEngineTuningTest, ::testing::ValuesIn(tuning_cases()),
                         [](const ::testing::TestParamInfo<TuningCase>& info) { return info.param.name; });

// A tuning that cannot run is refused on the host, naming the field, before any rank moves a row (every
// rank refuses alike, so none waits for another).
TEST(NormalEngineTuning, RefusesWhatCannotRunNamingTheField) {
  const EngineCase c{"r2_refusals", make_shape(single(2), {8}, 128, 4, 8, bf16), ring_config(2, 4, 2)};
  const std::vector<workload::RankData> data = workload::generate(c.shape, testing::seed_for(c.name));
  std::vector<std::vector<std::string>> messages(2);
  std::string unsupported;
  ASSERT_TRUE(run_on_ranks(
      c,
      [&](Buffer& buffer, int rank) {
        auto dispatch_with = [&](CallTuning tuning) {
          return testing::invalid_argument_message([&] {
            DispatchArgs args;
            args.x = data[rank].x;
            args.topk_idx = data[rank].topk_idx;
            args.topk_weights = data[rank].topk_weights;
            args.num_experts = c.shape.num_experts;
            args.tuning = tuning;
            buffer.dispatch(args);
          });
        };
        std::vector<std::string>& out = messages[rank];
        out.push_back(dispatch_with({buffer.max_num_channels() + 1, 0, 0}));
        out.push_back(dispatch_with({-1, 0, 0}));
        out.push_back(dispatch_with({0, -2, 0}));
        out.push_back(dispatch_with({0, 3, 4}));     // chunk larger than the call's rings
        out.push_back(dispatch_with({0, 4096, 0}));  // rings past the heap's normal region
        // A combine runs with its dispatch's channels.
        DispatchArgs args;
        args.x = data[rank].x;
        args.topk_idx = data[rank].topk_idx;
        args.topk_weights = data[rank].topk_weights;
        args.num_experts = c.shape.num_experts;
        args.tuning = {1, 0, 0};
        DispatchResult dispatched = buffer.dispatch(args);
        EXPECT_EQ(dispatched.handle.num_channels(), 1);
        out.push_back(testing::invalid_argument_message([&] {
          CombineArgs combine;
          combine.x = dispatched.recv_x;
          combine.handle = &dispatched.handle;
          combine.tuning = {2, 0, 0};
          buffer.combine(combine);
        }));
        out.push_back(testing::invalid_argument_message([&] {
          DispatchArgs again;
          again.x = data[rank].x;
          again.cached_handle = &dispatched.handle;
          again.tuning = {2, 0, 0};
          buffer.dispatch(again);
        }));
        // The buffer still works after the refusals, with the handle's channels.
        CombineArgs combine;
        combine.x = dispatched.recv_x;
        combine.handle = &dispatched.handle;
        combine.tuning = {1, 2, 1};
        buffer.combine(combine);
      },
      &unsupported));
  const std::vector<std::string> fields = {
      "tuning.num_channels", "tuning.num_channels", "tuning.ring_slots", "tuning.chunk_tokens", "tuning:",
      "tuning.num_channels", "tuning.num_channels"};
  for (int rank = 0; rank < 2; ++rank) {
    ASSERT_EQ(messages[rank].size(), fields.size());
    for (size_t i = 0; i < fields.size(); ++i) {
      EXPECT_TRUE(testing::contains(messages[rank][i], fields[i]))
          << "refusal " << i << " on rank " << rank << ": expected a message naming " << fields[i] << ", got "
          << messages[rank][i];
    }
  }
}

// get_dispatch_layout into the caller's tensors (DispatchLayoutOutputs) gives the reference's layout there,
// and refuses outputs of the wrong dtype or shape by name, writing nothing.
TEST(NormalEngineLayout, IntoCallerOutputsMatchesReferenceAndRefusesWrongOnes) {
  const EngineCase c{"r4_layout_into", make_shape(Topology{4, 2}, {13}, 128, 5, 16, bf16)};
  const std::vector<workload::RankData> data = workload::generate(c.shape, testing::seed_for(c.name));
  const Expected expected = testing::compute_expected(c.shape, data, 1);
  std::vector<RankRun> runs(4);
  std::vector<std::vector<std::string>> refusals(4);
  std::vector<char> untouched(4, 0);  // not vector<bool>: its bits share words across rank threads
  std::vector<std::pair<Tensor, Tensor>> kept(4);
  std::string unsupported;
  ASSERT_TRUE(run_on_ranks(
      c,
      [&](Buffer& buffer, int rank) {
        const int64_t num_tokens = data[rank].topk_idx.size(0);
        // Outlive the lambda: the layout borrows them.
        Tensor& counts = kept[rank].first = Tensor::empty(DType::i32, {4 + 2 + 16});
        Tensor& in_rank = kept[rank].second = Tensor::empty(DType::boolean, {num_tokens, 4});
        std::memset(counts.data(), 0xA5, counts.nbytes());
        DispatchLayoutOutputs out;
        out.num_tokens_per_rank = TensorView(counts.data(), DType::i32, {4});
        out.num_tokens_per_node = TensorView(counts.as<int32_t>() + 4, DType::i32, {2});
        out.num_tokens_per_expert = TensorView(counts.as<int32_t>() + 6, DType::i32, {16});
        out.is_token_in_rank = in_rank.view();
        for (auto [field, broken] : {std::pair{0, TensorView(counts.data(), DType::i32, {3})},
                                     {1, TensorView(counts.data(), DType::i64, {2})},
                                     {2, TensorView()},
                                     {3, TensorView(in_rank.data(), DType::boolean, {num_tokens + 1, 4})}}) {
          DispatchLayoutOutputs wrong = out;
          TensorView* parts[] = {&wrong.num_tokens_per_rank, &wrong.num_tokens_per_node,
                                 &wrong.num_tokens_per_expert, &wrong.is_token_in_rank};
          *parts[field] = broken;
          refusals[rank].push_back(testing::invalid_argument_message(
              [&] { buffer.get_dispatch_layout(data[rank].topk_idx, c.shape.num_experts, wrong); }));
        }
        untouched[rank] = counts.as<uint32_t>()[0] == 0xA5A5A5A5u;
        runs[rank].layout = buffer.get_dispatch_layout(data[rank].topk_idx, c.shape.num_experts, out);
        EXPECT_EQ(runs[rank].layout.num_tokens_per_rank.data(), counts.data());
        EXPECT_EQ(runs[rank].layout.is_token_in_rank.data(), in_rank.data());
      },
      &unsupported));
  std::vector<std::string> failures;
  const char* fields[] = {"out.num_tokens_per_rank", "out.num_tokens_per_node", "out.num_tokens_per_expert",
                          "out.is_token_in_rank"};
  for (int rank = 0; rank < 4; ++rank) {
    testing::check_layout(runs[rank], expected, rank, &failures);
    EXPECT_TRUE(untouched[rank]) << "a refused call wrote its outputs on rank " << rank;
    for (int i = 0; i < 4; ++i) {
      EXPECT_TRUE(testing::contains(refusals[rank][i], fields[i])) << refusals[rank][i];
    }
  }
  report(failures);
}

// Two buffers in a row on the same ranks do not disturb each other's results.
TEST(NormalEngine, BuffersCanBeRecreatedAndGiveTheSameResults) {
  EngineCase c{"r2_recreated", make_shape(single(2), {9}, 128, 3, 8, fp8)};
  for (int attempt = 0; attempt < 2; ++attempt) {
    SCOPED_TRACE("attempt " + std::to_string(attempt));
    RoundTripOptions options;
    check_round_trip_matches_reference(c, options);
  }
}

// ---- column-major fp8 scales (DispatchArgs::x_scales_column_major) -------------------------------------
// DeepEP's users pass fp8 scales column-major; the dispatch reads them in place, given as their transpose.
// The same dispatch given the row-major scales is the oracle: every output equal bit for bit, and both the
// reference's. Scales read as row-major ones (the flag ignored) come out transposed, or are refused.
class NormalEngineColumnMajorScalesTest : public ::testing::TestWithParam<EngineCase> {};

// `cached`: the dispatch whose scales are compared is a cached one, replaying a column-major dispatch.
void check_column_major_scales(const EngineCase& c, bool cached) {
  const uint64_t seed = testing::seed_for(c.name + "/column_major_scales");
  SCOPED_TRACE(describe(c, seed) + (cached ? " cached dispatch" : " dispatch"));
  const std::vector<workload::RankData> data = workload::generate(c.shape, seed);
  const Expected expected = testing::compute_expected(c.shape, data, c.expert_alignment);
  RoundTripOptions row_major;
  row_major.expert_alignment = c.expert_alignment;
  RoundTripOptions column_major = row_major;
  column_major.scales_column_major = true;
  const int num_ranks = c.shape.topology.num_ranks;
  std::vector<RankRun> by_rows(num_ranks), by_columns(num_ranks);
  std::string unsupported;
  ASSERT_TRUE(run_on_ranks(
      c,
      [&](Buffer& buffer, int rank) {
        if (!cached) {
          by_rows[rank] = testing::run_round_trip(buffer, c.shape, data[rank], expected, row_major);
          by_columns[rank] = testing::run_round_trip(buffer, c.shape, data[rank], expected, column_major);
          return;
        }
        const RankRun first = testing::run_round_trip(buffer, c.shape, data[rank], expected, column_major);
        by_rows[rank] =
            testing::run_cached_round_trip(buffer, c.shape, data[rank], expected, row_major, first, true);
        by_columns[rank] =
            testing::run_cached_round_trip(buffer, c.shape, data[rank], expected, column_major, first, true);
      },
      &unsupported))
      << unsupported;
  std::vector<std::string> failures;
  for (int rank = 0; rank < num_ranks; ++rank) {
    const int64_t rows = static_cast<int64_t>(expected.dispatched[rank].recv_src_rank.size());
    testing::check_identical(by_columns[rank], by_rows[rank], rows, &failures);
    testing::check_dispatch(by_columns[rank], c.shape, expected, rank, column_major, true, &failures);
    testing::check_combine(by_columns[rank], c.shape, expected, rank, c.shape.with_weights, &failures);
  }
  report(failures);
}

TEST_P(NormalEngineColumnMajorScalesTest, DispatchGivesTheBitsOfRowMajorScales) {
  check_column_major_scales(GetParam(), false);
}

TEST_P(NormalEngineColumnMajorScalesTest, CachedDispatchGivesTheBitsOfRowMajorScales) {
  check_column_major_scales(GetParam(), true);
}

// fp8 only; H / 128 scale blocks (B) below, equal to and above the tokens per rank (N).
std::vector<EngineCase> column_major_scales_cases() {
  return {
      {"r1_h256", make_shape(single(1), {9}, 256, 4, 8, fp8)},
      // One token: both layouts are the same memory.
      {"r1_one_token", make_shape(single(1), {1}, 512, 2, 4, fp8)},
      {"r2_zero_tokens", make_shape(single(2), {0}, 384, 4, 8, fp8)},
      // B = N: a transposed read has the right shape and the wrong scales.
      {"r2_blocks_equal_tokens", make_shape(single(2), {4}, 512, 3, 8, fp8)},
      {"r2_h7168", make_shape(single(2), {6}, 7168, 8, 16, fp8)},
      {"r3_one_rank_without_tokens", make_shape(single(3), {5, 0, 7}, 256, 4, 12, fp8)},
      {"r4_wrap", make_shape(single(4), {16}, 384, 4, 16, fp8), ring_config(1, 3, 2)},
      {"r4_no_weights_alignment_4", make_shape(single(4), {8}, 1024, 6, 16, fp8, false), default_config(), 4},
      {"r8_h2048", make_shape(single(8), {12}, 2048, 8, 64, fp8)},
      {"r8_many_tokens_skewed", make_shape(single(8), {40}, 256, 8, 32, fp8, true, Routing::skewed)},
      {"r4_two_nodes", make_shape(Topology{4, 2}, {12}, 512, 4, 16, fp8)},
      {"r8_four_nodes_wrap", make_shape(Topology{8, 2}, {5}, 384, 4, 16, fp8), ring_config(2, 2, 1)},
  };
}

INSTANTIATE_TEST_SUITE_P(Fp8, NormalEngineColumnMajorScalesTest,
                         ::testing::ValuesIn(column_major_scales_cases()), case_name);

}  // namespace
}  // namespace switchyard
