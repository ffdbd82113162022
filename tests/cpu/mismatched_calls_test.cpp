// Ranks that make the same call with different shapes (here: rank 0 with half the experts of the
// others) are refused on every rank with an InvalidArgument that says so, long before the timeout,
// and no output is written; the Buffer goes on (the next call, made alike, goes through). Before the
// call digest, symmetric returned garbage on every rank and low_latency waited for signals that never
// came.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <mutex>
#include <ostream>
#include <string>
#include <vector>

#include "support/expert_major_cases.hpp"
#include "support/expert_major_gtest.hpp"
#include "support/test_seed.hpp"
#include "switchyard/buffer.hpp"
#include "switchyard/errors.hpp"
#include "switchyard/group.hpp"
#include "workload/workload.hpp"

namespace switchyard {
namespace {

namespace em = testing::expert_major;

// NOTES: long, so that a refusal that only came by timing out shows as a failure of the deadline.
constexpr double kTimeoutSeconds = 30.0;
constexpr double kDeadlineSeconds = 10.0;

struct Outcome {
  std::string message;  // empty: the call returned
  bool invalid_argument = false;
  bool outputs_untouched = false;
};

// What `call` did: returned, or threw (an InvalidArgument, or something else).
Outcome outcome_of(const std::function<void()>& call) {
  Outcome outcome;
  try {
    call();
  } catch (const InvalidArgument& error) {
    outcome.message = error.what();
    outcome.invalid_argument = true;
  } catch (const std::exception& error) {
    outcome.message = std::string("not an InvalidArgument: ") + error.what();
  }
  return outcome;
}

// Every rank refused its call with an InvalidArgument (whose message contains `says`), before the
// deadline, and wrote nothing (`written`: what would have been).
void expect_refused_on_every_rank(const std::vector<Outcome>& outcomes, double seconds,
                                  const std::string& says, const std::string& written) {
  EXPECT_LT(seconds, kDeadlineSeconds) << "the refusal waited for a timeout";
  for (size_t rank = 0; rank < outcomes.size(); ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank) + ": " + outcomes[rank].message);
    EXPECT_TRUE(outcomes[rank].invalid_argument);
    EXPECT_NE(outcomes[rank].message.find(says), std::string::npos);
    EXPECT_TRUE(outcomes[rank].outputs_untouched) << written << " was written";
  }
}

class MismatchedCalls : public ::testing::TestWithParam<Engine> {};

TEST_P(MismatchedCalls, RankZeroWithHalfTheExpertsIsRefusedOnEveryRankAndTheNextCallGoesThrough) {
  const Engine engine = GetParam();
  const int ranks = 4;
  const em::Case full = em::make("full", ranks, {6, 6, 6, 6}, 6, 2, 48);
  const em::Case half = em::make("half", ranks, {6, 6, 6, 6}, 6, 2, 24);
  const uint64_t seed = testing::seed_for(::testing::UnitTest::GetInstance()->current_test_info()->name());
  SCOPED_TRACE("seed " + std::to_string(seed));
  const em::Expected expected_full = em::expected_for(full, seed);
  const em::Expected expected_half = em::expected_for(half, seed);

  std::mutex mutex;
  std::vector<Outcome> outcomes(ranks);
  std::vector<std::string> next_calls(
      ranks);          // what the call made alike after the refusal threw, if anything
  em::Failures after;  // its outputs against the reference's
  const auto start = std::chrono::steady_clock::now();
  em::with_buffers(
      full, em::regions_of(engine),
      [&](Group& group, Buffer& buffer) {
        const int rank = group.rank();
        const em::Case& mine = rank == 0 ? half : full;
        const em::Expected& expected = rank == 0 ? expected_half : expected_full;
        em::PoisonedOutputs out = em::poisoned_outputs(mine, 6);
        LowLatencyDispatchArgs args = em::dispatch_args(mine, expected.data[rank]);
        out.attach(args);
        Outcome outcome = outcome_of([&] { em::dispatch_with(engine, buffer, args); });
        outcome.outputs_untouched = true;
        for (const Tensor& tensor : {out.recv_x, out.recv_count}) {
          outcome.outputs_untouched = outcome.outputs_untouched && em::all_poison(tensor);
        }
        // The refusal is bad input, not a broken protocol: the Buffer goes on, and the same call made
        // alike on every rank then goes through, bit for bit the reference's.
        const Outcome next = outcome_of([&] {
          em::PoisonedOutputs again = em::poisoned_outputs(full, 6);
          LowLatencyDispatchArgs alike = em::dispatch_args(full, expected_full.data[rank]);
          again.attach(alike);
          em::dispatch_with(engine, buffer, alike);
          em::check_dispatch(again, em::reference_outputs(expected_full, rank), "reference", rank, after);
        });
        std::lock_guard<std::mutex> lock(mutex);
        outcomes[rank] = outcome;
        next_calls[rank] = next.message;
      },
      kTimeoutSeconds);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  expect_refused_on_every_rank(outcomes, seconds, "expected every rank to call with the same shape",
                               "recv_x or recv_count");
  for (int rank = 0; rank < ranks; ++rank)
    EXPECT_EQ(next_calls[rank], "") << "rank " << rank << ": the next call, alike on every rank, was refused";
  em::expect_none(after, seed);
}

