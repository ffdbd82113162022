// The CPU `symmetric` engine against the reference and against the `low_latency` engine, bit for
// bit, with ranks as threads: one-stage pull dispatch (bf16 and fp8; published rows, or zero-copy
// from the callers' x: Config::symmetric_dispatch), both combine paths (push, and
// pull where every home reads the experts' y; Config::symmetric_combine), the barrier's reuse across
// back-to-back calls, sharing a Buffer with the other engines, timeouts and bad input (DESIGN.md,
// "Symmetric engine" and "low_latency and symmetric interface: expert-major").
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <mutex>
#include <ostream>
#include <string>
#include <vector>

#include "support/expert_major_gtest.hpp"
#include "support/normal_round_trip.hpp"
#include "support/test_seed.hpp"
#include "switchyard/buffer.hpp"
#include "switchyard/errors.hpp"
#include "switchyard/group.hpp"
#include "switchyard/reference.hpp"
#include "workload/workload.hpp"

namespace switchyard {
// GoogleTest names a path parameter by its knob value.
inline void PrintTo(SymmetricCombine path, std::ostream* out) {
  *out << symmetric_combine_name(path);
}
inline void PrintTo(SymmetricDispatch path, std::ostream* out) {
  *out << symmetric_dispatch_name(path);
}
}  // namespace switchyard

