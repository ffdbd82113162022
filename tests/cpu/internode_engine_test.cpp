// The CPU `normal` engine across nodes (ranks_per_node < num_ranks): the three-stage hierarchy over
// the loopback transport, with its delays and reordering on, through the public Buffer API, against
// the reference for the same topology, bit for bit (DESIGN.md, Nodes and Combine).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <functional>
#include <future>
#include <ostream>
#include <sstream>

#include "support/normal_round_trip.hpp"
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

// NOTES: far above what any case needs, yet a hang fails well before ctest's TIMEOUT.
constexpr double kTestTimeoutSeconds = 20.0;
// NOTES: a few microseconds already reorders most puts (the engine issues them much faster); more
// only slows the suite under the sanitizers.
constexpr const char* kLoopbackDelayMicroseconds = "20";

// Turns the loopback delays and reordering on for the transports made while it lives.
class LoopbackDelays {
 public:
  explicit LoopbackDelays(uint64_t seed) {
    setenv("SWITCHYARD_LOOPBACK_DELAY_US", kLoopbackDelayMicroseconds, 1);
    setenv("SWITCHYARD_LOOPBACK_SEED", std::to_string(seed).c_str(), 1);
  }
  ~LoopbackDelays() {
    unsetenv("SWITCHYARD_LOOPBACK_DELAY_US");
    unsetenv("SWITCHYARD_LOOPBACK_SEED");
  }
};

Config ring_config(int num_channels, int ring_slots, int chunk_tokens) {
  Config config;
  config.num_channels = num_channels;
  config.ring_slots = ring_slots;
  config.chunk_tokens = chunk_tokens;
  config.timeout_seconds = kTestTimeoutSeconds;
  return config;
}

struct InternodeCase {
  std::string name;
  Shape shape;
  Config config;
  int expert_alignment = 1;
};

void PrintTo(const InternodeCase& c, std::ostream* out) {
  *out << c.name << " (" << c.shape.describe() << ")";
}

Shape make_shape(int nodes, int ranks_per_node, int64_t tokens, int hidden, int topk, int experts_per_rank,
                 DType dtype, bool with_weights = true, Routing routing = Routing::random) {
  Shape shape;
  shape.topology = Topology{nodes * ranks_per_node, ranks_per_node};
  shape.tokens_per_rank = tokens;
  shape.hidden = hidden;
  shape.topk = topk;
  shape.num_experts = experts_per_rank * nodes * ranks_per_node;
  shape.dtype = dtype;
  shape.with_weights = with_weights;
  shape.routing = routing;
  return shape;
}

constexpr DType bf16 = DType::bf16;
constexpr DType fp8 = DType::fp8_e4m3;

std::string describe(const InternodeCase& c, uint64_t seed) {
  std::ostringstream out;
  out << "case " << c.name << ": seed=0x" << std::hex << seed << std::dec << " (SWITCHYARD_TEST_SEED=0x"
      << std::hex << testing::base_seed() << std::dec << ") " << c.shape.describe() << " config={"
      << c.config.to_string() << "} expert_alignment=" << c.expert_alignment << " loopback delay "
      << kLoopbackDelayMicroseconds << " us";
  return out.str();
}

void run_on_ranks(const InternodeCase& c, uint64_t seed, const std::function<void(Buffer&, int)>& body) {
  LoopbackDelays delays(seed);
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
}

void report(const std::vector<std::string>& failures) {
  for (const std::string& failure : failures) ADD_FAILURE() << failure;
}

std::string case_name(const ::testing::TestParamInfo<InternodeCase>& info) {
  return info.param.name;
}