// The combine's options that change what travels are part of its digest: rank 0 asking for LogFMT
// while the others do not is refused on every rank, before the timeout, writing nothing.
TEST(MismatchedCombines, LogfmtOnOneRankOnlyIsRefusedOnEveryRank) {
  const int ranks = 3;
  const em::Case c = em::make("logfmt_mismatch", ranks, {5, 5, 5}, 5, 2, 6);
  const uint64_t seed = testing::seed_for("mismatched/logfmt");
  SCOPED_TRACE("seed " + std::to_string(seed));
  const em::Expected expected = em::expected_for(c, seed);
  std::mutex mutex;
  std::vector<Outcome> outcomes(ranks);
  const auto start = std::chrono::steady_clock::now();
  em::with_buffers(
      c, em::regions_of(Engine::low_latency),
      [&](Group& group, Buffer& buffer) {
        const int rank = group.rank();
        const workload::RankData& data = expected.data[rank];
        const LowLatencyDispatchResult dispatched = buffer.low_latency_dispatch(em::dispatch_args(c, data));
        em::PoisonedOutputs out = em::poisoned_outputs(c, 5);
        LowLatencyCombineArgs args = em::combine_args(data, dispatched.handle, expected.ys[rank]);
        out.attach(args);
        args.use_logfmt = rank == 0;
        Outcome outcome = outcome_of([&] { buffer.low_latency_combine(args); });
        outcome.outputs_untouched = em::all_poison(out.combined_x);
        std::lock_guard<std::mutex> lock(mutex);
        outcomes[rank] = outcome;
      },
      kTimeoutSeconds);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  expect_refused_on_every_rank(outcomes, seconds, "expected every rank to call with the same shape",
                               "combined_x");
}

// The normal engine's cached dispatch and combine carry no counts to compare, so every call's opening
// barrier compares the calls instead (NormalHeapLayout::call_stamp_word): rank 0 making another call than
// the others (another kind, or the same kind in another mode) is refused on every rank, before the timeout,
// writing nothing. Before the stamps such pairs waited for the timeout or, in place, returned rows that no
// rank asked for. With the inputs in the heap, too (the ring-free paths).
// The last case combines with the handles of two dispatches of the same routing: alike in every shape, told
// apart only by the dispatch each handle came from (NormalHandleData::routing_epoch).
enum class NormalMismatch {
  cached_dispatch_beside_combine,
  cached_dispatch_with_topk_on_one_rank,
  weights_on_one_rank,
  combine_on_another_dispatchs_handle
};

