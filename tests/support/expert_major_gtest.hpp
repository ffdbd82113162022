#pragma once
// The GoogleTest side of the expert-major test support: reporting what rank threads collected, and
// the bad-input check that the CPU suites of both engines run on a SingleRank.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "support/expert_major_cases.hpp"
#include "support/test_seed.hpp"

namespace switchyard::testing::expert_major {

// One failure per collected line, then the seed that reproduces them.
inline void expect_none(const Failures& failures, uint64_t seed) {
  const std::vector<std::string> lines = failures.lines();
  for (const auto& line : lines) ADD_FAILURE() << line;
  if (!lines.empty()) ADD_FAILURE() << "seed " << seed << " (set SWITCHYARD_TEST_SEED to reproduce)";
}

// The call timed out (a TimeoutError) after about `timeout_seconds`, and well before `at_most_seconds`:
// nothing hung.
inline void expect_timed_out(const Caught& caught, double timeout_seconds, double at_most_seconds) {
  EXPECT_TRUE(caught.timed_out) << caught.message;
  EXPECT_GE(caught.seconds, timeout_seconds * 0.5) << caught.message;
  EXPECT_LT(caught.seconds, at_most_seconds) << caught.message;
}

// `message`, the CapacityError of `rank` for the first expert of `data` past c.capacity, names the
// argument, the expert and its rank, the expert's rows and the capacity.
inline void expect_capacity_error(const std::string& message, const Case& c,
                                  const std::vector<workload::RankData>& data, int rank) {
  const int64_t rows = first_overflow(data, c.num_experts, c.capacity).second;
  EXPECT_EQ(message.rfind("expert_capacity:", 0), 0u) << "rank " << rank << ": " << message;
  EXPECT_NE(message.find(overflow_names(c, data)), std::string::npos) << "rank " << rank << ": " << message;
  EXPECT_NE(message.find("got " + std::to_string(rows)), std::string::npos) << message;
  EXPECT_NE(message.find("at most " + std::to_string(c.capacity)), std::string::npos) << message;
}

// `rounds` rounds per rank of two dispatches, then the two combines in the other order, with no
// synchronisation between ranks: consecutive calls use alternate halves (and, for symmetric, the
// barrier's phases, or the pull combine's records and done words) without racing. Every output is
// checked against the reference.
inline void expect_back_to_back_calls_match(Engine engine, Regions regions, const std::string& seed_name,
                                            int rounds, SymmetricCombine path = SymmetricCombine::automatic) {
  Case c = with_symmetric_combine(make("back_to_back", 4, {5, 3, 5, 2}, 5, 3, 8, 128), path);
  const uint64_t seed = testing::seed_for(seed_name);
  const Expected first = expected_for(c, seed);
  const Expected second = expected_for(c, seed + 1);
  Failures failures;
  with_buffers(c, regions, [&](Group& group, Buffer& buffer) {
    const int rank = group.rank();
    for (int round = 0; round < rounds; ++round) {
      auto a = dispatch_with(engine, buffer, dispatch_args(c, first.data[rank]));
      auto b = dispatch_with(engine, buffer, dispatch_args(c, second.data[rank]));
      check_dispatch(a, first.dispatched[rank], "the reference", rank, failures);
      check_dispatch(b, second.dispatched[rank], "the reference", rank, failures);
      Tensor ya = expert_outputs(a.recv_x, {}, rank);
      Tensor yb = expert_outputs(b.recv_x, {}, rank);
      auto combined_b = combine_with(engine, buffer, combine_args(second.data[rank], b.handle, yb));
      auto combined_a = combine_with(engine, buffer, combine_args(first.data[rank], a.handle, ya));
      compare(combined_a.combined_x, first.combined[rank], "combined_x (first)", rank, failures);
      compare(combined_b.combined_x, second.combined[rank], "combined_x (second)", rank, failures);
    }
  });
  expect_none(failures, seed);
}

// The caller's out_layout_range and out_src_info are borrowed for the dispatch only (with a hook, until
// the hook has run): each rank dispatches into outputs of its own, then overwrites those two with other
// routing (nothing sent anywhere) and frees every output before the combine, which must still route as
// the dispatch did. With and without the hook split where the engine has one.
inline void expect_combine_routes_as_dispatched_after_the_callers_outputs_were_freed(
    Engine engine, Regions regions, const std::string& seed_name,
    SymmetricCombine path = SymmetricCombine::automatic) {
  constexpr double kTimeoutSeconds = 10;  // a combine routed by the overwritten outputs never completes
  Case c = with_symmetric_combine(make("freed_outputs", 3, {6, 4, 5}, 6, 3, 6), path);
  const uint64_t seed = testing::seed_for(seed_name);
  const Expected expected = expected_for(c, seed);
  Failures failures;
  const std::vector<bool> hook_splits =
      engine == Engine::low_latency ? std::vector<bool>{false, true} : std::vector<bool>{false};
  with_buffers(
      c, regions,
      [&](Group& group, Buffer& buffer) {
        const int rank = group.rank();
        for (const bool hook : hook_splits) {
          auto outputs =
              std::make_unique<PoisonedOutputs>(poisoned_outputs(c, expected.data[rank].x.size(0)));
          LowLatencyDispatchArgs args = dispatch_args(c, expected.data[rank]);
          outputs->attach(args);
          args.return_recv_hook = hook;
          auto dispatched = dispatch_with(engine, buffer, args);
          if (hook) dispatched.hook();
          check_dispatch(dispatched, expected.dispatched[rank], "the reference", rank, failures);
          Tensor y = expert_outputs(dispatched.recv_x, {}, rank);
          std::memset(outputs->layout_range.data(), 0, outputs->layout_range.nbytes());
          std::memset(outputs->src_info.data(), 0, outputs->src_info.nbytes());
          outputs.reset();
          auto combined =
              combine_with(engine, buffer, combine_args(expected.data[rank], dispatched.handle, y));
          compare(combined.combined_x, expected.combined[rank],
                  std::string("combined_x") + (hook ? " (hooks)" : ""), rank, failures);
        }
      },
      kTimeoutSeconds);
  expect_none(failures, seed);
}

// Spoils a combine's arguments.
using SpoilCombine = std::function<void(LowLatencyCombineArgs&)>;

// The bad combine input that either engine refuses (one interface, one validation): x, topk_idx,
// topk_weights and out_combined_x that do not match the handle, no handle, biases of the wrong
// dtype or shape, and a handle from another buffer; each an InvalidArgument whose message starts with
// the argument's name, and none writes out_combined_x. `more(combine_refused)` adds the engine's
// own cases; a -1 slot is still accepted afterwards.
inline void expect_interface_bad_combine_refused(
    Engine engine, Regions regions,
    const std::function<void(const std::function<void(const SpoilCombine&, const std::string&)>&)>& more =
        {}) {
  SingleRank single(regions);
  auto dispatched = dispatch_with(engine, *single.buffer, dispatch_args(single.c, single.data));
  Tensor y = expert_outputs(dispatched.recv_x, {}, 0);
  Tensor out = poisoned(DType::bf16, {4, 256});
  const auto combine_refused = [&](const SpoilCombine& spoil, const std::string& names) {
    LowLatencyCombineArgs args = combine_args(single.data, dispatched.handle, y);
    args.out_combined_x = out;
    spoil(args);
    const std::string message = refused<InvalidArgument>([&] { combine_with(engine, *single.buffer, args); });
    EXPECT_EQ(message.rfind(names, 0), 0u)
        << "expected a message starting with \"" << names << "\", got: " << message;
  };
  TensorView short_y = y.view();
  short_y.shape[1] -= 1;
  combine_refused([&](LowLatencyCombineArgs& a) { a.x = short_y; }, "x:");
  combine_refused([&](LowLatencyCombineArgs& a) { a.handle = nullptr; }, "handle:");
  Tensor idx_changed = Tensor::empty(DType::i64, {4, 2});
  std::memcpy(idx_changed.data(), single.data.topk_idx.data(), idx_changed.nbytes());
  idx_changed.as<int64_t>()[0] = (idx_changed.as<int64_t>()[0] + 1) % 4;
  combine_refused([&](LowLatencyCombineArgs& a) { a.topk_idx = idx_changed; }, "topk_idx:");
  Tensor weights_short = Tensor::empty(DType::f32, {3, 2});
  combine_refused([&](LowLatencyCombineArgs& a) { a.topk_weights = weights_short; }, "topk_weights:");
  Tensor out_wide = poisoned(DType::bf16, {4, 128});
  combine_refused([&](LowLatencyCombineArgs& a) { a.out_combined_x = out_wide; }, "out_combined_x:");
  // Biases are bf16 [num_tokens, hidden of x].
  Tensor bias_f32 = Tensor::empty(DType::f32, {4, 256});
  combine_refused([&](LowLatencyCombineArgs& a) { a.bias0 = bias_f32; }, "bias0:");
  Tensor bias_short = Tensor::empty(DType::bf16, {3, 256});
  combine_refused([&](LowLatencyCombineArgs& a) { a.bias1 = bias_short; }, "bias1:");
  combine_refused([&](LowLatencyCombineArgs& a) { a.bias0 = out_wide; }, "bias0:");
  if (more) more(combine_refused);
  EXPECT_TRUE(all_poison(out)) << "out_combined_x was written";

  // A handle from another buffer.
  SingleRank other(regions);
  LowLatencyCombineArgs args = combine_args(single.data, dispatched.handle, y);
  EXPECT_EQ(refused<InvalidArgument>([&] { combine_with(engine, *other.buffer, args); }).rfind("handle:", 0),
            0u);
  // Leaving a slot out (-1) is allowed.
  Tensor idx_dropped = Tensor::empty(DType::i64, {4, 2});
  std::memcpy(idx_dropped.data(), single.data.topk_idx.data(), idx_dropped.nbytes());
  idx_dropped.as<int64_t>()[1] = -1;
  args.topk_idx = idx_dropped;
  EXPECT_NO_THROW(combine_with(engine, *single.buffer, args));
}

// Spoils a SingleRank's inputs or a dispatch's arguments.
using Spoil = std::function<void(SingleRank&, LowLatencyDispatchArgs&)>;

// `engine`'s dispatch with spoiled input is refused with an InvalidArgument whose message starts
// with `names`, writes none of the outputs, and leaves the buffer usable.
inline void expect_dispatch_refused(Engine engine, Regions regions, const Spoil& spoil,
                                    const std::string& names) {
  SingleRank single(regions);
  LowLatencyDispatchArgs args = single.args();
  spoil(single, args);
  const std::string message = refused<InvalidArgument>([&] { dispatch_with(engine, *single.buffer, args); });
  EXPECT_EQ(message.rfind(names, 0), 0u)
      << "expected a message starting with \"" << names << "\", got: " << message;
  EXPECT_TRUE(single.untouched()) << "outputs were written";
  single.draw_inputs();
  EXPECT_NO_THROW(dispatch_with(engine, *single.buffer, single.args())) << "the buffer is still usable";
}

// The bad input that the dispatch of either engine refuses (one interface, one validation), each
// through expect_dispatch_refused.
inline void expect_interface_bad_input_refused(Engine engine, Regions regions) {
  auto expect_refused = [&](const Spoil& spoil, const std::string& names) {
    expect_dispatch_refused(engine, regions, spoil, names);
  };
  Tensor x5 = Tensor::empty(DType::bf16, {5, 256});
  Tensor idx5 = Tensor::empty(DType::i64, {5, 2});
  std::fill(idx5.as<int64_t>(), idx5.as<int64_t>() + 10, 0);
  expect_refused(
      [&](SingleRank&, LowLatencyDispatchArgs& a) {
        a.x = x5;
        a.topk_idx = idx5;
      },
      "x:");
  expect_refused([](SingleRank&, LowLatencyDispatchArgs& a) { a.max_tokens_per_rank = 5; },
                 "max_tokens_per_rank:");
  expect_refused([](SingleRank&, LowLatencyDispatchArgs& a) { a.max_tokens_per_rank = 0; },
                 "max_tokens_per_rank:");
  expect_refused([](SingleRank& s, LowLatencyDispatchArgs&) { s.data.topk_idx.as<int64_t>()[1] = 4; },
                 "topk_idx:");
  expect_refused([](SingleRank& s, LowLatencyDispatchArgs&) { s.data.topk_idx.as<int64_t>()[1] = -2; },
                 "topk_idx:");
  // Four rows of one expert from one rank fit; five (a duplicate slot) do not.
  expect_refused(
      [](SingleRank& s, LowLatencyDispatchArgs&) {
        int64_t* ids = s.data.topk_idx.as<int64_t>();
        for (int i = 0; i < 5; ++i) ids[i] = 1;
      },
      "topk_idx:");
  Tensor x_f32 = Tensor::empty(DType::f32, {4, 256});
  expect_refused([&](SingleRank&, LowLatencyDispatchArgs& a) { a.x = x_f32; }, "x:");
  Tensor x_192 = Tensor::empty(DType::bf16, {4, 192});
  expect_refused(
      [&](SingleRank&, LowLatencyDispatchArgs& a) {
        a.x = x_192;
        a.use_fp8 = true;
      },
      "x:");
  Tensor x_wide = Tensor::empty(DType::bf16, {4, 512});  // sizing.hidden is 256
  expect_refused([&](SingleRank&, LowLatencyDispatchArgs& a) { a.x = x_wide; }, "x:");
  expect_refused([](SingleRank&, LowLatencyDispatchArgs& a) { a.use_ue8m0 = true; }, "use_ue8m0:");
  expect_refused([](SingleRank&, LowLatencyDispatchArgs& a) { a.num_experts = 8; }, "num_experts:");
  Tensor idx_wide = Tensor::empty(DType::i64, {4, 3});  // sizing.topk is 2
  std::fill(idx_wide.as<int64_t>(), idx_wide.as<int64_t>() + 12, 0);
  expect_refused([&](SingleRank&, LowLatencyDispatchArgs& a) { a.topk_idx = idx_wide; }, "topk_idx:");
  Tensor wrong_out = poisoned(DType::bf16, {4, 3, 256});
  expect_refused([&](SingleRank&, LowLatencyDispatchArgs& a) { a.out_recv_x = wrong_out; }, "out_recv_x:");
}

// Combine biases (docs/deep_ep.md, "Combine bias"): the CPU `engine`'s combine with bias0, with bias1
// alone and with both equals the reference's, whose accumulator starts at bias0 + bias1.
inline void expect_biased_combines_match(Engine engine, const Case& c, const std::string& seed_name) {
  const uint64_t seed = testing::seed_for(seed_name);
  const Expected plain = expected_for(c, seed);
  for (auto [first, second] : {std::pair{true, false}, {false, true}, {true, true}}) {
    SCOPED_TRACE(std::string("bias0 ") + (first ? "given" : "absent") + ", bias1 " +
                 (second ? "given" : "absent"));
    const Expected expected = with_biases(c, plain, seed, first, second);
    const std::vector<Outputs> outputs = run_cpu_engine(engine, c, expected);
    Failures failures;
    for (int rank = 0; rank < c.ranks; ++rank) {
      compare(outputs[rank].combined_x, expected.combined[rank], "combined_x", rank, failures);
    }
    expect_none(failures, seed);
  }
}

}  // namespace switchyard::testing::expert_major