// Nodes x ranks of 2x1, 2x2, 2x4, 3x2 and 4x2; every ring (intranode and RDMA) smaller than the
// traffic through it, so every stage wraps under flow control.
std::vector<InternodeCase> topology_cases() {
  return {
      {"n2x1_bf16_wrap", make_shape(2, 1, 24, 256, 2, 2, bf16), ring_config(2, 3, 2)},
      {"n2x2_fp8_wrap", make_shape(2, 2, 20, 256, 4, 4, fp8), ring_config(2, 4, 2)},
      {"n2x4_bf16_ring1", make_shape(2, 4, 12, 128, 8, 4, bf16), ring_config(2, 1, 1)},
      {"n2x4_fp8_alignment_4", make_shape(2, 4, 16, 256, 6, 2, fp8), ring_config(3, 5, 3), 4},
      {"n3x2_bf16_skewed", make_shape(3, 2, 18, 128, 4, 2, bf16, true, Routing::skewed),
       ring_config(2, 3, 2)},
      {"n3x2_fp8_k9_no_weights", make_shape(3, 2, 10, 128, 9, 3, fp8, false), ring_config(1, 2, 1)},
      {"n4x2_bf16_wrap", make_shape(4, 2, 12, 256, 8, 2, bf16), ring_config(2, 4, 3)},
      {"n4x2_one_expert", make_shape(4, 2, 10, 128, 3, 2, bf16, true, Routing::one_expert),
       ring_config(2, 2, 1)},
      {"n2x2_all_invalid", make_shape(2, 2, 8, 128, 4, 2, bf16, true, Routing::all_invalid),
       ring_config(2, 2, 1)},
      {"n2x2_zero_tokens", make_shape(2, 2, 0, 128, 4, 2, fp8), ring_config(2, 2, 1)},
      {"n2x2_more_channels_than_tokens", make_shape(2, 2, 3, 128, 2, 2, bf16), ring_config(6, 2, 1)},
      {"n2x2_library_defaults", make_shape(2, 2, 64, 512, 8, 4, bf16),
       ring_config(Config::kAutoChannels, Config::kDefaultRingSlots, Config::kDefaultChunkTokens)},
  };
}

void check_matches_reference(const InternodeCase& c, const RoundTripOptions& options,
                             testing::Biases biases = testing::Biases::none) {
  const uint64_t seed = testing::seed_for("internode/" + c.name);
  SCOPED_TRACE(describe(c, seed) + " biases=" + std::to_string(static_cast<int>(biases)));
  const std::vector<workload::RankData> data = workload::generate(c.shape, seed);
  const Expected expected = testing::compute_expected(c.shape, data, c.expert_alignment,
                                                      testing::make_biases(c.shape, seed, biases));
  const int num_ranks = c.shape.topology.num_ranks;
  std::vector<RankRun> runs(num_ranks);
  run_on_ranks(c, seed, [&](Buffer& buffer, int rank) {
    runs[rank] = testing::run_round_trip(buffer, c.shape, data[rank], expected, options);
  });
  std::vector<std::string> failures;
  for (int rank = 0; rank < num_ranks; ++rank) {
    testing::check_layout(runs[rank], expected, rank, &failures);
    testing::check_dispatch(runs[rank], c.shape, expected, rank, options, true, &failures);
    testing::check_combine(runs[rank], c.shape, expected, rank, c.shape.with_weights, &failures);
  }
  report(failures);
}

class InternodeEngineTest : public ::testing::TestWithParam<InternodeCase> {};

TEST_P(InternodeEngineTest, DispatchAndNodeGroupedCombineMatchReferenceBitwise) {
  RoundTripOptions options;
  options.expert_alignment = GetParam().expert_alignment;
  check_matches_reference(GetParam(), options);
}

TEST_P(InternodeEngineTest, LibraryAllocatedOutputsWithoutLayoutMatchReferenceBitwise) {
  RoundTripOptions options;
  options.expert_alignment = GetParam().expert_alignment;
  options.preallocate_outputs = false;
  options.pass_layout = false;
  check_matches_reference(GetParam(), options);
}

// Combine biases: the home's sum over node partials starts at bias0 + bias1, then rounds once.
TEST_P(InternodeEngineTest, CombineWithBiasesMatchesReferenceBitwise) {
  RoundTripOptions options;
  options.expert_alignment = GetParam().expert_alignment;
  for (testing::Biases biases : {testing::Biases::first, testing::Biases::second, testing::Biases::both}) {
    check_matches_reference(GetParam(), options, biases);
  }
}

INSTANTIATE_TEST_SUITE_P(Topologies, InternodeEngineTest, ::testing::ValuesIn(topology_cases()), case_name);

