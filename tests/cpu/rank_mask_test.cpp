// Rank masks on the CPU backend (Buffer::update_mask, Config::mask_ranks_on_timeout): a masked rank's
// experts receive nothing, slots routed to them are dropped, it sends nothing and nothing is awaited
// from it, so the survivors go on over the same Buffer with outputs bitwise those of the reference on
// the survivors' routing. For both expert-major engines, ranks as threads; the symmetric engine on each
// of its combine paths (push, pull) after each of its dispatch sources (publish, zero_copy).
#include <gtest/gtest.h>

#include <chrono>
#include <ostream>
#include <set>
#include <string>
#include <vector>

#include "support/expert_major_gtest.hpp"
#include "support/refusal.hpp"
#include "support/test_seed.hpp"
#include "switchyard/buffer.hpp"
#include "switchyard/errors.hpp"
#include "switchyard/group.hpp"
#include "workload/workload.hpp"

namespace switchyard::testing::expert_major {
namespace {

// One round trip of `engine` on this rank with the caller's (unmasked) inputs, checked against the
// reference outputs of `expected` (computed on the survivors' routing).
void round_trip_checked(Engine engine, Buffer& buffer, const Case& c, const workload::RankData& data,
                        const Expected& expected, int rank, const std::string& what, Failures& failures) {
  const LowLatencyDispatchResult dispatched = dispatch_with(engine, buffer, dispatch_args(c, data));
  Outputs got;
  got.recv_x = host_copy(dispatched.recv_x);
  got.recv_x_scales = host_copy(dispatched.recv_x_scales);
  got.recv_count = host_copy(dispatched.recv_count);
  got.layout_range = host_copy(dispatched.layout_range);
  got.src_info = host_copy(dispatched.src_info);
  const Tensor y = expert_outputs(dispatched.recv_x, dispatched.recv_x_scales, rank);
  got.combined_x =
      host_copy(combine_with(engine, buffer, combine_args(data, dispatched.handle, y)).combined_x);
  check_outputs(got, reference_outputs(expected, rank),
                "the reference on the survivors' routing (" + what + ")", rank, failures);
}

// An engine, and for the symmetric one the combine path and dispatch source its buffers force.
struct Variant {
  Engine engine;
  SymmetricCombine combine = SymmetricCombine::automatic;
  SymmetricDispatch dispatch = SymmetricDispatch::automatic;
};

std::string variant_name(const Variant& v) {
  std::string name = engine_name(v.engine);
  if (v.engine != Engine::symmetric) return name;
  name += std::string("_") + symmetric_combine_name(v.combine);
  if (v.dispatch == SymmetricDispatch::zero_copy) name += "_zero_copy";
  return name;
}

void PrintTo(const Variant& v, std::ostream* out) {
  *out << variant_name(v);
}

class RankMask : public ::testing::TestWithParam<Variant> {};

Case mask_case(const Variant& v) {
  return with_symmetric_dispatch(with_symmetric_combine(make("mask", 4, {6, 5, 6, 4}, 6, 3, 16), v.combine),
                                 v.dispatch);
}

// Outputs of one round trip whose combine is not checked here: the dispatch's, checked against
// `expected`'s, and the combine's, returned.
Tensor dispatch_checked_then_combine(Engine engine, Buffer& buffer, const Case& c,
                                     const workload::RankData& data, const Expected& expected, int rank,
                                     const std::string& what, Failures& failures) {
  const LowLatencyDispatchResult dispatched = dispatch_with(engine, buffer, dispatch_args(c, data));
  Outputs got;
  got.recv_x = host_copy(dispatched.recv_x);
  got.recv_x_scales = host_copy(dispatched.recv_x_scales);
  got.recv_count = host_copy(dispatched.recv_count);
  got.layout_range = host_copy(dispatched.layout_range);
  got.src_info = host_copy(dispatched.src_info);
  Outputs want = reference_outputs(expected, rank);
  want.combined_x = Tensor();
  check_outputs(got, want, what, rank, failures);
  const Tensor y = expert_outputs(dispatched.recv_x, dispatched.recv_x_scales, rank);
  return host_copy(combine_with(engine, buffer, combine_args(data, dispatched.handle, y)).combined_x);
}

TEST_P(RankMask, SurvivorsGoOnWithoutTheMaskedRankBitwise) {
  // Rank 2 has left (it makes no call at all); every survivor masks it, then three round trips run
  // over the same buffers, alternating the engines' halves.
  const Engine engine = GetParam().engine;
  const Case c = mask_case(GetParam());
  const std::set<int> masked = {2};
  const uint64_t seed = testing::seed_for("rank_mask/survivors/" + variant_name(GetParam()));
  std::vector<std::vector<workload::RankData>> inputs;
  std::vector<Expected> expected;
  for (int round = 0; round < 3; ++round) {
    inputs.push_back(workload::generate(shape_of(c), seed + round));
    expected.push_back(expected_from(c, survivors_routing(inputs.back(), c, masked)));
  }
  Failures failures;
  with_buffers(c, regions_of(engine), [&](Group& group, Buffer& buffer) {
    const int rank = group.rank();
    if (masked.count(rank) != 0) return;  // gone
    buffer.update_mask(2, true);
    for (int round = 0; round < 3; ++round) {
      round_trip_checked(engine, buffer, c, inputs[round][rank], expected[round], rank,
                         "round " + std::to_string(round), failures);
    }
    const Tensor mask = buffer.query_mask();
    for (int peer = 0; peer < c.ranks; ++peer) {
      if (mask.as<const int32_t>()[peer] != (peer == 2 ? 1 : 0))
        failures.add(rank, "query_mask()[" + std::to_string(peer) + "] is " +
                               std::to_string(mask.as<const int32_t>()[peer]));
    }
  });
  expect_none(failures, seed);
}

TEST_P(RankMask, AMaskedRankThatKeepsCallingGetsNothingAndRejoinsAfterCleanMask) {
  // Every rank masks rank 1, rank 1 included, and every rank keeps calling: rank 1 receives nothing and
  // its combine is +0.0 (the reference on the survivors' routing says the same). Then clean_mask on
  // every rank, and the next round trip is the full reference again.
  const Engine engine = GetParam().engine;
  const Case c = mask_case(GetParam());
  const uint64_t seed = testing::seed_for("rank_mask/rejoin/" + variant_name(GetParam()));
  const std::vector<workload::RankData> masked_round = workload::generate(shape_of(c), seed);
  const std::vector<workload::RankData> full_round = workload::generate(shape_of(c), seed + 1);
  const Expected masked_expected = expected_from(c, survivors_routing(masked_round, c, {1}));
  const Expected full_expected = expected_from(c, full_round);
  Failures failures;
  with_buffers(c, regions_of(engine), [&](Group& group, Buffer& buffer) {
    const int rank = group.rank();
    buffer.update_mask(1, true);
    round_trip_checked(engine, buffer, c, masked_round[rank], masked_expected, rank, "rank 1 masked",
                       failures);
    buffer.clean_mask();
    group.barrier();  // every rank has cleaned before anyone sends to rank 1 again
    round_trip_checked(engine, buffer, c, full_round[rank], full_expected, rank, "after clean_mask",
                       failures);
  });
  expect_none(failures, seed);
}

// The survivors' view after a timeout: rank `silent` masked, no one else (each masked it on its own
// timeout; they agree before they go on).
void expect_only_masked(Buffer& buffer, int silent, int ranks, int rank, Failures& failures) {
  const Tensor mask = buffer.query_mask();
  for (int peer = 0; peer < ranks; ++peer) {
    if (mask.as<const int32_t>()[peer] != (peer == silent ? 1 : 0))
      failures.add(rank, "after the timeout, query_mask()[" + std::to_string(peer) + "] is " +
                             std::to_string(mask.as<const int32_t>()[peer]));
  }
}

// Config::mask_ranks_on_timeout: rank 3 makes `silent_from` of the first round trip's calls (0: none;
// 1: the dispatch, then it stays silent), then nothing. The survivors' first round trip ends after
// about the timeout, without TimeoutError, with rank 3 masked, and its outputs are already the
// survivors' where rank 3 was masked before they were made: the combine's always, the dispatch's when
// rank 3 made none (otherwise the dispatch is the full reference). The next round trip is bitwise
// the reference on the survivors' routing.
void timeout_masks_the_silent_peer(const Variant& variant, int silent_from, const std::string& name) {
  const Engine engine = variant.engine;
  const Case c = mask_case(variant);
  const int silent = 3;
  const double timeout_seconds = 1.0;
  const uint64_t seed = testing::seed_for("rank_mask/" + name + "/" + variant_name(variant));
  const std::vector<workload::RankData> first = workload::generate(shape_of(c), seed);
  const std::vector<workload::RankData> second = workload::generate(shape_of(c), seed + 1);
  const Expected first_full = expected_from(c, first);
  const Expected first_survivors = expected_from(c, survivors_routing(first, c, {silent}));
  const Expected expected = expected_from(c, survivors_routing(second, c, {silent}));
  Failures failures;
  run_ranks(c.ranks, [&](Group& group) {
    const int rank = group.rank();
    BufferOptions options = buffer_options(c, rank, regions_of(engine), timeout_seconds);
    options.config.mask_ranks_on_timeout = true;
    Buffer buffer(options);
    buffer.connect(group.allgather(buffer.local_handle()));
    if (rank == silent) {
      if (silent_from > 0) dispatch_with(engine, buffer, dispatch_args(c, first[rank]));
      group.allgather(Bytes{1});
      group.barrier();  // its buffer outlives the survivors' calls, which may still write to it
      return;
    }
    const auto start = std::chrono::steady_clock::now();
    try {
      const Expected& dispatched = silent_from > 0 ? first_full : first_survivors;
      const Tensor combined =
          dispatch_checked_then_combine(engine, buffer, c, first[rank], dispatched, rank,
                                        "the reference (the call that timed out)", failures);
      compare(combined, first_survivors.combined[rank],
              "combined_x vs the reference on the survivors' routing (the call that timed out)", rank,
              failures);
    } catch (const std::exception& error) {
      failures.add(rank, std::string("the round trip with a silent peer raised: ") + error.what());
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (seconds > 10 * timeout_seconds)
      failures.add(rank, "the round trip with a silent peer took " + std::to_string(seconds) + " s");
    expect_only_masked(buffer, silent, c.ranks, rank, failures);
    // The survivors agree before they go on (each masked rank 3 on its own timeout).
    group.allgather(Bytes{1});
    round_trip_checked(engine, buffer, c, second[rank], expected, rank, "after the timeout", failures);
    group.barrier();
  });
  expect_none(failures, seed);
}

TEST_P(RankMask, ATimeoutMasksTheSilentPeerAndTheNextCallsAreTheSurvivors) {
  timeout_masks_the_silent_peer(GetParam(), 0, "timeout");
}

TEST_P(RankMask, APeerSilentFromTheCombineOnIsMaskedThereAndTheCombineIsTheSurvivors) {
  timeout_masks_the_silent_peer(GetParam(), 1, "timeout_in_combine");
}

class RankMaskArguments : public ::testing::TestWithParam<Engine> {};

TEST_P(RankMaskArguments, BadRanksAreRefusedByNameAndTheNormalEngineRefusesWhileMasked) {
  const Engine engine = GetParam();
  SingleRank single(regions_of(engine));
  Buffer& buffer = *single.buffer;
  EXPECT_EQ(invalid_argument_message([&] { buffer.update_mask(1, true); }),
            "update_mask: rank: expected 0..0, got 1");
  EXPECT_EQ(invalid_argument_message([&] { buffer.update_mask(-1, true); }),
            "update_mask: rank: expected 0..0, got -1");
  buffer.update_mask(0, true);
  EXPECT_EQ(buffer.query_mask().as<const int32_t>()[0], 1);
  // Masked in its own view: the call runs and receives nothing.
  const LowLatencyDispatchResult dispatched = dispatch_with(engine, buffer, single.args());
  EXPECT_EQ(host_copy(dispatched.recv_count).as<const int32_t>()[0], 0);
  const std::string refusal = refused<Unsupported>([&] {
    DispatchArgs args;
    args.x = single.data.x;
    args.topk_idx = single.data.topk_idx;
    args.num_experts = single.c.num_experts;
    buffer.dispatch(args);
  });
  EXPECT_NE(refusal.find("dispatch: the normal engine needs every rank, and update_mask has masked rank 0"),
            std::string::npos)
      << refusal;
  buffer.clean_mask();
  EXPECT_EQ(buffer.query_mask().as<const int32_t>()[0], 0);
}

TEST(RankMaskHooks, TheMaskCannotChangeBetweenALowLatencyCallAndItsHook) {
  // Found by the calls fuzzer: masked in its own view, a rank's send half sent nothing; unmasked before
  // the hook, its receive half then waited for its own signal until the timeout.
  SingleRank single(Regions::low_latency);
  Buffer& buffer = *single.buffer;
  buffer.update_mask(0, true);
  LowLatencyDispatchArgs args = single.args();
  args.return_recv_hook = true;
  const LowLatencyDispatchResult dispatched = buffer.low_latency_dispatch(args);
  EXPECT_EQ(
      invalid_argument_message([&] { buffer.update_mask(0, false); }),
      "update_mask: expected no pending low-latency hook (a call's send and receive halves must see the "
      "same mask), got the previous call's return_recv_hook still to run");
  EXPECT_TRUE(
      contains(invalid_argument_message([&] { buffer.clean_mask(); }), "clean_mask: expected no pending"));
  dispatched.hook();
  EXPECT_EQ(host_copy(dispatched.recv_count).as<const int32_t>()[0], 0);
  buffer.clean_mask();
  EXPECT_EQ(buffer.query_mask().as<const int32_t>()[0], 0);
}

INSTANTIATE_TEST_SUITE_P(
    Engines, RankMask,
    ::testing::Values(Variant{Engine::low_latency},
                      Variant{Engine::symmetric, SymmetricCombine::push, SymmetricDispatch::publish},
                      Variant{Engine::symmetric, SymmetricCombine::push, SymmetricDispatch::zero_copy},
                      Variant{Engine::symmetric, SymmetricCombine::pull, SymmetricDispatch::publish},
                      Variant{Engine::symmetric, SymmetricCombine::pull, SymmetricDispatch::zero_copy}),
    [](const auto& info) { return variant_name(info.param); });
INSTANTIATE_TEST_SUITE_P(Engines, RankMaskArguments,
                         ::testing::Values(Engine::low_latency, Engine::symmetric),
                         [](const auto& info) { return std::string(engine_name(info.param)); });

}  // namespace
}  // namespace switchyard::testing::expert_major