struct NormalMismatchCase {
  NormalMismatch mismatch;
  bool in_heap;
  bool two_nodes = false;  // 4 ranks on 2 nodes: the hierarchical engine, stamps put across nodes
};

std::string normal_mismatch_label(const NormalMismatchCase& c) {
  static const char* const kNames[] = {"cached_dispatch_beside_combine",
                                       "cached_dispatch_with_topk_on_one_rank", "weights_on_one_rank",
                                       "combine_on_another_dispatchs_handle"};
  return std::string(kNames[static_cast<int>(c.mismatch)]) + (c.in_heap ? "_in_heap" : "") +
         (c.two_nodes ? "_two_nodes" : "");
}

void PrintTo(const NormalMismatchCase& c, std::ostream* out) {
  *out << normal_mismatch_label(c);
}

class MismatchedNormalCalls : public ::testing::TestWithParam<NormalMismatchCase> {};

TEST_P(MismatchedNormalCalls, IsRefusedOnEveryRankWritingNothing) {
  const NormalMismatchCase c = GetParam();
  const int kRanks = c.two_nodes ? 4 : 3;
  constexpr int64_t kTokens = 6;
  constexpr int kHidden = 256, kTopk = 2, kExperts = 12;  // a multiple of 3 and of 4 ranks
  std::mutex mutex;
  std::vector<Outcome> outcomes(kRanks);
  double seconds = 0;
  run_ranks(kRanks, [&](Group& group) {
    const int rank = group.rank();
    BufferOptions options;
    options.topology = c.two_nodes ? Topology{kRanks, 2} : Topology::single_node(kRanks);
    options.rank = rank;
    options.backend = Backend::cpu;
    options.config.timeout_seconds = kTimeoutSeconds;
    options.sizing.max_tokens_per_rank = kTokens;
    options.sizing.hidden = kHidden;
    options.sizing.topk = kTopk;
    options.sizing.num_experts = kExperts;
    if (c.in_heap) {
      options.sizing.normal_heap_input_tokens = kTokens;
      options.sizing.normal_heap_combine_rows = kRanks * kTokens;
    }
    Buffer buffer(options);
    buffer.connect(group.allgather(buffer.local_handle()));
    Tensor x = Tensor::empty(DType::bf16, {kTokens, kHidden});
    for (int64_t i = 0; i < kTokens * kHidden; ++i)
      x.as<uint16_t>()[i] = static_cast<uint16_t>(0x3f80 + i % 7);
    Tensor topk = Tensor::empty(DType::i64, {kTokens, kTopk});
    Tensor weights = Tensor::empty(DType::f32, {kTokens, kTopk});
    for (int64_t i = 0; i < kTokens * kTopk; ++i) {
      topk.as<int64_t>()[i] = (rank + i) % kExperts;
      weights.as<float>()[i] = 0.25f;
    }
    TensorView x_in = x;
    if (c.in_heap) {
      const NormalInputViews views = buffer.normal_input(kTokens, kHidden, DType::bf16);
      std::memcpy(views.x.data, x.data(), x.nbytes());
      x_in = views.x;
    }
    DispatchArgs dispatch;
    dispatch.x = x_in;
    dispatch.topk_idx = topk;
    dispatch.topk_weights = weights;
    dispatch.num_experts = kExperts;
    const DispatchResult earlier = buffer.dispatch(dispatch);
    const DispatchResult later = buffer.dispatch(dispatch);
    const bool earlier_on_this_rank =
        c.mismatch == NormalMismatch::combine_on_another_dispatchs_handle && rank == 0;
    const DispatchResult& first = earlier_on_this_rank ? earlier : later;
    CombineArgs combine;
    combine.handle = &first.handle;
    combine.x = first.recv_x;
    combine.topk_weights = first.recv_topk_weights;
    if (c.in_heap) {
      const NormalCombineInputViews views = buffer.normal_combine_input(first.handle);
      std::memcpy(views.x.data, first.recv_x.data(), first.recv_x.nbytes());
      std::memcpy(views.topk_weights.data, first.recv_topk_weights.data(), first.recv_topk_weights.nbytes());
      combine.x = views.x;
      combine.topk_weights = views.topk_weights;
    }
    Tensor poisoned_rows = Tensor::empty(DType::bf16, {first.recv_x.size(0), kHidden});
    Tensor poisoned_combined = Tensor::empty(DType::bf16, {kTokens, kHidden});
    std::memset(poisoned_rows.data(), 0xA5, poisoned_rows.nbytes());
    std::memset(poisoned_combined.data(), 0xA5, poisoned_combined.nbytes());
    DispatchArgs cached;
    cached.x = x_in;
    cached.cached_handle = &first.handle;
    cached.out_recv_x = poisoned_rows;
    combine.out_combined_x = poisoned_combined;
    Tensor poisoned_topk, poisoned_weights;
    group.barrier();
    const auto start = std::chrono::steady_clock::now();
    Outcome outcome;
    switch (c.mismatch) {
      case NormalMismatch::cached_dispatch_beside_combine:
        outcome =
            outcome_of([&] { rank == 0 ? (void)buffer.dispatch(cached) : (void)buffer.combine(combine); });
        break;
      case NormalMismatch::cached_dispatch_with_topk_on_one_rank:
        if (rank == 0) {
          cached.topk_idx = topk;
          poisoned_topk = Tensor::empty(DType::i64, {first.recv_x.size(0), kTopk});
          std::memset(poisoned_topk.data(), 0xA5, poisoned_topk.nbytes());
          cached.out_recv_topk_idx = poisoned_topk;
        }
        outcome = outcome_of([&] { buffer.dispatch(cached); });
        break;
      case NormalMismatch::weights_on_one_rank:
        if (rank != 0) combine.topk_weights = TensorView();
        outcome = outcome_of([&] { buffer.combine(combine); });
        break;
      case NormalMismatch::combine_on_another_dispatchs_handle:
        outcome = outcome_of([&] { buffer.combine(combine); });
        break;
    }
    const double taken = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    outcome.outputs_untouched = em::all_poison(poisoned_rows) && em::all_poison(poisoned_combined) &&
                                (!poisoned_topk.defined() || em::all_poison(poisoned_topk));
    std::lock_guard<std::mutex> lock(mutex);
    outcomes[rank] = outcome;
    seconds = std::max(seconds, taken);
  });
  expect_refused_on_every_rank(outcomes, seconds, "expected every rank to call with the same shape",
                               "recv_x, recv_topk_idx or combined_x");
}