// Smaller set for the properties that run the engine twice.
std::vector<InternodeCase> replay_cases() {
  return {
      {"n2x2_bf16", make_shape(2, 2, 12, 256, 4, 4, bf16), ring_config(2, 3, 2)},
      {"n3x2_fp8_no_weights", make_shape(3, 2, 8, 128, 4, 2, fp8, false), ring_config(2, 2, 1)},
      {"n4x2_bf16_alignment_4", make_shape(4, 2, 6, 128, 6, 2, bf16), ring_config(2, 2, 1), 4},
  };
}

int64_t worst_tokens(const Shape& shape) {
  return shape.topology.num_ranks * shape.tokens_per_rank;
}

class InternodeReplayTest : public ::testing::TestWithParam<InternodeCase> {};

TEST_P(InternodeReplayTest, RepeatedCallsAreBitwiseDeterministic) {
  const InternodeCase& c = GetParam();
  const uint64_t seed = testing::seed_for("internode/replay/" + c.name);
  SCOPED_TRACE(describe(c, seed));
  const std::vector<workload::RankData> data = workload::generate(c.shape, seed);
  const Expected expected = testing::compute_expected(c.shape, data, c.expert_alignment);
  RoundTripOptions options;
  options.expert_alignment = c.expert_alignment;
  const int num_ranks = c.shape.topology.num_ranks;
  std::vector<RankRun> first(num_ranks), second(num_ranks);
  run_on_ranks(c, seed, [&](Buffer& buffer, int rank) {
    // The second call on the same buffers also proves the rings and RDMA counters were left ready.
    first[rank] = testing::run_round_trip(buffer, c.shape, data[rank], expected, options);
    second[rank] = testing::run_round_trip(buffer, c.shape, data[rank], expected, options);
  });
  std::vector<std::string> failures;
  for (int rank = 0; rank < num_ranks; ++rank) {
    const int64_t rows = static_cast<int64_t>(expected.dispatched[rank].recv_src_rank.size());
    testing::check_identical(second[rank], first[rank], rows, &failures);
    testing::check_dispatch(second[rank], c.shape, expected, rank, options, true, &failures);
    testing::check_combine(second[rank], c.shape, expected, rank, c.shape.with_weights, &failures);
  }
  report(failures);
}

void check_cached_dispatch(const InternodeCase& c, bool with_topk, int64_t num_worst_tokens) {
  const uint64_t seed = testing::seed_for("internode/cached/" + c.name);
  SCOPED_TRACE(describe(c, seed) + (with_topk ? " cached with topk_idx" : " cached without topk_idx") +
               " num_worst_tokens=" + std::to_string(num_worst_tokens));
  const std::vector<workload::RankData> data = workload::generate(c.shape, seed);
  const Expected expected = testing::compute_expected(c.shape, data, c.expert_alignment);
  RoundTripOptions options;
  options.expert_alignment = c.expert_alignment;
  options.num_worst_tokens = num_worst_tokens;
  const int num_ranks = c.shape.topology.num_ranks;
  std::vector<RankRun> first(num_ranks), cached(num_ranks);
  run_on_ranks(c, seed, [&](Buffer& buffer, int rank) {
    first[rank] = testing::run_round_trip(buffer, c.shape, data[rank], expected, options);
    cached[rank] = testing::run_cached_round_trip(buffer, c.shape, data[rank], expected, options, first[rank],
                                                  with_topk);
  });
  std::vector<std::string> failures;
  for (int rank = 0; rank < num_ranks; ++rank) {
    testing::check_dispatch(first[rank], c.shape, expected, rank, options, true, &failures);
    testing::check_combine(first[rank], c.shape, expected, rank, c.shape.with_weights, &failures);
    testing::check_dispatch(cached[rank], c.shape, expected, rank, options, with_topk, &failures);
    testing::check_combine(cached[rank], c.shape, expected, rank, with_topk && c.shape.with_weights,
                           &failures);
  }
  report(failures);
}

TEST_P(InternodeReplayTest, CachedDispatchGivesTheSameOutputs) {
  check_cached_dispatch(GetParam(), true, 0);
}

TEST_P(InternodeReplayTest, CachedDispatchWithoutTopkGivesTheSameRowsAndCombine) {
  check_cached_dispatch(GetParam(), false, 0);
}

TEST_P(InternodeReplayTest, WorstCaseDispatchPadsRowsAndCombineMatchesReference) {
  RoundTripOptions options;
  options.expert_alignment = GetParam().expert_alignment;
  options.num_worst_tokens = worst_tokens(GetParam().shape);
  check_matches_reference(GetParam(), options);
}

