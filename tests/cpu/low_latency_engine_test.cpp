// The CPU `low_latency` engine against the reference, bit for bit, with ranks as threads: expert-major
// dispatch (bf16 and fp8), the weighted FMA combine, hooks, the double buffer, zero-copy combine,
// timeouts and bad input (DESIGN.md, "low_latency and symmetric interface: expert-major").
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "support/expert_major_gtest.hpp"
#include "support/normal_round_trip.hpp"
#include "support/test_seed.hpp"
#include "switchyard/buffer.hpp"
#include "switchyard/errors.hpp"
#include "switchyard/group.hpp"
#include "switchyard/reference.hpp"
#include "workload/workload.hpp"

namespace switchyard::testing::expert_major {
namespace {

// Every buffer here has the low_latency region only.
constexpr Regions kRegions = Regions::low_latency;

// ---- bitwise round trips ------------------------------------------------------------------------

class LowLatencyRoundTrip : public ::testing::TestWithParam<Case> {};

TEST_P(LowLatencyRoundTrip, DispatchAndCombineMatchTheReferenceBitwise) {
  const Case& c = GetParam();
  const uint64_t seed = testing::seed_for("low_latency/" + c.name);
  const Expected expected = expected_for(c, seed);
  Failures failures;
  with_buffers(c, kRegions, [&](Group& group, Buffer& buffer) {
    const int rank = group.rank();
    const workload::RankData& data = expected.data[rank];
    // Preallocated, poisoned outputs on even ranks; the library allocates on odd ones.
    const PoisonedOutputs out = rank % 2 == 0 ? poisoned_outputs(c, data.x.size(0)) : PoisonedOutputs();
    LowLatencyDispatchArgs args = dispatch_args(c, data);
    out.attach(args);
    LowLatencyDispatchResult dispatched = buffer.low_latency_dispatch(args);
    check_dispatch(dispatched, expected.dispatched[rank], "the reference", rank, failures);
    if (rank % 2 == 0 && dispatched.recv_x.data() != out.recv_x.data())
      failures.add(rank, "out_recv_x was not used");
    if (c.fp8.use_ue8m0) return;

    Tensor y = expert_outputs(dispatched.recv_x, dispatched.recv_x_scales, rank);
    LowLatencyCombineArgs cargs = combine_args(data, dispatched.handle, y);
    out.attach(cargs);
    LowLatencyCombineResult combined = buffer.low_latency_combine(cargs);
    compare(combined.combined_x, expected.combined[rank], "combined_x", rank, failures);
  });
  expect_none(failures, seed);
}

std::vector<Case> cases() {
  using workload::Routing;
  return {
      // R = 1, 2, 3, 4 and 8; k from 1 to 9.
      make("r1_k1", 1, {5}, 8, 1, 4), make("r2_k2", 2, {7, 3}, 8, 2, 8),
      make("r3_k9", 3, {6, 0, 4}, 6, 9, 18, 128), make("r4_k4", 4, {8, 5, 8, 1}, 8, 4, 16),
      make("r8_k8", 8, {4, 3, 0, 4, 2, 4, 1, 4}, 4, 8, 16, 128),
      make("r2_k3_hidden_not_a_multiple_of_128", 2, {5, 4}, 5, 3, 4, 72),
      make("r4_zero_tokens", 4, {0, 0, 0, 0}, 4, 2, 8),
      with_routing(make("r2_all_invalid", 2, {4, 4}, 4, 3, 4), Routing::all_invalid),
      // Every token of every rank on one expert: its rows fill R * max exactly.
      with_routing(make("r4_one_expert_full", 4, {6, 6, 6, 6}, 6, 2, 8), Routing::one_expert),
      with_fp8(make("r2_fp8", 2, {6, 5}, 6, 4, 8, 384), false, false),
      with_fp8(make("r3_fp8_round_scale", 3, {5, 6, 2}, 6, 3, 6, 256), true, false),
      with_fp8(make("r2_fp8_ue8m0_padded", 2, {6, 4}, 6, 2, 4, 640), false, true),  // 5 scales: 2 words
  };
}

INSTANTIATE_TEST_SUITE_P(Shapes, LowLatencyRoundTrip, ::testing::ValuesIn(cases()),
                         [](const auto& info) { return info.param.name; });

// Combine biases: the accumulator starts at bias0 + bias1, then the weighted slots' multiply-adds.
class LowLatencyBiasedCombine : public ::testing::TestWithParam<Case> {};

TEST_P(LowLatencyBiasedCombine, CombineWithBiasesMatchesTheReferenceBitwise) {
  expect_biased_combines_match(Engine::low_latency, GetParam(), "low_latency/bias/" + GetParam().name);
}

INSTANTIATE_TEST_SUITE_P(Shapes, LowLatencyBiasedCombine,
                         ::testing::Values(make("r1_k1", 1, {5}, 8, 1, 4),
                                           make("r3_k9", 3, {6, 0, 4}, 6, 9, 18, 128),
                                           make("r4_zero_tokens", 4, {0, 0, 0, 0}, 4, 2, 8),
                                           with_routing(make("r2_all_invalid", 2, {4, 4}, 4, 3, 4),
                                                        workload::Routing::all_invalid),
                                           with_fp8(make("r2_fp8", 2, {6, 5}, 6, 4, 8, 384), false, false)),
                         [](const auto& info) { return info.param.name; });

// With a hook, the biases are read when the receive half runs.
TEST(LowLatency, HookSplitWithBiasesGivesTheReferenceBits) {
  const Case c = make("hook_biases", 2, {6, 4}, 6, 3, 8);
  const uint64_t seed = testing::seed_for("low_latency/hook_biases");
  const Expected expected = with_biases(c, expected_for(c, seed), seed, true, true);
  const std::vector<Outputs> outputs =
      run_cpu_engine(Engine::low_latency, c, expected, /*receive_hook=*/true);
  Failures failures;
  for (int rank = 0; rank < c.ranks; ++rank) {
    compare(outputs[rank].combined_x, expected.combined[rank], "combined_x", rank, failures);
  }
  expect_none(failures, seed);
}

// ---- LogFMT-10 combine (use_logfmt) --------------------------------------------------------------

class LowLatencyLogfmtCombine : public ::testing::TestWithParam<Case> {};

// The CPU engine's LogFMT combine equals the reference's bit for bit, plain, with both biases and
// through a receive hook; and differs from the bf16 combine (the format is lossy), so the option is
// not ignored.
TEST_P(LowLatencyLogfmtCombine, MatchesTheReferenceBitwiseAndDiffersFromBf16) {
  const Case& c = GetParam();
  const uint64_t seed = testing::seed_for("low_latency/logfmt/" + c.name);
  const Expected drawn = with_rows_in_both_formats(expected_for(c, seed));
  const auto [cast, plain] = cast_and_plain_blocks(drawn);
  ASSERT_GT(cast, 0) << "no block of the expert outputs is cast: the test would not see LogFMT";
  for (bool biased : {false, true}) {
    for (bool hook : {false, true}) {
      SCOPED_TRACE(std::string(biased ? "biases" : "no biases") + (hook ? ", hook" : ""));
      const Expected expected = with_logfmt(c, biased ? with_biases(c, drawn, seed, true, true) : drawn);
      const Expected bf16 =
          biased ? with_biases(c, drawn, seed, true, true) : with_biases(c, drawn, seed, false, false);
      bool differs = false;
      for (int rank = 0; rank < c.ranks; ++rank) {
        differs = differs || std::memcmp(expected.combined[rank].data(), bf16.combined[rank].data(),
                                         expected.combined[rank].nbytes()) != 0;
      }
      EXPECT_TRUE(differs || c.ranks * c.max_tokens == 0) << "the LogFMT combine equals the bf16 one";
      ASSERT_TRUE(expected.use_logfmt);  // run_cpu_engine passes it on (attach_biases)
      const std::vector<Outputs> outputs = run_cpu_engine(Engine::low_latency, c, expected, hook);
      Failures failures;
      for (int rank = 0; rank < c.ranks; ++rank) {
        compare(outputs[rank].combined_x, expected.combined[rank], "combined_x", rank, failures);
      }
      expect_none(failures, seed);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, LowLatencyLogfmtCombine,
                         ::testing::Values(make("r1_k1", 1, {5}, 8, 1, 4),
                                           make("r3_k9", 3, {6, 0, 4}, 6, 9, 18, 128),
                                           make("r4_h384", 4, {7, 3, 0, 7}, 7, 4, 8, 384),
                                           with_fp8(make("r2_fp8", 2, {6, 5}, 6, 4, 8, 384), false, false)),
                         [](const auto& info) { return info.param.name; });

// use_logfmt with zero_copy, or with a hidden size LogFMT's blocks do not divide, is refused by name
// before anything is written; the symmetric engine refuses it.
TEST(LowLatencyErrors, LogfmtRefusesZeroCopyAndHiddenSizesOffItsBlocks) {
  SingleRank single(kRegions);
  auto dispatched = single.buffer->low_latency_dispatch(dispatch_args(single.c, single.data));
  Tensor y = expert_outputs(dispatched.recv_x, {}, 0);
  Tensor out = poisoned(DType::bf16, {4, 256});
  LowLatencyCombineArgs args = combine_args(single.data, dispatched.handle, y);
  args.out_combined_x = out;
  args.use_logfmt = true;
  args.zero_copy = true;
  args.x = TensorView();
  std::string message = refused<InvalidArgument>([&] { single.buffer->low_latency_combine(args); });
  EXPECT_EQ(message.rfind("use_logfmt:", 0), 0u) << message;
  // A y of hidden 136 (a multiple of 8, not of 128).
  TensorView narrow = y.view();
  narrow.shape[2] = 136;
  args = combine_args(single.data, dispatched.handle, narrow);
  args.out_combined_x = out;
  args.use_logfmt = true;
  message = refused<InvalidArgument>([&] { single.buffer->low_latency_combine(args); });
  EXPECT_EQ(message.rfind("use_logfmt:", 0), 0u) << message;
  const uint8_t* bytes = out.as<const uint8_t>();
  for (size_t i = 0; i < out.nbytes(); ++i) ASSERT_EQ(bytes[i], 0xA5) << "out_combined_x was written";

  SingleRank symmetric(Regions::symmetric);
  auto received = symmetric.buffer->symmetric_dispatch(dispatch_args(symmetric.c, symmetric.data));
  Tensor symmetric_y = expert_outputs(received.recv_x, {}, 0);
  LowLatencyCombineArgs symmetric_args = combine_args(symmetric.data, received.handle, symmetric_y);
  symmetric_args.use_logfmt = true;
  message = refused<Unsupported>([&] { symmetric.buffer->symmetric_combine(symmetric_args); });
  EXPECT_EQ(message.rfind("symmetric_combine: use_logfmt", 0), 0u) << message;
}

TEST(LowLatency, DuplicateExpertIdsSendOneRowPerSlot) {
  Case c = make("duplicates", 2, {5, 4}, 8, 3, 4);
  const uint64_t seed = testing::seed_for("low_latency/duplicates");
  std::vector<workload::RankData> data = workload::generate(shape_of(c), seed);
  for (auto& rank_data : data) {
    int64_t* ids = rank_data.topk_idx.as<int64_t>();
    for (int64_t t = 0; t < rank_data.topk_idx.size(0); ++t)
      ids[t * 3 + 2] = ids[t * 3] = t % 4;  // slots 0 and 2 agree
  }
  const Expected expected = expected_from(c, std::move(data));
  Failures failures;
  with_buffers(c, kRegions, [&](Group& group, Buffer& buffer) {
    const int rank = group.rank();
    auto dispatched = buffer.low_latency_dispatch(dispatch_args(c, expected.data[rank]));
    check_dispatch(dispatched, expected.dispatched[rank], "the reference", rank, failures);
    Tensor y = expert_outputs(dispatched.recv_x, {}, rank);
    auto combined = buffer.low_latency_combine(combine_args(expected.data[rank], dispatched.handle, y));
    compare(combined.combined_x, expected.combined[rank], "combined_x", rank, failures);
  });
  expect_none(failures, seed);
}

// ---- hooks, double buffer, zero copy, determinism -------------------------------------------------

TEST(LowLatency, HookSplitGivesTheSameBits) {
  Case c = make("hooks", 3, {6, 4, 5}, 6, 3, 6);
  const uint64_t seed = testing::seed_for("low_latency/hooks");
  const Expected expected = expected_for(c, seed);
  Failures failures;
  with_buffers(c, kRegions, [&](Group& group, Buffer& buffer) {
    const int rank = group.rank();
    LowLatencyDispatchArgs args = dispatch_args(c, expected.data[rank]);
    args.return_recv_hook = true;
    LowLatencyDispatchResult dispatched = buffer.low_latency_dispatch(args);
    if (!dispatched.hook) failures.add(rank, "no dispatch hook");
    // Something else meanwhile: the peers' sends land while this rank is busy.
    std::this_thread::sleep_for(std::chrono::milliseconds(5 * rank));
    dispatched.hook();
    check_dispatch(dispatched, expected.dispatched[rank], "the reference", rank, failures);
    EXPECT_THROW(dispatched.hook(), InvalidArgument) << "a hook runs once";

    Tensor y = expert_outputs(dispatched.recv_x, {}, rank);
    LowLatencyCombineArgs cargs = combine_args(expected.data[rank], dispatched.handle, y);
    cargs.return_recv_hook = true;
    LowLatencyCombineResult combined = buffer.low_latency_combine(cargs);
    if (!combined.hook) failures.add(rank, "no combine hook");
    // Until the hook runs, no further low-latency call may start.
    EXPECT_THROW(buffer.low_latency_dispatch(dispatch_args(c, expected.data[rank])), InvalidArgument);
    std::this_thread::sleep_for(std::chrono::milliseconds(5 * (2 - rank)));
    combined.hook();
    compare(combined.combined_x, expected.combined[rank], "combined_x", rank, failures);
  });
  expect_none(failures, seed);
}

TEST(LowLatency, CombineRoutesAsDispatchedAfterTheCallersOutputsWereFreed) {
  expect_combine_routes_as_dispatched_after_the_callers_outputs_were_freed(Engine::low_latency, kRegions,
                                                                           "low_latency/freed_outputs");
}

TEST(LowLatency, BackToBackCallsUseAlternateHalvesWithoutRacing) {
  expect_back_to_back_calls_match(Engine::low_latency, kRegions, "low_latency/back_to_back", 4);
}

TEST(LowLatency, ZeroCopyCombineReadsTheOutputsWrittenIntoTheBuffer) {
  Case c = make("zero_copy", 2, {6, 5}, 6, 2, 4);
  const uint64_t seed = testing::seed_for("low_latency/zero_copy");
  const Expected expected = expected_for(c, seed);
  Failures failures;
  with_buffers(c, kRegions, [&](Group& group, Buffer& buffer) {
    const int rank = group.rank();
    auto dispatched = buffer.low_latency_dispatch(dispatch_args(c, expected.data[rank]));
    TensorView in_buffer = buffer.low_latency_combine_buffer(dispatched.handle);
    if (in_buffer.dtype != DType::bf16 || in_buffer.ndim != 3 || in_buffer.shape[0] != 2 ||
        in_buffer.shape[1] != 12 || in_buffer.shape[2] != c.hidden) {
      failures.add(rank, "combine buffer: unexpected " + in_buffer.describe());
      return;
    }
    Tensor y = expert_outputs(dispatched.recv_x, {}, rank);
    std::memcpy(in_buffer.data, y.data(), y.nbytes());
    LowLatencyCombineArgs args = combine_args(expected.data[rank], dispatched.handle, TensorView());
    args.zero_copy = true;
    auto combined = buffer.low_latency_combine(args);
    compare(combined.combined_x, expected.combined[rank], "combined_x", rank, failures);
  });
  expect_none(failures, seed);
}

TEST(LowLatency, SameInputsGiveTheSameBitsEveryTime) {
  Case c = make("determinism", 3, {6, 6, 6}, 6, 4, 6, 256);
  c.fp8.use_fp8 = true;
  const uint64_t seed = testing::seed_for("low_latency/determinism");
  const Expected expected = expected_for(c, seed);
  Failures failures;
  with_buffers(c, kRegions, [&](Group& group, Buffer& buffer) {
    const int rank = group.rank();
    auto first = buffer.low_latency_dispatch(dispatch_args(c, expected.data[rank]));
    Tensor y = expert_outputs(first.recv_x, first.recv_x_scales, rank);
    auto combined_first = buffer.low_latency_combine(combine_args(expected.data[rank], first.handle, y));
    auto second = buffer.low_latency_dispatch(dispatch_args(c, expected.data[rank]));
    auto combined_second = buffer.low_latency_combine(combine_args(expected.data[rank], second.handle, y));
    compare(second.src_info, first.src_info, "src_info", rank, failures);
    compare(second.layout_range, first.layout_range, "layout_range", rank, failures);
    check_dispatch(second, expected.dispatched[rank], "the reference", rank, failures);
    check_dispatch(first, expected.dispatched[rank], "the reference", rank, failures);
    compare(combined_second.combined_x, combined_first.combined_x, "combined_x (second run)", rank, failures);
  });
  expect_none(failures, seed);
}

TEST(LowLatency, SharesABufferWithTheNormalEngine) {
  Case c = make("with_normal", 2, {6, 6}, 6, 2, 4);
  const workload::Shape shape = shape_of(c);
  const uint64_t seed = testing::seed_for("low_latency/with_normal");
  const std::vector<workload::RankData> data = workload::generate(shape, seed);
  const testing::Expected normal_expected = testing::compute_expected(shape, data, 1);
  const Expected expected = expected_for(c, seed);
  std::vector<std::string> normal_failures;
  std::mutex mutex;
  Failures failures;
  run_ranks(2, [&](Group& group) {
    const int rank = group.rank();
    BufferOptions options = buffer_options(c, rank, kRegions);
    options.sizing = testing::sizing_for(shape);
    options.sizing.low_latency_max_tokens_per_rank = c.max_tokens;
    Buffer buffer(options);
    buffer.connect(group.allgather(buffer.local_handle()));
    auto dispatched = buffer.low_latency_dispatch(dispatch_args(c, expected.data[rank]));
    // A whole normal round trip between the low-latency dispatch and its combine.
    testing::RankRun run = testing::run_round_trip(buffer, shape, data[rank], normal_expected, {});
    std::vector<std::string> mine;
    testing::check_combine(run, shape, normal_expected, rank, true, &mine);
    Tensor y = expert_outputs(dispatched.recv_x, {}, rank);
    auto combined = buffer.low_latency_combine(combine_args(expected.data[rank], dispatched.handle, y));
    check_dispatch(dispatched, expected.dispatched[rank], "the reference", rank, failures);
    compare(combined.combined_x, expected.combined[rank], "combined_x", rank, failures);
    {
      std::lock_guard<std::mutex> lock(mutex);
      normal_failures.insert(normal_failures.end(), mine.begin(), mine.end());
    }
    group.barrier();
  });
  for (const auto& line : normal_failures) ADD_FAILURE() << "normal: " << line;
  expect_none(failures, seed);
}

// ---- timeouts -----------------------------------------------------------------------------------

TEST(LowLatencyTimeouts, DispatchWithoutItsPeerTimesOutNamingRankAndRole) {
  constexpr double kTimeout = 1.0;
  Case c = make("timeout", 2, {4, 4}, 4, 2, 4);
  const Expected expected = expected_for(c, 7);
  PeerGate gate;
  Caught caught;
  bool refused_after = false;
  run_ranks(2, [&](Group& group) {
    Buffer buffer(buffer_options(c, group.rank(), kRegions, kTimeout));
    buffer.connect(group.allgather(buffer.local_handle()));
    if (group.rank() == 1) {
      gate.wait();  // never calls
      return;
    }
    const auto opener = gate.open_on_exit();
    caught = catch_timeout([&] { buffer.low_latency_dispatch(dispatch_args(c, expected.data[0])); });
    refused_after =
        refused_after_timeout([&] { buffer.low_latency_dispatch(dispatch_args(c, expected.data[0])); });
  });
  const std::string& message = caught.message;
  SCOPED_TRACE("message: " + message);
  expect_timed_out(caught, kTimeout, 15.0);
  EXPECT_NE(message.find("rank 0"), std::string::npos);
  EXPECT_NE(message.find("low_latency dispatch receiver"), std::string::npos);
  EXPECT_NE(message.find("source rank 1"), std::string::npos);
  EXPECT_TRUE(refused_after);
}

// ---- bad input ----------------------------------------------------------------------------------

// Bad input to the low_latency dispatch (see expect_dispatch_refused).
void expect_refused(const Spoil& spoil, const std::string& names) {
  expect_dispatch_refused(Engine::low_latency, kRegions, spoil, names);
}

TEST(LowLatencyErrors, DispatchRefusesBadInputNamingTheArgument) {
  expect_interface_bad_input_refused(Engine::low_latency, kRegions);
  // And more: hidden not a multiple of 8, round_scale without fp8, topk_idx rows != x rows, and
  // preallocated scales of the wrong shape.
  Tensor x_odd = Tensor::empty(DType::bf16, {4, 60});
  expect_refused([&](SingleRank&, LowLatencyDispatchArgs& a) { a.x = x_odd; }, "x:");
  expect_refused([](SingleRank&, LowLatencyDispatchArgs& a) { a.round_scale = true; }, "round_scale:");
  Tensor idx_rows = Tensor::empty(DType::i64, {3, 2});
  std::fill(idx_rows.as<int64_t>(), idx_rows.as<int64_t>() + 6, 0);
  expect_refused([&](SingleRank&, LowLatencyDispatchArgs& a) { a.topk_idx = idx_rows; }, "topk_idx:");
  Tensor scales = poisoned(DType::f32, {4, 4, 2});
  expect_refused([&](SingleRank&, LowLatencyDispatchArgs& a) { a.out_recv_x_scales = scales; },
                 "out_recv_x_scales:");
}

TEST(LowLatencyErrors, BufferWithoutALowLatencyRegionRefusesTheCalls) {
  Case c = make("no_region", 1, {4}, 4, 2, 4);
  BufferOptions options = buffer_options(c, 0, kRegions);
  options.sizing.low_latency_max_tokens_per_rank = 0;
  Buffer buffer(options);
  buffer.connect({buffer.local_handle()});
  const workload::RankData data = workload::generate(shape_of(c), 1)[0];
  const std::string message =
      refused<InvalidArgument>([&] { buffer.low_latency_dispatch(dispatch_args(c, data)); });
  EXPECT_NE(message.find("low_latency_max_tokens_per_rank"), std::string::npos) << message;
}

TEST(LowLatencyErrors, CombineRefusesShapesThatDoNotMatchTheHandle) {
  expect_interface_bad_combine_refused(Engine::low_latency, kRegions, [](const auto& combine_refused) {
    // zero_copy with an x that is not the buffer's view.
    combine_refused([](LowLatencyCombineArgs& a) { a.zero_copy = true; }, "x:");
  });
}

}  // namespace
}  // namespace switchyard::testing::expert_major