std::vector<NormalMismatchCase> normal_mismatch_cases() {
  std::vector<NormalMismatchCase> cases;
  for (NormalMismatch mismatch :
       {NormalMismatch::cached_dispatch_beside_combine, NormalMismatch::cached_dispatch_with_topk_on_one_rank,
        NormalMismatch::weights_on_one_rank, NormalMismatch::combine_on_another_dispatchs_handle}) {
    for (bool in_heap : {false, true}) cases.push_back(NormalMismatchCase{mismatch, in_heap});
    cases.push_back(NormalMismatchCase{mismatch, false, true});  // in place is one node only
  }
  return cases;
}

std::string normal_mismatch_name(const ::testing::TestParamInfo<NormalMismatchCase>& info) {
  return normal_mismatch_label(info.param);
}

INSTANTIATE_TEST_SUITE_P(Mismatches, MismatchedNormalCalls, ::testing::ValuesIn(normal_mismatch_cases()),
                         normal_mismatch_name);

INSTANTIATE_TEST_SUITE_P(Engines, MismatchedCalls, ::testing::Values(Engine::low_latency, Engine::symmetric),
                         [](const ::testing::TestParamInfo<Engine>& info) {
                           return std::string(engine_name(info.param));
                         });

}  // namespace
}  // namespace switchyard
