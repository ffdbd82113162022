// Rank masks on the CPU backend (Buffer::update_mask, Config::mask_ranks_on_timeout): a masked rank's
// experts receive nothing, slots routed to them are dropped, it sends nothing and nothing is awaited
// from it, so the survivors go on over the same Buffer with outputs bitwise those of the reference on
// the survivors' routing. For both expert-major engines, ranks as threads.
#include <gtest/gtest.h>

#include <chrono>
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

// The inputs as the survivors route them: a masked rank's tokens are dropped (every slot -1) and a
// slot whose expert is on a masked rank is -1.
std::vector<workload::RankData> survivors_routing(std::vector<workload::RankData> data, const Case& c,
                                                  const std::set<int>& masked) {
  const int local_experts = c.num_experts / c.ranks;
  for (int rank = 0; rank < c.ranks; ++rank) {
    Tensor& topk_idx = data[rank].topk_idx;
    Tensor copy = Tensor::empty(DType::i64, {topk_idx.size(0), topk_idx.size(1)});
    const int64_t* from = topk_idx.as<const int64_t>();
    int64_t* to = copy.as<int64_t>();
    for (int64_t i = 0; i < topk_idx.numel(); ++i) {
      const bool dropped = masked.count(rank) != 0 ||
                           (from[i] >= 0 && masked.count(static_cast<int>(from[i] / local_experts)) != 0);
      to[i] = dropped ? -1 : from[i];
    }
    topk_idx = copy;
  }
  return data;
}

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

class RankMask : public ::testing::TestWithParam<Engine> {};

Case mask_case() {
  return make("mask", 4, {6, 5, 6, 4}, 6, 3, 16);
}

TEST_P(RankMask, SurvivorsGoOnWithoutTheMaskedRankBitwise) {
  // Rank 2 has left (it makes no call at all); every survivor masks it, then three round trips run
  // over the same buffers, alternating the engines' halves.
  const Engine engine = GetParam();
  const Case c = mask_case();
  const std::set<int> masked = {2};
  const uint64_t seed = testing::seed_for(std::string("rank_mask/survivors/") + engine_name(engine));
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
  const Engine engine = GetParam();
  const Case c = mask_case();
  const uint64_t seed = testing::seed_for(std::string("rank_mask/rejoin/") + engine_name(engine));
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

TEST_P(RankMask, ATimeoutMasksTheSilentPeerAndTheNextCallsAreTheSurvivors) {
  // Config::mask_ranks_on_timeout: rank 3 never calls. The survivors' first round trip ends after
  // about the timeout, without TimeoutError, with rank 3 masked; the next one is bitwise the reference
  // on the survivors' routing.
  const Engine engine = GetParam();
  const Case c = mask_case();
  const double timeout_seconds = 1.0;
  const uint64_t seed = testing::seed_for(std::string("rank_mask/timeout/") + engine_name(engine));
  const std::vector<workload::RankData> first = workload::generate(shape_of(c), seed);
  const std::vector<workload::RankData> second = workload::generate(shape_of(c), seed + 1);
  const Expected expected = expected_from(c, survivors_routing(second, c, {3}));
  Failures failures;
  run_ranks(c.ranks, [&](Group& group) {
    const int rank = group.rank();
    BufferOptions options = buffer_options(c, rank, regions_of(engine), timeout_seconds);
    options.config.mask_ranks_on_timeout = true;
    Buffer buffer(options);
    buffer.connect(group.allgather(buffer.local_handle()));
    if (rank != 3) {
      const auto start = std::chrono::steady_clock::now();
      try {
        const LowLatencyDispatchResult dispatched =
            dispatch_with(engine, buffer, dispatch_args(c, first[rank]));
        const Tensor y = expert_outputs(dispatched.recv_x, dispatched.recv_x_scales, rank);
        combine_with(engine, buffer, combine_args(first[rank], dispatched.handle, y));
      } catch (const std::exception& error) {
        failures.add(rank, std::string("the round trip with a silent peer raised: ") + error.what());
      }
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (seconds > 10 * timeout_seconds)
        failures.add(rank, "the round trip with a silent peer took " + std::to_string(seconds) + " s");
      if (buffer.query_mask().as<const int32_t>()[3] != 1) failures.add(rank, "rank 3 is not masked");
      for (int peer = 0; peer < 3; ++peer) {
        if (buffer.query_mask().as<const int32_t>()[peer] != 0)
          failures.add(rank, "survivor " + std::to_string(peer) + " is masked");
      }
      // The survivors agree before they go on (each masked rank 3 on its own timeout).
      std::vector<Bytes> ready = group.allgather(Bytes{1});
      (void)ready;
      round_trip_checked(engine, buffer, c, second[rank], expected, rank, "after the timeout", failures);
      group.barrier();
    } else {
      group.allgather(Bytes{1});
      group.barrier();
    }
  });
  expect_none(failures, seed);
}

TEST_P(RankMask, BadRanksAreRefusedByNameAndTheNormalEngineRefusesWhileMasked) {
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

INSTANTIATE_TEST_SUITE_P(Engines, RankMask, ::testing::Values(Engine::low_latency, Engine::symmetric),
                         [](const auto& info) { return std::string(engine_name(info.param)); });

}  // namespace
}  // namespace switchyard::testing::expert_major