namespace switchyard::testing::expert_major {
namespace {

// Both expert-major regions, so that every test can also run the low_latency engine.
constexpr Regions kRegions = Regions::both;

// ---- bitwise round trips ------------------------------------------------------------------------

class SymmetricRoundTrip : public ::testing::TestWithParam<Case> {};

TEST_P(SymmetricRoundTrip, MatchesTheReferenceAndTheLowLatencyEngineBitwise) {
  const Case& c = GetParam();
  const uint64_t seed = testing::seed_for("symmetric/" + c.name);
  const Expected expected = expected_for(c, seed);
  Failures failures;
  with_buffers(c, kRegions, [&](Group& group, Buffer& buffer) {
    const int rank = group.rank();
    const workload::RankData& data = expected.data[rank];
    if (buffer.symmetric_combine_path() != c.symmetric_combine) {
      failures.add(rank, std::string("symmetric_combine_path: expected ") +
                             symmetric_combine_name(c.symmetric_combine) + ", got " +
                             symmetric_combine_name(buffer.symmetric_combine_path()));
    }
    if (buffer.symmetric_dispatch_path() != c.symmetric_dispatch) {
      failures.add(rank, std::string("symmetric_dispatch_path: expected ") +
                             symmetric_dispatch_name(c.symmetric_dispatch) + ", got " +
                             symmetric_dispatch_name(buffer.symmetric_dispatch_path()));
    }
    // Preallocated, poisoned outputs on even ranks; the library allocates on odd ones.
    const PoisonedOutputs out = rank % 2 == 0 ? poisoned_outputs(c, data.x.size(0)) : PoisonedOutputs();
    LowLatencyDispatchArgs args = dispatch_args(c, data);
    out.attach(args);
    LowLatencyDispatchResult dispatched = buffer.symmetric_dispatch(args);
    check_dispatch(dispatched, expected.dispatched[rank], "reference", rank, failures);
    if (rank % 2 == 0 && dispatched.recv_x.data() != out.recv_x.data())
      failures.add(rank, "out_recv_x was not used");
    LowLatencyDispatchResult low_latency = buffer.low_latency_dispatch(dispatch_args(c, data));
    check_dispatch(dispatched, low_latency, "low_latency", rank, failures);
    if (c.fp8.use_ue8m0) return;

    Tensor y = expert_outputs(dispatched.recv_x, dispatched.recv_x_scales, rank);
    LowLatencyCombineArgs cargs = combine_args(data, dispatched.handle, y);
    out.attach(cargs);
    LowLatencyCombineResult combined = buffer.symmetric_combine(cargs);
    compare(combined.combined_x, expected.combined[rank], "combined_x vs reference", rank, failures);
    if (rank % 2 == 0 && combined.combined_x.data() != out.combined_x.data())
      failures.add(rank, "out_combined_x unused");
    LowLatencyCombineResult combined_low_latency =
        buffer.low_latency_combine(combine_args(data, low_latency.handle, y));
    compare(combined.combined_x, combined_low_latency.combined_x, "combined_x vs low_latency", rank,
            failures);
  });
  expect_none(failures, seed);
}

std::vector<Case> cases() {
  using workload::Routing;
  return {
      // R = 1, 2, 3, 4 and 8; k from 1 to 9.
      make("r1_k1", 1, {5}, 8, 1, 4), make("r1_one_expert", 1, {6}, 6, 1, 1),  // one expert in all
      make("r2_k2", 2, {7, 3}, 8, 2, 8), make("r2_k5", 2, {6, 6}, 6, 5, 6),
      make("r3_k9", 3, {6, 0, 4}, 6, 9, 18, 128),
      make("r3_k3_hidden_not_a_multiple_of_128", 3, {5, 4, 2}, 5, 3, 6, 72),
      make("r4_k4", 4, {8, 5, 8, 1}, 8, 4, 16), make("r4_k6", 4, {3, 7, 7, 2}, 7, 6, 8),
      make("r8_k8", 8, {4, 3, 0, 4, 2, 4, 1, 4}, 4, 8, 16, 128),
      make("r8_k7", 8, {3, 3, 3, 3, 3, 3, 3, 3}, 3, 7, 8, 128),
      make("r4_zero_tokens", 4, {0, 0, 0, 0}, 4, 2, 8),
      with_routing(make("r2_all_invalid", 2, {4, 4}, 4, 3, 4), Routing::all_invalid),
      // Every token of every rank on one expert: its rows fill R * max exactly.
      with_routing(make("r4_one_expert_full", 4, {6, 6, 6, 6}, 6, 2, 8), Routing::one_expert),
      with_routing(make("r4_skewed", 4, {6, 6, 6, 6}, 6, 3, 8), Routing::skewed),
      with_fp8(make("r2_fp8", 2, {6, 5}, 6, 4, 8, 384), false, false),
      with_fp8(make("r8_fp8_k9", 8, {2, 3, 2, 0, 3, 1, 3, 2}, 3, 9, 16, 128), false, false),
      with_fp8(make("r3_fp8_round_scale", 3, {5, 6, 2}, 6, 3, 6, 256), true, false),
      with_fp8(make("r2_fp8_ue8m0_padded", 2, {6, 4}, 6, 2, 4, 640), false, true),  // 5 scales: 2 words
  };
}

INSTANTIATE_TEST_SUITE_P(Shapes, SymmetricRoundTrip, ::testing::ValuesIn(on_both_combine_paths(cases())),
                         [](const auto& info) { return info.param.name; });

// Combine biases on both combine paths: the accumulator starts at bias0 + bias1.
class SymmetricBiasedCombine : public ::testing::TestWithParam<Case> {};

TEST_P(SymmetricBiasedCombine, CombineWithBiasesMatchesTheReferenceBitwise) {
  expect_biased_combines_match(Engine::symmetric, GetParam(), "symmetric/bias/" + GetParam().name);
}

INSTANTIATE_TEST_SUITE_P(Shapes, SymmetricBiasedCombine,
                         ::testing::ValuesIn(on_both_combine_paths(
                             {make("r1_k1", 1, {5}, 8, 1, 4), make("r3_k9", 3, {6, 0, 4}, 6, 9, 18, 128),
                              make("r3_k3_hidden_not_a_multiple_of_128", 3, {5, 4, 2}, 5, 3, 6, 72),
                              with_routing(make("r2_all_invalid", 2, {4, 4}, 4, 3, 4),
                                           workload::Routing::all_invalid),
                              with_fp8(make("r2_fp8", 2, {6, 5}, 6, 4, 8, 384), false, false)})),
                         [](const auto& info) { return info.param.name; });

// Both combine paths, named after the path: "<name>_push", "<name>_pull".
constexpr SymmetricCombine kPaths[] = {SymmetricCombine::push, SymmetricCombine::pull};

class SymmetricCombinePaths : public ::testing::TestWithParam<SymmetricCombine> {};

INSTANTIATE_TEST_SUITE_P(Paths, SymmetricCombinePaths, ::testing::ValuesIn(kPaths),
                         [](const auto& info) { return std::string(symmetric_combine_name(info.param)); });

TEST_P(SymmetricCombinePaths, CombineLeavesOutSlotsSetToMinusOne) {
  Case c = with_symmetric_combine(make("left_out", 3, {6, 5, 6}, 6, 4, 6), GetParam());
  const uint64_t seed = testing::seed_for("symmetric/left_out");
  const Expected expected = expected_for(c, seed);
  Failures failures;
  with_buffers(c, kRegions, [&](Group& group, Buffer& buffer) {
    const int rank = group.rank();
    const workload::RankData& data = expected.data[rank];
    auto dispatched = buffer.symmetric_dispatch(dispatch_args(c, data));
    auto low_latency = buffer.low_latency_dispatch(dispatch_args(c, data));
    Tensor y = expert_outputs(dispatched.recv_x, {}, rank);
    Tensor dropped = Tensor::empty(DType::i64, {data.topk_idx.size(0), c.topk});
    std::memcpy(dropped.data(), data.topk_idx.data(), dropped.nbytes());
    for (int64_t i = 0; i < dropped.numel(); i += 3) dropped.as<int64_t>()[i] = -1;
    LowLatencyCombineArgs args = combine_args(data, dispatched.handle, y);
    args.topk_idx = dropped;
    auto combined = buffer.symmetric_combine(args);
    LowLatencyCombineArgs ll_args = combine_args(data, low_latency.handle, y);
    ll_args.topk_idx = dropped;
    auto combined_low_latency = buffer.low_latency_combine(ll_args);
    compare(combined.combined_x, combined_low_latency.combined_x, "combined_x vs low_latency", rank,
            failures);
  });
  expect_none(failures, seed);
}

// ---- back to back, determinism, sharing a buffer --------------------------------------------------

TEST_P(SymmetricCombinePaths, BackToBackCallsReuseTheBarrierAndHalvesWithoutRacing) {
  expect_back_to_back_calls_match(Engine::symmetric, kRegions, "symmetric/back_to_back", 6, GetParam());
}

TEST_P(SymmetricCombinePaths, CombineRoutesAsDispatchedAfterTheCallersOutputsWereFreed) {
  expect_combine_routes_as_dispatched_after_the_callers_outputs_were_freed(
      Engine::symmetric, kRegions, "symmetric/freed_outputs", GetParam());
}

// The pull combine returns only when no peer reads this rank's y any more: each rank poisons its y
// as soon as its combine returns, and every rank's output is still the reference's.
TEST_P(SymmetricCombinePaths, ExpertOutputsMayBeOverwrittenAsSoonAsCombineReturns) {
  Case c = with_symmetric_combine(make("overwrite_y", 4, {8, 8, 8, 8}, 8, 4, 8, 512), GetParam());
  const uint64_t seed = testing::seed_for("symmetric/overwrite_y");
  const Expected expected = expected_for(c, seed);
  Failures failures;
  with_buffers(c, kRegions, [&](Group& group, Buffer& buffer) {
    const int rank = group.rank();
    for (int round = 0; round < 3; ++round) {
      auto dispatched = buffer.symmetric_dispatch(dispatch_args(c, expected.data[rank]));
      Tensor y = expert_outputs(dispatched.recv_x, {}, rank);
      auto combined = buffer.symmetric_combine(combine_args(expected.data[rank], dispatched.handle, y));
      workload::poison(y);
      compare(combined.combined_x, expected.combined[rank], "combined_x", rank, failures);
    }
  });
  expect_none(failures, seed);
}

// Both dispatch sources, named after the knob: "publish", "zero_copy".
constexpr SymmetricDispatch kSources[] = {SymmetricDispatch::publish, SymmetricDispatch::zero_copy};

class SymmetricDispatchPaths : public ::testing::TestWithParam<SymmetricDispatch> {};

INSTANTIATE_TEST_SUITE_P(Sources, SymmetricDispatchPaths, ::testing::ValuesIn(kSources),
                         [](const auto& info) { return std::string(symmetric_dispatch_name(info.param)); });

// The zero-copy dispatch returns only when no peer reads this rank's x any more: each rank poisons
// its x as soon as its dispatch returns, and every rank's outputs are still the reference's (a peer
// still pulling would copy poison). Skewed routing: rank 0 receives most rows, so the others finish
// (and poison their x) while it still pulls.
TEST_P(SymmetricDispatchPaths, TokensMayBeOverwrittenAsSoonAsDispatchReturns) {
  Case c = with_routing(
      with_symmetric_dispatch(make("overwrite_x", 4, {32, 32, 32, 32}, 32, 4, 8, 512), GetParam()),
      workload::Routing::skewed);
  const uint64_t seed = testing::seed_for("symmetric/overwrite_x");
  const Expected expected = expected_for(c, seed);
  Failures failures;
  with_buffers(c, kRegions, [&](Group& group, Buffer& buffer) {
    const int rank = group.rank();
    if (buffer.symmetric_dispatch_path() != GetParam()) failures.add(rank, "symmetric_dispatch_path differs");
    const workload::RankData& data = expected.data[rank];
    for (int round = 0; round < 3; ++round) {
      Tensor x = Tensor::empty(DType::bf16, {data.x.size(0), data.x.size(1)});
      std::memcpy(x.data(), data.x.data(), x.nbytes());
      LowLatencyDispatchArgs args = dispatch_args(c, data);
      args.x = x;
      auto dispatched = buffer.symmetric_dispatch(args);
      workload::poison(x);
      check_dispatch(dispatched, expected.dispatched[rank], "reference", rank, failures);
    }
  });
  expect_none(failures, seed);
}

TEST_P(SymmetricCombinePaths, SameInputsGiveTheSameBitsEveryTime) {
  Case c = with_symmetric_combine(make("determinism", 3, {6, 6, 6}, 6, 4, 6, 256), GetParam());
  c.fp8.use_fp8 = true;
  const uint64_t seed = testing::seed_for("symmetric/determinism");
  const Expected expected = expected_for(c, seed);
  Failures failures;
  with_buffers(c, kRegions, [&](Group& group, Buffer& buffer) {
    const int rank = group.rank();
    auto first = buffer.symmetric_dispatch(dispatch_args(c, expected.data[rank]));
    Tensor y = expert_outputs(first.recv_x, first.recv_x_scales, rank);
    auto combined_first = buffer.symmetric_combine(combine_args(expected.data[rank], first.handle, y));
    auto second = buffer.symmetric_dispatch(dispatch_args(c, expected.data[rank]));
    auto combined_second = buffer.symmetric_combine(combine_args(expected.data[rank], second.handle, y));
    check_dispatch(first, expected.dispatched[rank], "reference", rank, failures);
    check_dispatch(second, expected.dispatched[rank], "reference", rank, failures);
    compare(combined_second.combined_x, combined_first.combined_x, "combined_x (second run)", rank, failures);
    compare(combined_first.combined_x, expected.combined[rank], "combined_x", rank, failures);
  });
  expect_none(failures, seed);
}

TEST_P(SymmetricCombinePaths, InterleavesWithTheLowLatencyAndNormalEnginesOnOneBuffer) {
  Case c = with_symmetric_combine(make("interleaved", 3, {6, 6, 6}, 6, 2, 6), GetParam());
  const workload::Shape shape = shape_of(c);
  const uint64_t seed = testing::seed_for("symmetric/interleaved");
  const std::vector<workload::RankData> data = workload::generate(shape, seed);
  const testing::Expected normal_expected = testing::compute_expected(shape, data, 1);
  const Expected expected = expected_for(c, seed);
  std::vector<std::string> normal_failures;
  std::mutex mutex;
  Failures failures;
  run_ranks(3, [&](Group& group) {
    const int rank = group.rank();
    BufferOptions options = buffer_options(c, rank, kRegions);
    options.sizing = testing::sizing_for(shape);
    options.sizing.low_latency_max_tokens_per_rank = c.max_tokens;
    options.sizing.symmetric_max_tokens_per_rank = c.max_tokens;
    Buffer buffer(options);
    buffer.connect(group.allgather(buffer.local_handle()));
    for (int round = 0; round < 2; ++round) {
      auto symmetric = buffer.symmetric_dispatch(dispatch_args(c, expected.data[rank]));
      auto low_latency = buffer.low_latency_dispatch(dispatch_args(c, expected.data[rank]));
      // A whole normal round trip between the dispatches and their combines.
      testing::RankRun run = testing::run_round_trip(buffer, shape, data[rank], normal_expected, {});
      std::vector<std::string> mine;
      testing::check_combine(run, shape, normal_expected, rank, true, &mine);
      Tensor y = expert_outputs(symmetric.recv_x, {}, rank);
      auto combined_low_latency =
          buffer.low_latency_combine(combine_args(expected.data[rank], low_latency.handle, y));
      auto combined = buffer.symmetric_combine(combine_args(expected.data[rank], symmetric.handle, y));
      check_dispatch(symmetric, expected.dispatched[rank], "reference", rank, failures);
      check_dispatch(symmetric, low_latency, "low_latency", rank, failures);
      compare(combined.combined_x, expected.combined[rank], "combined_x", rank, failures);
      compare(combined_low_latency.combined_x, expected.combined[rank], "combined_x (low_latency)", rank,
              failures);
      std::lock_guard<std::mutex> lock(mutex);
      normal_failures.insert(normal_failures.end(), mine.begin(), mine.end());
    }
    group.barrier();
  });
  for (const auto& line : normal_failures) ADD_FAILURE() << "normal: " << line;
  expect_none(failures, seed);
}

// ---- timeouts -----------------------------------------------------------------------------------

// Rank 0 calls `call` while rank 1 makes only a dispatch (with `peer_dispatches`) or no call at
// all; returns what rank 0 caught.
std::string timeout_message(const std::function<void(Buffer&, const Case&, const Expected&)>& call,
                            bool* refused_after, bool peer_dispatches = false,
                            SymmetricCombine path = SymmetricCombine::automatic,
                            SymmetricDispatch source = SymmetricDispatch::automatic) {
  constexpr double kTimeout = 1.0;
  Case c = with_symmetric_dispatch(with_symmetric_combine(make("timeout", 2, {4, 4}, 4, 2, 4), path), source);
  const Expected expected = expected_for(c, 7);
  PeerGate gate;
  Caught caught;
  run_ranks(2, [&](Group& group) {
    Buffer buffer(buffer_options(c, group.rank(), kRegions, kTimeout));
    buffer.connect(group.allgather(buffer.local_handle()));
    if (group.rank() == 1) {
      if (peer_dispatches) buffer.symmetric_dispatch(dispatch_args(c, expected.data[1]));
      gate.wait();  // makes no (further) call
      return;
    }
    const auto opener = gate.open_on_exit();
    caught = catch_timeout([&] { call(buffer, c, expected); });
    *refused_after =
        refused_after_timeout([&] { buffer.symmetric_dispatch(dispatch_args(c, expected.data[0])); });
  });
  expect_timed_out(caught, kTimeout, 15.0);
  return caught.message;
}

TEST_P(SymmetricDispatchPaths, DispatchWithoutItsPeerTimesOutNamingRankRoleAndTheMissingRank) {
  bool refused_after = false;
  const std::string message = timeout_message(
      [](Buffer& buffer, const Case& c, const Expected& expected) {
        buffer.symmetric_dispatch(dispatch_args(c, expected.data[0]));
      },
      &refused_after, /*peer_dispatches=*/false, SymmetricCombine::automatic, GetParam());
  SCOPED_TRACE("message: " + message);
  EXPECT_NE(message.find("rank 0"), std::string::npos);
  EXPECT_NE(message.find("symmetric dispatch"), std::string::npos);
  EXPECT_NE(message.find("waiting for rank(s) 1 to arrive"), std::string::npos);
  EXPECT_NE(message.find("timed out"), std::string::npos);
  EXPECT_TRUE(refused_after);
}

TEST_P(SymmetricCombinePaths, CombineWithoutItsPeerTimesOutNamingRankRoleAndTheMissingRank) {
  // Both ranks dispatch; only rank 0 combines.
  bool refused_after = false;
  const std::string message = timeout_message(
      [](Buffer& buffer, const Case& c, const Expected& expected) {
        auto dispatched = buffer.symmetric_dispatch(dispatch_args(c, expected.data[0]));
        Tensor y = expert_outputs(dispatched.recv_x, {}, 0);
        buffer.symmetric_combine(combine_args(expected.data[0], dispatched.handle, y));
      },
      &refused_after, /*peer_dispatches=*/true, GetParam());
  SCOPED_TRACE("message: " + message);
  EXPECT_NE(message.find("rank 0"), std::string::npos);
  EXPECT_NE(message.find("symmetric combine"), std::string::npos);
  if (GetParam() == SymmetricCombine::pull) {
    // The pull combine has no barrier: rank 0 waits for rank 1's announcement of its y.
    EXPECT_NE(message.find("pull"), std::string::npos);
    EXPECT_NE(message.find("waiting for rank(s) 1 to announce their expert outputs"), std::string::npos);
  } else {
    EXPECT_NE(message.find("waiting for rank(s) 1 to arrive"), std::string::npos);
  }
  EXPECT_TRUE(refused_after);
}

// ---- bad input ----------------------------------------------------------------------------------

TEST(SymmetricErrors, DispatchRefusesBadInputNamingTheArgumentAndWritesNothing) {
  expect_interface_bad_input_refused(Engine::symmetric, kRegions);
}

TEST(SymmetricErrors, UnsupportedOptionsAreRefusedByName) {
  SingleRank single(kRegions);
  LowLatencyDispatchArgs args = single.args();
  args.return_recv_hook = true;
  std::string message = refused<Unsupported>([&] { single.buffer->symmetric_dispatch(args); });
  EXPECT_NE(message.find("return_recv_hook"), std::string::npos) << message;
  EXPECT_TRUE(single.untouched());

  auto dispatched = single.buffer->symmetric_dispatch(dispatch_args(single.c, single.data));
  Tensor y = expert_outputs(dispatched.recv_x, {}, 0);
  LowLatencyCombineArgs cargs = combine_args(single.data, dispatched.handle, y);
  cargs.return_recv_hook = true;
  message = refused<Unsupported>([&] { single.buffer->symmetric_combine(cargs); });
  EXPECT_NE(message.find("return_recv_hook"), std::string::npos) << message;
  cargs.return_recv_hook = false;
  cargs.zero_copy = true;
  message = refused<Unsupported>([&] { single.buffer->symmetric_combine(cargs); });
  EXPECT_NE(message.find("zero_copy"), std::string::npos) << message;
}

TEST(SymmetricErrors, HandlesAreNotInterchangeableBetweenEngines) {
  SingleRank single(kRegions);
  auto symmetric = single.buffer->symmetric_dispatch(dispatch_args(single.c, single.data));
  auto low_latency = single.buffer->low_latency_dispatch(dispatch_args(single.c, single.data));
  Tensor y = expert_outputs(symmetric.recv_x, {}, 0);
  std::string message = refused<InvalidArgument>(
      [&] { single.buffer->low_latency_combine(combine_args(single.data, symmetric.handle, y)); });
  EXPECT_EQ(message.rfind("handle:", 0), 0u) << message;
  message = refused<InvalidArgument>(
      [&] { single.buffer->symmetric_combine(combine_args(single.data, low_latency.handle, y)); });
  EXPECT_EQ(message.rfind("handle:", 0), 0u) << message;
  message = refused<InvalidArgument>([&] { single.buffer->low_latency_combine_buffer(symmetric.handle); });
  EXPECT_EQ(message.rfind("handle:", 0), 0u) << message;
}

TEST(SymmetricErrors, CombineRefusesShapesThatDoNotMatchTheHandle) {
  expect_interface_bad_combine_refused(Engine::symmetric, kRegions);
}

TEST(SymmetricErrors, BufferWithoutASymmetricRegionRefusesTheCalls) {
  Case c = make("no_region", 1, {4}, 4, 2, 4);
  BufferOptions options = buffer_options(c, 0, kRegions);
  options.sizing.symmetric_max_tokens_per_rank = 0;
  Buffer buffer(options);
  buffer.connect({buffer.local_handle()});
  const workload::RankData data = workload::generate(shape_of(c), 1)[0];
  const std::string message =
      refused<InvalidArgument>([&] { buffer.symmetric_dispatch(dispatch_args(c, data)); });
  EXPECT_NE(message.find("symmetric_max_tokens_per_rank"), std::string::npos) << message;
}

// The engine reaches peers by address: a topology of several nodes is refused before any work.
TEST(SymmetricErrors, TopologiesAcrossNodesAreRefused) {
  Case c = make("two_nodes", 2, {4, 4}, 4, 2, 4);
  std::vector<std::string> messages(2);
  run_ranks(2, [&](Group& group) {
    BufferOptions options = buffer_options(c, group.rank(), kRegions);
    options.topology = Topology{2, 1};
    Buffer buffer(options);
    buffer.connect(group.allgather(buffer.local_handle()));
    const workload::RankData data = workload::generate(shape_of(c), 1)[group.rank()];
    messages[group.rank()] = refused<Unsupported>([&] { buffer.symmetric_dispatch(dispatch_args(c, data)); });
  });
  for (const std::string& message : messages) {
    EXPECT_NE(message.find("one load/store domain"), std::string::npos) << message;
    EXPECT_NE(message.find("symmetric_dispatch"), std::string::npos) << message;
  }
}

// ---- expert_capacity ----------------------------------------------------------------------------

class SymmetricCapacity : public ::testing::TestWithParam<Case> {};

// Outputs [L, C, ...] equal the reference's with that capacity bit for bit (and the round trip's
// combine), with C exactly the largest expert's rows, larger, and 1.
TEST_P(SymmetricCapacity, ExactlyFullLargerAndOneRowMatchTheReferenceBitwise) {
  const uint64_t seed = testing::seed_for("symmetric/capacity/" + GetParam().name);
  for (const CapacityRun& run : capacity_runs(GetParam(), seed)) {
    const Case& c = run.c;
    SCOPED_TRACE(c.name + " capacity " + std::to_string(c.capacity));
    const Expected expected = expected_from(c, run.data);
    ASSERT_FALSE(expected.overflows);
    Failures failures;
    with_buffers(c, kRegions, [&](Group& group, Buffer& buffer) {
      const int rank = group.rank();
      const workload::RankData& data = expected.data[rank];
      // Preallocated, poisoned outputs with guard rows on even ranks; the library allocates on odd ones.
      const GuardedOutputs guarded = guarded_outputs(c, data.x.size(0));
      LowLatencyDispatchArgs args = dispatch_args(c, data);
      if (rank % 2 == 0) guarded.out.attach(args);
      LowLatencyDispatchResult dispatched = buffer.symmetric_dispatch(args);
      if (dispatched.recv_x.size(1) != rows_per_expert(c)) {
        failures.add(rank, "recv_x: expected " + std::to_string(rows_per_expert(c)) +
                               " rows per expert, got " + dispatched.recv_x.view().describe());
      }
      check_dispatch(dispatched, expected.dispatched[rank], "reference", rank, failures);
      for (const TensorView& guard : guarded.guards()) {
        if (!all_poison(guard)) failures.add(rank, "a guard row past the last expert's capacity was written");
      }
      if (c.fp8.use_ue8m0) return;
      Tensor y = expert_outputs(dispatched.recv_x, dispatched.recv_x_scales, rank);
      LowLatencyCombineResult combined = buffer.symmetric_combine(combine_args(data, dispatched.handle, y));
      compare(combined.combined_x, expected.combined[rank], "combined_x vs reference", rank, failures);
    });
    expect_none(failures, seed);
  }
}

std::vector<Case> capacity_cases() {
  using workload::Routing;
  return {
      make("r1_k2", 1, {6}, 8, 2, 4),
      make("r2_k3", 2, {7, 5}, 8, 3, 8),
      with_fp8(make("r3_fp8", 3, {6, 6, 2}, 6, 4, 6, 256), false, false),
      with_routing(make("r4_skewed", 4, {6, 6, 6, 6}, 6, 3, 8), Routing::skewed),
      with_routing(make("r4_one_expert", 4, {6, 5, 6, 6}, 6, 2, 8), Routing::one_expert),
      make("r8_k8", 8, {4, 3, 0, 4, 2, 4, 1, 4}, 4, 8, 16, 128),
  };
}

INSTANTIATE_TEST_SUITE_P(Shapes, SymmetricCapacity,
                         ::testing::ValuesIn(on_both_combine_paths(capacity_cases())),
                         [](const auto& info) { return info.param.name; });

// An expert past its capacity: every rank raises the same CapacityError naming the expert, its rank,
// the rows and the capacity; the rows that fit are the reference's, nothing is written past any
// expert's capacity, recv_count and layout_range hold the true counts, nothing hangs, and the buffer
// stays usable.
TEST_P(SymmetricCombinePaths, EveryRankRaisesCapacityErrorOnOverflowAndNothingIsWrittenPastTheCapacity) {
  for (const Case& unrouted :
       {with_routing(make("r3_skewed", 3, {6, 6, 6}, 6, 3, 6), workload::Routing::skewed),
        with_fp8(make("r2_fp8", 2, {6, 5}, 6, 4, 8, 256), false, false),
        make("r1_capacity_one", 1, {6}, 6, 2, 4)}) {
    const Case base = with_symmetric_combine(unrouted, GetParam());
    const uint64_t seed = testing::seed_for("symmetric/overflow/" + base.name);
    const std::vector<workload::RankData> data = workload::generate(shape_of(base), seed);
    const int64_t full = max_expert_rows(data, base.num_experts);
    ASSERT_GE(full, 2) << base.name;
    const Case c = with_capacity(base, base.ranks == 1 ? 1 : full - 1);
    SCOPED_TRACE(c.name + " capacity " + std::to_string(c.capacity));
    const Expected expected = expected_from(c, data);
    ASSERT_TRUE(expected.overflows);
    const Expected unlimited = expected_from(with_capacity(c, 0), data);
    std::vector<std::string> messages(c.ranks);
    Failures failures;
    with_buffers(c, kRegions, [&](Group& group, Buffer& buffer) {
      const int rank = group.rank();
      const GuardedOutputs guarded = guarded_outputs(c, data[rank].x.size(0));
      LowLatencyDispatchArgs args = dispatch_args(c, expected.data[rank]);
      guarded.out.attach(args);
      messages[rank] = refused<CapacityError>([&] { buffer.symmetric_dispatch(args); });
      check_dispatch(guarded.out, expected.dispatched[rank], "reference", rank, failures);
      for (const TensorView& guard : guarded.guards()) {
        if (!all_poison(guard)) failures.add(rank, "a guard row past the last expert's capacity was written");
      }
      // Still usable: the same inputs without a capacity match the reference, combine included.
      LowLatencyDispatchResult again =
          buffer.symmetric_dispatch(dispatch_args(with_capacity(c, 0), data[rank]));
      check_dispatch(again, unlimited.dispatched[rank], "reference (after the overflow)", rank, failures);
      if (!unlimited.ys.empty()) {
        LowLatencyCombineResult combined =
            buffer.symmetric_combine(combine_args(data[rank], again.handle, unlimited.ys[rank]));
        compare(combined.combined_x, unlimited.combined[rank], "combined_x (after the overflow)", rank,
                failures);
      }
    });
    expect_none(failures, seed);
    for (int rank = 0; rank < c.ranks; ++rank) {
      expect_capacity_error(messages[rank], c, data, rank);
      EXPECT_EQ(messages[rank], messages[0]) << "every rank raises the same error";
    }
  }
}

TEST(SymmetricCapacityErrors, OutOfRangeCapacitiesAndLowLatencyAreRefusedByName) {
  SingleRank single(kRegions);  // 1 rank, max 4: capacities 0..4
  for (int64_t capacity : {int64_t{-1}, int64_t{5}}) {
    LowLatencyDispatchArgs args = single.args();
    args.expert_capacity = capacity;
    const std::string message = refused<InvalidArgument>([&] { single.buffer->symmetric_dispatch(args); });
    EXPECT_EQ(message.rfind("expert_capacity:", 0), 0u) << message;
    EXPECT_NE(message.find("got " + std::to_string(capacity)), std::string::npos) << message;
    EXPECT_TRUE(single.untouched());
  }
  LowLatencyDispatchArgs args = single.args();
  args.expert_capacity = 2;
  const std::string message = refused<Unsupported>([&] { single.buffer->low_latency_dispatch(args); });
  EXPECT_NE(message.find("expert_capacity"), std::string::npos) << message;
  EXPECT_TRUE(single.untouched());
  // Outputs sized for the full rows do not fit a capacity of 3.
  args = single.args();
  args.expert_capacity = 3;
  EXPECT_EQ(
      refused<InvalidArgument>([&] { single.buffer->symmetric_dispatch(args); }).rfind("out_recv_x:", 0), 0u);
}

TEST(SymmetricCapacityErrors, CombineTakesExpertOutputsWithTheDispatchCapacity) {
  SingleRank single(kRegions);
  const int64_t full = max_expert_rows({single.data}, single.c.num_experts);
  LowLatencyDispatchArgs args = dispatch_args(with_capacity(single.c, full), single.data);
  auto dispatched = single.buffer->symmetric_dispatch(args);
  EXPECT_EQ(dispatched.recv_x.size(1), full);
  Tensor y = expert_outputs(dispatched.recv_x, {}, 0);
  EXPECT_NO_THROW(single.buffer->symmetric_combine(combine_args(single.data, dispatched.handle, y)));
  Tensor wide = Tensor::empty(DType::bf16, {single.c.num_experts, 4, 256});  // R * max rows, not C
  const std::string message = refused<InvalidArgument>(
      [&] { single.buffer->symmetric_combine(combine_args(single.data, dispatched.handle, wide)); });
  EXPECT_EQ(message.rfind("x:", 0), 0u) << message;
  EXPECT_NE(message.find("expert_capacity"), std::string::npos) << message;
}

// ---- the combine path knob ------------------------------------------------------------------------

TEST(SymmetricCombinePath, AutoPullsWithRanksAsThreadsAndPushesAcrossProcesses) {
  Case c = make("auto", 1, {4}, 4, 2, 4);
  {
    Buffer buffer(buffer_options(c, 0, kRegions));
    buffer.connect({buffer.local_handle()});
    EXPECT_EQ(buffer.symmetric_combine_path(), SymmetricCombine::pull);
  }
  BufferOptions options = buffer_options(c, 0, kRegions);
  options.sharing = HeapSharing::processes;
  Buffer buffer(options);
  buffer.connect({buffer.local_handle()});
  EXPECT_EQ(buffer.symmetric_combine_path(), SymmetricCombine::push);
  Buffer unconnected(buffer_options(c, 0, kRegions));
  EXPECT_EQ(refused<InvalidArgument>([&] {
              unconnected.symmetric_combine_path();
            }).rfind("symmetric_combine_path:", 0),
            0u);
}

TEST(SymmetricCombinePath, ForcingPullAcrossProcessesIsRefusedNamingTheKnob) {
  Case c = with_symmetric_combine(make("forced_pull", 1, {4}, 4, 2, 4), SymmetricCombine::pull);
  BufferOptions options = buffer_options(c, 0, kRegions);
  options.sharing = HeapSharing::processes;
  Buffer buffer(options);
  const std::string message = refused<Unsupported>([&] { buffer.connect({buffer.local_handle()}); });
  EXPECT_EQ(message.rfind("config.symmetric_combine: pull needs", 0), 0u) << message;
  EXPECT_NE(message.find("thread of this process"), std::string::npos) << message;
  EXPECT_NE(message.find("separate processes"), std::string::npos) << message;
}

TEST(SymmetricDispatchPath, AutoIsZeroCopyWithRanksAsThreadsAndPublishesAcrossProcesses) {
  Case c = make("auto", 1, {4}, 4, 2, 4);
  {
    Buffer buffer(buffer_options(c, 0, kRegions));
    buffer.connect({buffer.local_handle()});
    EXPECT_EQ(buffer.symmetric_dispatch_path(), SymmetricDispatch::zero_copy);
  }
  BufferOptions options = buffer_options(c, 0, kRegions);
  options.sharing = HeapSharing::processes;
  Buffer buffer(options);
  buffer.connect({buffer.local_handle()});
  EXPECT_EQ(buffer.symmetric_dispatch_path(), SymmetricDispatch::publish);
  Buffer unconnected(buffer_options(c, 0, kRegions));
  EXPECT_EQ(refused<InvalidArgument>([&] {
              unconnected.symmetric_dispatch_path();
            }).rfind("symmetric_dispatch_path:", 0),
            0u);
}

TEST(SymmetricDispatchPath, ForcingZeroCopyAcrossProcessesIsRefusedNamingTheKnob) {
  Case c = with_symmetric_dispatch(make("forced_zero_copy", 1, {4}, 4, 2, 4), SymmetricDispatch::zero_copy);
  BufferOptions options = buffer_options(c, 0, kRegions);
  options.sharing = HeapSharing::processes;
  Buffer buffer(options);
  const std::string message = refused<Unsupported>([&] { buffer.connect({buffer.local_handle()}); });
  EXPECT_EQ(message.rfind("config.symmetric_dispatch: zero_copy needs", 0), 0u) << message;
  EXPECT_NE(message.find("thread of this process"), std::string::npos) << message;
  EXPECT_NE(message.find("separate processes"), std::string::npos) << message;
}

// push is what auto resolves to on CUDA (Buffer::symmetric_dispatch_path), not a request: a Config asking for
// it is refused by name before any Buffer exists, and the CPU engine's auto stays zero_copy (above).
TEST(SymmetricDispatchPath, PushIsReportedNotRequested) {
  Config config;
  config.symmetric_dispatch = SymmetricDispatch::push;
  const std::string message = refused<InvalidArgument>([&] { config.validate(); });
  EXPECT_EQ(
      message,
      "config.symmetric_dispatch: expected auto, publish or zero_copy (auto pushes where it can), got push");
  EXPECT_STREQ(symmetric_dispatch_name(SymmetricDispatch::push), "push");
}

TEST(SymmetricSizing, TheRegionFollowsTheOthersAndLeavesTheirSizesAlone) {
  Case c = make("sizing", 4, {4, 4, 4, 4}, 16, 8, 32, 1024);
  BufferOptions options = buffer_options(c, 0, kRegions);
  const size_t low_latency = low_latency_heap_bytes(options.topology, options.sizing);
  const size_t symmetric = symmetric_heap_bytes(options.topology, options.sizing);
  EXPECT_GT(symmetric, 0u);
  BufferOptions without = options;
  without.sizing.symmetric_max_tokens_per_rank = 0;
  EXPECT_EQ(symmetric_heap_bytes(without.topology, without.sizing), 0u);
  EXPECT_EQ(low_latency_heap_bytes(without.topology, without.sizing), low_latency);
  Buffer with_region(options);
  Buffer without_region(without);
  EXPECT_EQ(with_region.heap_bytes(), without_region.heap_bytes() + symmetric);
}

}  // namespace
}  // namespace switchyard::testing::expert_major