TEST_P(InternodeReplayTest, WorstCaseCachedDispatchGivesTheSameOutputs) {
  check_cached_dispatch(GetParam(), true, worst_tokens(GetParam().shape));
}

// DispatchArgs::layout is borrowed for the dispatch only: after the caller overwrote and freed it, the
// node-grouped combine and a cached dispatch with the handle still route as the dispatch did.
void check_released_layout(const InternodeCase& c, bool with_topk, int64_t num_worst_tokens) {
  const uint64_t seed = testing::seed_for("internode/released_layout/" + c.name);
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
  run_on_ranks(c, seed, [&](Buffer& buffer, int rank) {
    runs[rank] =
        testing::run_round_trip_releasing_layout(buffer, c.shape, data[rank], expected, options, with_topk);
  });
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

TEST_P(InternodeReplayTest, CombineAndCachedDispatchAfterTheLayoutWasFreedMatchReferenceBitwise) {
  check_released_layout(GetParam(), true, 0);
}

TEST_P(InternodeReplayTest, WorstCaseCombineAndCachedDispatchAfterTheLayoutWasFreedMatchReference) {
  check_released_layout(GetParam(), true, worst_tokens(GetParam().shape));
}

TEST_P(InternodeReplayTest, WithoutTopkCombineAndCachedDispatchAfterTheLayoutWasFreedMatchReference) {
  check_released_layout(GetParam(), false, 0);
}

INSTANTIATE_TEST_SUITE_P(Shapes, InternodeReplayTest, ::testing::ValuesIn(replay_cases()), case_name);

// ---- a rank that never arrives -----------------------------------------------------------------------

TEST(InternodeTimeouts, ARankThatNeverArrivesEndsInTimeoutErrorOnTheOthers) {
  constexpr double kShortTimeoutSeconds = 1.0;
  constexpr double kDeadlineSeconds = 15.0;
  InternodeCase c{"n2x2_missing_rank", make_shape(2, 2, 6, 128, 2, 2, bf16), ring_config(2, 4, 2)};
  c.config.timeout_seconds = kShortTimeoutSeconds;
  const uint64_t seed = testing::seed_for("internode/" + c.name);
  SCOPED_TRACE(describe(c, seed));
  const std::vector<workload::RankData> data = workload::generate(c.shape, seed);
  const Expected expected = testing::compute_expected(c.shape, data, c.expert_alignment);
  constexpr int kMissing = 3;  // on the other node than rank 0
  const int num_ranks = c.shape.topology.num_ranks;
  std::vector<std::string> messages(num_ranks);
  std::vector<int> timed_out(num_ranks, 0);
  std::vector<double> seconds(num_ranks, 0.0);
  std::promise<void> others_done;
  std::shared_future<void> release = others_done.get_future().share();
  std::atomic<int> remaining{num_ranks - 1};
  run_on_ranks(c, seed, [&](Buffer& buffer, int rank) {
    if (rank == kMissing) {
      release.wait_for(std::chrono::seconds(60));
      return;
    }
    const auto start = std::chrono::steady_clock::now();
    try {
      testing::run_round_trip(buffer, c.shape, data[rank], expected, RoundTripOptions{});
    } catch (const TimeoutError& error) {
      timed_out[rank] = 1;
      messages[rank] = error.what();
    } catch (const std::exception& error) {
      messages[rank] = std::string("not a TimeoutError: ") + error.what();
    }
    seconds[rank] = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (--remaining == 0) others_done.set_value();
  });
  for (int rank = 0; rank < num_ranks; ++rank) {
    if (rank == kMissing) continue;
    SCOPED_TRACE("rank " + std::to_string(rank) + ": " + messages[rank]);
    EXPECT_TRUE(timed_out[rank]);
    EXPECT_LT(seconds[rank], kDeadlineSeconds);
    EXPECT_NE(messages[rank].find("rank " + std::to_string(rank)), std::string::npos)
        << "does not name the rank";
    EXPECT_NE(messages[rank].find(std::to_string(kMissing)), std::string::npos)
        << "does not name the missing rank";
  }
}

}  // namespace
}  // namespace switchyard
