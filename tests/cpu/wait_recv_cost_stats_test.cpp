// The low_latency engine's wait statistics (ExpertMajorDispatchArgs / ExpertMajorCombineArgs::
// wait_recv_cost_stats, DeepEP's dispatch_ and combine_wait_recv_cost_stats) on the CPU backend: a rank
// that enters a call late shows as a large entry on every other rank and on no entry of its own; the
// entries are added to, not overwritten; with a hook they move when the hook runs; bad tensors and the
// symmetric engine are refused before anything is written; results stay bitwise the reference.
#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "support/expert_major_gtest.hpp"
#include "support/test_seed.hpp"
#include "support/wait_cost_check.hpp"
#include "switchyard/buffer.hpp"
#include "switchyard/errors.hpp"
#include "switchyard/group.hpp"

namespace switchyard::testing::expert_major {
namespace {

constexpr Regions kRegions = Regions::low_latency;

TEST(LowLatencyWaitCost, ALateRankShowsOnEveryOtherRankInDispatchAndCombine) {
  Case c = make("wait_cost", 3, {6, 5, 4}, 6, 2, 6);
  const uint64_t seed = seed_for("low_latency/wait_cost");
  const Expected expected = expected_for(c, seed);
  Failures failures;
  with_buffers(c, kRegions, [&](Group& group, Buffer& buffer) {
    const int rank = group.rank();
    constexpr int kLateInDispatch = 2, kLateInCombine = 0;
    Tensor dispatch_stats = wait_stats_for(c.ranks);
    LowLatencyDispatchArgs args = dispatch_args(c, expected.data[rank]);
    args.wait_recv_cost_stats = dispatch_stats;
    group.barrier();
    if (rank == kLateInDispatch) std::this_thread::sleep_for(kLateBy);
    LowLatencyDispatchResult dispatched = buffer.low_latency_dispatch(args);
    check_dispatch(dispatched, expected.dispatched[rank], "the reference", rank, failures);
    check_wait_stats(dispatch_stats, rank, kLateInDispatch, "dispatch", failures);

    Tensor combine_stats = wait_stats_for(c.ranks);
    Tensor y = expert_outputs(dispatched.recv_x, {}, rank);
    LowLatencyCombineArgs cargs = combine_args(expected.data[rank], dispatched.handle, y);
    cargs.wait_recv_cost_stats = combine_stats;
    group.barrier();
    if (rank == kLateInCombine) std::this_thread::sleep_for(kLateBy);
    LowLatencyCombineResult combined = buffer.low_latency_combine(cargs);
    compare(combined.combined_x, expected.combined[rank], "combined_x", rank, failures);
    check_wait_stats(combine_stats, rank, kLateInCombine, "combine", failures);
  });
  expect_none(failures, seed);
}

TEST(LowLatencyWaitCost, WithAHookTheEntriesMoveWhenTheHookRuns) {
  Case c = make("wait_cost_hook", 2, {5, 6}, 6, 2, 4);
  const uint64_t seed = seed_for("low_latency/wait_cost_hook");
  const Expected expected = expected_for(c, seed);
  Failures failures;
  with_buffers(c, kRegions, [&](Group& group, Buffer& buffer) {
    const int rank = group.rank();
    Tensor stats = wait_stats_for(c.ranks);
    LowLatencyDispatchArgs args = dispatch_args(c, expected.data[rank]);
    args.wait_recv_cost_stats = stats;
    args.return_recv_hook = true;
    group.barrier();
    if (rank == 1) std::this_thread::sleep_for(kLateBy);
    LowLatencyDispatchResult dispatched = buffer.low_latency_dispatch(args);
    for (int source = 0; source < c.ranks; ++source) {
      if (stats.as<const int64_t>()[source] != kStatsStart)
        failures.add(rank, "wait_recv_cost_stats moved before the hook ran");
    }
    dispatched.hook();
    check_dispatch(dispatched, expected.dispatched[rank], "the reference", rank, failures);
    // Rank 0's hook ran right after its send half: it waited for rank 1 there.
    check_wait_stats(stats, rank, 1, "hooked dispatch", failures);
    Tensor y = expert_outputs(dispatched.recv_x, {}, rank);
    buffer.low_latency_combine(combine_args(expected.data[rank], dispatched.handle, y));
  });
  expect_none(failures, seed);
}

TEST(LowLatencyWaitCost, BadTensorsAreRefusedByNameBeforeAnythingIsWritten) {
  SingleRank single(kRegions);
  for (const Tensor& bad :
       {Tensor::empty(DType::i32, {1}), Tensor::empty(DType::i64, {2}), Tensor::empty(DType::i64, {1, 1})}) {
    LowLatencyDispatchArgs args = single.args();
    args.wait_recv_cost_stats = bad;
    const std::string message = refused<InvalidArgument>([&] { single.buffer->low_latency_dispatch(args); });
    EXPECT_NE(message.find("wait_recv_cost_stats"), std::string::npos) << message;
    EXPECT_TRUE(single.untouched()) << "a refused dispatch wrote an output";
  }
  LowLatencyDispatchResult dispatched = single.buffer->low_latency_dispatch(single.args());
  Tensor y = expert_outputs(dispatched.recv_x, {}, 0);
  LowLatencyCombineArgs cargs = combine_args(single.data, dispatched.handle, y);
  cargs.wait_recv_cost_stats = Tensor::empty(DType::i64, {3});
  const std::string message = refused<InvalidArgument>([&] { single.buffer->low_latency_combine(cargs); });
  EXPECT_NE(message.find("wait_recv_cost_stats: expected size 1 in dimension 0"), std::string::npos)
      << message;
}

TEST(LowLatencyWaitCost, TheSymmetricEngineRefusesItByName) {
  SingleRank single(Regions::symmetric);
  Tensor stats = wait_stats_for(1);
  LowLatencyDispatchArgs args = single.args();
  args.wait_recv_cost_stats = stats;
  const std::string message = refused<Unsupported>([&] { single.buffer->symmetric_dispatch(args); });
  EXPECT_NE(message.find("wait_recv_cost_stats"), std::string::npos) << message;
  EXPECT_TRUE(single.untouched());
  LowLatencyDispatchResult dispatched = single.buffer->symmetric_dispatch(single.args());
  Tensor y = expert_outputs(dispatched.recv_x, {}, 0);
  LowLatencyCombineArgs cargs = combine_args(single.data, dispatched.handle, y);
  cargs.wait_recv_cost_stats = stats;
  const std::string combine_message = refused<Unsupported>([&] { single.buffer->symmetric_combine(cargs); });
  EXPECT_NE(combine_message.find("wait_recv_cost_stats"), std::string::npos) << combine_message;
  EXPECT_EQ(stats.as<const int64_t>()[0], kStatsStart);
}

}  // namespace
}  // namespace switchyard::testing::expert_major
