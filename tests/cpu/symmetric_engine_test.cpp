// The CPU `symmetric` engine against the reference and against the `low_latency` engine, bit for
// bit, with ranks as threads: one-stage pull dispatch (bf16 and fp8), push combine, the barrier's
// reuse across back-to-back calls, sharing a Buffer with the other engines, timeouts and bad input
// (DESIGN.md, "Symmetric engine" and "low_latency and symmetric interface: expert-major").
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "support/normal_round_trip.hpp"
#include "support/test_seed.hpp"
#include "switchyard/buffer.hpp"
#include "switchyard/errors.hpp"
#include "switchyard/group.hpp"
#include "switchyard/reference.hpp"
#include "workload/workload.hpp"

namespace switchyard {
namespace {

struct Case {
  std::string name;
  int ranks = 2;
  std::vector<int64_t> tokens;  // per rank
  int64_t max_tokens = 8;
  int hidden = 256;
  int topk = 2;
  int num_experts = 8;
  workload::Routing routing = workload::Routing::random;
  reference::LowLatencyOptions fp8;
};

std::ostream& operator<<(std::ostream& out, const Case& c) { return out << c.name; }

Case make(std::string name, int ranks, std::vector<int64_t> tokens, int64_t max_tokens, int topk, int num_experts,
          int hidden = 256) {
  Case c;
  c.name = std::move(name);
  c.ranks = ranks;
  c.tokens = std::move(tokens);
  c.max_tokens = max_tokens;
  c.topk = topk;
  c.num_experts = num_experts;
  c.hidden = hidden;
  return c;
}

workload::Shape shape_of(const Case& c) {
  workload::Shape shape;
  shape.topology = Topology::single_node(c.ranks);
  shape.tokens_per_rank_list = c.tokens;
  shape.hidden = c.hidden;
  shape.topk = c.topk;
  shape.num_experts = c.num_experts;
  shape.routing = c.routing;
  return shape;
}

// Both expert-major regions, so that every test can also run the low_latency engine.
BufferOptions options_of(const Case& c, int rank, double timeout_seconds = Config::kDefaultTimeoutSeconds) {
  BufferOptions options;
  options.topology = Topology::single_node(c.ranks);
  options.rank = rank;
  options.config.timeout_seconds = timeout_seconds;
  options.sizing.max_tokens_per_rank = 1;
  options.sizing.hidden = c.hidden;
  options.sizing.topk = c.topk;
  options.sizing.num_experts = c.num_experts;
  options.sizing.low_latency_max_tokens_per_rank = c.max_tokens;
  options.sizing.symmetric_max_tokens_per_rank = c.max_tokens;
  return options;
}

Tensor poisoned(DType dtype, std::initializer_list<int64_t> dims) {
  Tensor tensor = Tensor::empty(dtype, dims);
  workload::poison(tensor);
  return tensor;
}

// A view of `tensor` [a, b, c] as [a * b, c].
TensorView flat(const TensorView& tensor) {
  TensorView view = tensor;
  view.ndim = 2;
  view.shape = {tensor.shape[0] * tensor.shape[1], tensor.shape[2], 0, 0};
  return view;
}

// The workload's synthetic expert on every row (combine never reads rows past recv_count).
Tensor expert_outputs(const TensorView& recv_x, const TensorView& recv_x_scales, int rank) {
  Tensor y = workload::synthetic_expert(flat(recv_x), recv_x_scales.defined() ? flat(recv_x_scales) : TensorView(), rank);
  Tensor shaped = Tensor::empty(DType::bf16, {recv_x.shape[0], recv_x.shape[1], recv_x.shape[2]});
  std::memcpy(shaped.data(), y.data(), y.nbytes());
  return shaped;
}

struct Expected {
  std::vector<workload::RankData> data;
  std::vector<reference::LowLatencyDispatchOutput> dispatched;
  std::vector<Tensor> combined;
};

Expected expected_for(const Case& c, uint64_t seed) {
  Expected expected;
  expected.data = workload::generate(shape_of(c), seed);
  std::vector<reference::RankInputs> inputs;
  for (const auto& data : expected.data) inputs.push_back(data.inputs());
  expected.dispatched = reference::low_latency_dispatch(inputs, c.num_experts, Topology::single_node(c.ranks),
                                                        c.max_tokens, c.fp8);
  if (!c.fp8.use_ue8m0) {
    std::vector<Tensor> ys;
    std::vector<TensorView> views;
    for (int rank = 0; rank < c.ranks; ++rank) {
      ys.push_back(expert_outputs(expected.dispatched[rank].recv_x, expected.dispatched[rank].recv_x_scales, rank));
      views.push_back(ys.back());
    }
    expected.combined =
        reference::low_latency_combine(views, inputs, c.num_experts, Topology::single_node(c.ranks), c.max_tokens);
  }
  return expected;
}

struct Failures {
  std::mutex mutex;
  std::vector<std::string> lines;
  void add(int rank, const std::string& what) {
    std::lock_guard<std::mutex> lock(mutex);
    lines.push_back("rank " + std::to_string(rank) + ": " + what);
  }
  void expect_none(uint64_t seed) {
    for (const auto& line : lines) ADD_FAILURE() << line;
    if (!lines.empty()) ADD_FAILURE() << "seed " << seed << " (set SWITCHYARD_TEST_SEED to reproduce)";
  }
};

void compare(const TensorView& actual, const TensorView& expected, const std::string& name, int rank, Failures& failures,
             int64_t rows = -1) {
  std::string why;
  if (!workload::bitwise_equal(actual, expected, &why, rows)) failures.add(rank, name + ": " + why);
}

// recv_x and its scales are compared on received rows only (`recv_count` of `want`); the rest is
// unspecified.
void check_dispatch(const LowLatencyDispatchResult& got, const Tensor& want_x, const Tensor& want_scales,
                    const Tensor& want_count, const Tensor& want_range, const Tensor& want_src, int rank,
                    Failures& failures, const std::string& against) {
  compare(got.recv_count, want_count, "recv_count vs " + against, rank, failures);
  compare(got.layout_range, want_range, "layout_range vs " + against, rank, failures);
  compare(got.src_info, want_src, "src_info vs " + against, rank, failures);
  if (got.recv_x.dtype() != want_x.dtype() || got.recv_x.view().shape != want_x.view().shape) {
    failures.add(rank, "recv_x vs " + against + ": expected " + want_x.view().describe() + ", got " +
                           got.recv_x.view().describe());
    return;
  }
  const int64_t rows_per_expert = want_x.size(1);
  for (int64_t local = 0; local < want_x.size(0); ++local) {
    const int64_t count = want_count.as<const int32_t>()[local];
    auto expert_rows = [&](const Tensor& tensor) {
      TensorView view = flat(tensor);
      view.data = static_cast<uint8_t*>(view.data) + local * rows_per_expert * view.shape[1] * dtype_size(view.dtype);
      view.shape[0] = rows_per_expert;
      return view;
    };
    const std::string which = " of local expert " + std::to_string(local) + " vs " + against;
    compare(expert_rows(got.recv_x), expert_rows(want_x), "recv_x" + which, rank, failures, count);
    if (want_scales.defined()) {
      if (!got.recv_x_scales.defined()) {
        failures.add(rank, "recv_x_scales: missing");
        return;
      }
      compare(expert_rows(got.recv_x_scales), expert_rows(want_scales), "recv_x_scales" + which, rank, failures, count);
    }
  }
}

void check_against_reference(const LowLatencyDispatchResult& got, const reference::LowLatencyDispatchOutput& want,
                             int rank, Failures& failures) {
  check_dispatch(got, want.recv_x, want.recv_x_scales, want.recv_count, want.layout_range, want.src_info, rank,
                 failures, "reference");
}

void check_against_low_latency(const LowLatencyDispatchResult& got, const LowLatencyDispatchResult& want, int rank,
                               Failures& failures) {
  check_dispatch(got, want.recv_x, want.recv_x_scales, want.recv_count, want.layout_range, want.src_info, rank,
                 failures, "low_latency");
}

LowLatencyDispatchArgs dispatch_args(const Case& c, const workload::RankData& data) {
  LowLatencyDispatchArgs args;
  args.x = data.x;
  args.topk_idx = data.topk_idx;
  args.max_tokens_per_rank = c.max_tokens;
  args.num_experts = c.num_experts;
  args.use_fp8 = c.fp8.use_fp8;
  args.round_scale = c.fp8.round_scale;
  args.use_ue8m0 = c.fp8.use_ue8m0;
  return args;
}

LowLatencyCombineArgs combine_args(const workload::RankData& data, const LowLatencyHandle& handle, const TensorView& y) {
  LowLatencyCombineArgs args;
  args.x = y;
  args.topk_idx = data.topk_idx;
  args.topk_weights = data.topk_weights;
  args.handle = &handle;
  return args;
}

template <typename Body>
void with_buffers(const Case& c, Body&& body, double timeout_seconds = Config::kDefaultTimeoutSeconds) {
  run_ranks(c.ranks, [&](Group& group) {
    Buffer buffer(options_of(c, group.rank(), timeout_seconds));
    buffer.connect(group.allgather(buffer.local_handle()));
    body(group, buffer);
    group.barrier();
  });
}

// ---- bitwise round trips ------------------------------------------------------------------------

class SymmetricRoundTrip : public ::testing::TestWithParam<Case> {};

TEST_P(SymmetricRoundTrip, MatchesTheReferenceAndTheLowLatencyEngineBitwise) {
  const Case& c = GetParam();
  const uint64_t seed = testing::seed_for("symmetric/" + c.name);
  const Expected expected = expected_for(c, seed);
  Failures failures;
  with_buffers(c, [&](Group& group, Buffer& buffer) {
    const int rank = group.rank();
    const workload::RankData& data = expected.data[rank];
    const int64_t local = c.num_experts / c.ranks;
    const int64_t rows = c.ranks * c.max_tokens;
    // Preallocated, poisoned outputs on even ranks; the library allocates on odd ones.
    LowLatencyDispatchArgs args = dispatch_args(c, data);
    Tensor out_recv_x, out_scales, out_count, out_range, out_src, out_combined;
    if (rank % 2 == 0) {
      out_recv_x = poisoned(c.fp8.use_fp8 ? DType::fp8_e4m3 : DType::bf16, {local, rows, c.hidden});
      if (c.fp8.use_ue8m0) {
        out_scales = poisoned(DType::i32, {local, rows, (c.hidden / 128 + 3) / 4});
      } else if (c.fp8.use_fp8) {
        out_scales = poisoned(DType::f32, {local, rows, c.hidden / 128});
      }
      out_count = poisoned(DType::i32, {local});
      out_range = poisoned(DType::i32, {local, c.ranks, 2});
      out_src = poisoned(DType::i32, {local, rows});
      out_combined = poisoned(DType::bf16, {data.x.size(0), c.hidden});
      args.out_recv_x = out_recv_x;
      args.out_recv_x_scales = out_scales;
      args.out_recv_count = out_count;
      args.out_layout_range = out_range;
      args.out_src_info = out_src;
    }
    LowLatencyDispatchResult dispatched = buffer.symmetric_dispatch(args);
    check_against_reference(dispatched, expected.dispatched[rank], rank, failures);
    if (rank % 2 == 0 && dispatched.recv_x.data() != out_recv_x.data()) failures.add(rank, "out_recv_x was not used");
    LowLatencyDispatchResult low_latency = buffer.low_latency_dispatch(dispatch_args(c, data));
    check_against_low_latency(dispatched, low_latency, rank, failures);
    if (c.fp8.use_ue8m0) return;

    Tensor y = expert_outputs(dispatched.recv_x, dispatched.recv_x_scales, rank);
    LowLatencyCombineArgs cargs = combine_args(data, dispatched.handle, y);
    cargs.out_combined_x = out_combined;
    LowLatencyCombineResult combined = buffer.symmetric_combine(cargs);
    compare(combined.combined_x, expected.combined[rank], "combined_x vs reference", rank, failures);
    if (rank % 2 == 0 && combined.combined_x.data() != out_combined.data()) failures.add(rank, "out_combined_x unused");
    LowLatencyCombineResult combined_low_latency =
        buffer.low_latency_combine(combine_args(data, low_latency.handle, y));
    compare(combined.combined_x, combined_low_latency.combined_x, "combined_x vs low_latency", rank, failures);
  });
  failures.expect_none(seed);
}

std::vector<Case> cases() {
  std::vector<Case> all = {
      make("r1_k1", 1, {5}, 8, 1, 4),
      make("r1_one_expert", 1, {6}, 6, 1, 1),  // one expert in all
      make("r2_k2", 2, {7, 3}, 8, 2, 8),
      make("r2_k5", 2, {6, 6}, 6, 5, 6),
      make("r3_k9", 3, {6, 0, 4}, 6, 9, 18, 128),
      make("r3_k3_hidden_not_a_multiple_of_128", 3, {5, 4, 2}, 5, 3, 6, 72),
      make("r4_k4", 4, {8, 5, 8, 1}, 8, 4, 16),
      make("r4_k6", 4, {3, 7, 7, 2}, 7, 6, 8),
      make("r8_k8", 8, {4, 3, 0, 4, 2, 4, 1, 4}, 4, 8, 16, 128),
      make("r8_k7", 8, {3, 3, 3, 3, 3, 3, 3, 3}, 3, 7, 8, 128),
      make("r4_zero_tokens", 4, {0, 0, 0, 0}, 4, 2, 8),
  };
  Case all_invalid = make("r2_all_invalid", 2, {4, 4}, 4, 3, 4);
  all_invalid.routing = workload::Routing::all_invalid;
  all.push_back(all_invalid);
  // Every token of every rank on one expert: its rows fill R * max exactly.
  Case one_expert = make("r4_one_expert_full", 4, {6, 6, 6, 6}, 6, 2, 8);
  one_expert.routing = workload::Routing::one_expert;
  all.push_back(one_expert);
  Case skewed = make("r4_skewed", 4, {6, 6, 6, 6}, 6, 3, 8);
  skewed.routing = workload::Routing::skewed;
  all.push_back(skewed);
  Case fp8 = make("r2_fp8", 2, {6, 5}, 6, 4, 8, 384);
  fp8.fp8.use_fp8 = true;
  all.push_back(fp8);
  Case fp8_r8 = make("r8_fp8_k9", 8, {2, 3, 2, 0, 3, 1, 3, 2}, 3, 9, 16, 128);
  fp8_r8.fp8.use_fp8 = true;
  all.push_back(fp8_r8);
  Case rounded = make("r3_fp8_round_scale", 3, {5, 6, 2}, 6, 3, 6, 256);
  rounded.fp8 = {true, true, false};
  all.push_back(rounded);
  Case ue8m0 = make("r2_fp8_ue8m0_padded", 2, {6, 4}, 6, 2, 4, 640);  // 5 scales: 2 words
  ue8m0.fp8 = {true, false, true};
  all.push_back(ue8m0);
  return all;
}

INSTANTIATE_TEST_SUITE_P(Shapes, SymmetricRoundTrip, ::testing::ValuesIn(cases()),
                         [](const auto& info) { return info.param.name; });

TEST(Symmetric, CombineLeavesOutSlotsSetToMinusOne) {
  Case c = make("left_out", 3, {6, 5, 6}, 6, 4, 6);
  const uint64_t seed = testing::seed_for("symmetric/left_out");
  const Expected expected = expected_for(c, seed);
  Failures failures;
  with_buffers(c, [&](Group& group, Buffer& buffer) {
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
    compare(combined.combined_x, combined_low_latency.combined_x, "combined_x vs low_latency", rank, failures);
  });
  failures.expect_none(seed);
}

// ---- back to back, determinism, sharing a buffer --------------------------------------------------

TEST(Symmetric, BackToBackCallsReuseTheBarrierAndHalvesWithoutRacing) {
  Case c = make("back_to_back", 4, {5, 3, 5, 2}, 5, 3, 8, 128);
  const uint64_t seed = testing::seed_for("symmetric/back_to_back");
  const Expected first = expected_for(c, seed);
  const Expected second = expected_for(c, seed + 1);
  Failures failures;
  with_buffers(c, [&](Group& group, Buffer& buffer) {
    const int rank = group.rank();
    for (int round = 0; round < 6; ++round) {
      // Two dispatches, then two combines in the other order, with no synchronisation between ranks.
      auto a = buffer.symmetric_dispatch(dispatch_args(c, first.data[rank]));
      auto b = buffer.symmetric_dispatch(dispatch_args(c, second.data[rank]));
      check_against_reference(a, first.dispatched[rank], rank, failures);
      check_against_reference(b, second.dispatched[rank], rank, failures);
      Tensor ya = expert_outputs(a.recv_x, {}, rank);
      Tensor yb = expert_outputs(b.recv_x, {}, rank);
      auto combined_b = buffer.symmetric_combine(combine_args(second.data[rank], b.handle, yb));
      auto combined_a = buffer.symmetric_combine(combine_args(first.data[rank], a.handle, ya));
      compare(combined_a.combined_x, first.combined[rank], "combined_x (first)", rank, failures);
      compare(combined_b.combined_x, second.combined[rank], "combined_x (second)", rank, failures);
    }
  });
  failures.expect_none(seed);
}

TEST(Symmetric, SameInputsGiveTheSameBitsEveryTime) {
  Case c = make("determinism", 3, {6, 6, 6}, 6, 4, 6, 256);
  c.fp8.use_fp8 = true;
  const uint64_t seed = testing::seed_for("symmetric/determinism");
  const Expected expected = expected_for(c, seed);
  Failures failures;
  with_buffers(c, [&](Group& group, Buffer& buffer) {
    const int rank = group.rank();
    auto first = buffer.symmetric_dispatch(dispatch_args(c, expected.data[rank]));
    Tensor y = expert_outputs(first.recv_x, first.recv_x_scales, rank);
    auto combined_first = buffer.symmetric_combine(combine_args(expected.data[rank], first.handle, y));
    auto second = buffer.symmetric_dispatch(dispatch_args(c, expected.data[rank]));
    auto combined_second = buffer.symmetric_combine(combine_args(expected.data[rank], second.handle, y));
    check_against_reference(first, expected.dispatched[rank], rank, failures);
    check_against_reference(second, expected.dispatched[rank], rank, failures);
    compare(combined_second.combined_x, combined_first.combined_x, "combined_x (second run)", rank, failures);
    compare(combined_first.combined_x, expected.combined[rank], "combined_x", rank, failures);
  });
  failures.expect_none(seed);
}

TEST(Symmetric, InterleavesWithTheLowLatencyAndNormalEnginesOnOneBuffer) {
  workload::Shape shape;
  shape.topology = Topology::single_node(3);
  shape.tokens_per_rank = 6;
  shape.hidden = 256;
  shape.topk = 2;
  shape.num_experts = 6;
  const uint64_t seed = testing::seed_for("symmetric/interleaved");
  const std::vector<workload::RankData> data = workload::generate(shape, seed);
  const testing::Expected normal_expected = testing::compute_expected(shape, data, 1);
  Case c = make("interleaved", 3, {6, 6, 6}, 6, 2, 6);
  const Expected expected = expected_for(c, seed);
  std::vector<std::string> normal_failures;
  std::mutex mutex;
  Failures failures;
  run_ranks(3, [&](Group& group) {
    const int rank = group.rank();
    BufferOptions options = options_of(c, rank);
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
      auto combined_low_latency = buffer.low_latency_combine(combine_args(expected.data[rank], low_latency.handle, y));
      auto combined = buffer.symmetric_combine(combine_args(expected.data[rank], symmetric.handle, y));
      check_against_reference(symmetric, expected.dispatched[rank], rank, failures);
      check_against_low_latency(symmetric, low_latency, rank, failures);
      compare(combined.combined_x, expected.combined[rank], "combined_x", rank, failures);
      compare(combined_low_latency.combined_x, expected.combined[rank], "combined_x (low_latency)", rank, failures);
      std::lock_guard<std::mutex> lock(mutex);
      normal_failures.insert(normal_failures.end(), mine.begin(), mine.end());
    }
    group.barrier();
  });
  for (const auto& line : normal_failures) ADD_FAILURE() << "normal: " << line;
  failures.expect_none(seed);
}

// ---- timeouts -----------------------------------------------------------------------------------

// Rank 0 calls `call` while rank 1 makes only a dispatch (with `peer_dispatches`) or no call at
// all; returns what rank 0 caught.
std::string timeout_message(const std::function<void(Buffer&, const Case&, const Expected&)>& call,
                            bool* refused_after, bool peer_dispatches = false) {
  constexpr double kTimeout = 1.0;
  Case c = make("timeout", 2, {4, 4}, 4, 2, 4);
  const Expected expected = expected_for(c, 7);
  std::promise<void> rank0_returned;
  std::shared_future<void> release = rank0_returned.get_future().share();
  std::string message;
  double seconds = 0;
  run_ranks(2, [&](Group& group) {
    Buffer buffer(options_of(c, group.rank(), kTimeout));
    buffer.connect(group.allgather(buffer.local_handle()));
    if (group.rank() == 1) {
      if (peer_dispatches) buffer.symmetric_dispatch(dispatch_args(c, expected.data[1]));
      release.wait_for(std::chrono::seconds(60));  // makes no (further) call
      return;
    }
    struct Release {
      std::promise<void>& promise;
      ~Release() { promise.set_value(); }
    } release_rank1{rank0_returned};
    auto start = std::chrono::steady_clock::now();
    try {
      call(buffer, c, expected);
      message = "no exception";
    } catch (const TimeoutError& error) {
      message = error.what();
    } catch (const std::exception& error) {
      message = std::string("not a TimeoutError: ") + error.what();
    }
    seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    try {
      buffer.symmetric_dispatch(dispatch_args(c, expected.data[0]));
    } catch (const TimeoutError&) {
    } catch (const Error&) {
      *refused_after = true;  // the buffer is unusable after a timeout
    }
  });
  EXPECT_GE(seconds, kTimeout * 0.5) << message;
  EXPECT_LT(seconds, 15.0) << message;
  return message;
}

TEST(SymmetricTimeouts, DispatchWithoutItsPeerTimesOutNamingRankRoleAndTheMissingRank) {
  bool refused_after = false;
  const std::string message = timeout_message(
      [](Buffer& buffer, const Case& c, const Expected& expected) {
        buffer.symmetric_dispatch(dispatch_args(c, expected.data[0]));
      },
      &refused_after);
  SCOPED_TRACE("message: " + message);
  EXPECT_NE(message.find("rank 0"), std::string::npos);
  EXPECT_NE(message.find("symmetric dispatch"), std::string::npos);
  EXPECT_NE(message.find("waiting for rank(s) 1 to arrive"), std::string::npos);
  EXPECT_NE(message.find("timed out"), std::string::npos);
  EXPECT_TRUE(refused_after);
}

TEST(SymmetricTimeouts, CombineWithoutItsPeerTimesOutNamingRankRoleAndTheMissingRank) {
  // Both ranks dispatch; only rank 0 combines.
  bool refused_after = false;
  const std::string message = timeout_message(
      [](Buffer& buffer, const Case& c, const Expected& expected) {
        auto dispatched = buffer.symmetric_dispatch(dispatch_args(c, expected.data[0]));
        Tensor y = expert_outputs(dispatched.recv_x, {}, 0);
        buffer.symmetric_combine(combine_args(expected.data[0], dispatched.handle, y));
      },
      &refused_after, /*peer_dispatches=*/true);
  SCOPED_TRACE("message: " + message);
  EXPECT_NE(message.find("rank 0"), std::string::npos);
  EXPECT_NE(message.find("symmetric combine"), std::string::npos);
  EXPECT_NE(message.find("waiting for rank(s) 1 to arrive"), std::string::npos);
  EXPECT_TRUE(refused_after);
}

// ---- bad input ----------------------------------------------------------------------------------

struct SingleRank {
  Case c = make("single", 1, {4}, 4, 2, 4);
  std::unique_ptr<Buffer> buffer;
  workload::RankData data;
  Tensor out_recv_x, out_count, out_range, out_src;

  explicit SingleRank(BufferOptions options = {}) {
    if (options.sizing.symmetric_max_tokens_per_rank == 0) options = options_of(c, 0);
    buffer = std::make_unique<Buffer>(options);
    buffer->connect({buffer->local_handle()});
    data = workload::generate(shape_of(c), 3)[0];
    out_recv_x = poisoned(DType::bf16, {4, 4, c.hidden});
    out_count = poisoned(DType::i32, {4});
    out_range = poisoned(DType::i32, {4, 1, 2});
    out_src = poisoned(DType::i32, {4, 4});
  }
  LowLatencyDispatchArgs args() const {
    LowLatencyDispatchArgs args = dispatch_args(c, data);
    args.out_recv_x = out_recv_x;
    args.out_recv_count = out_count;
    args.out_layout_range = out_range;
    args.out_src_info = out_src;
    return args;
  }
  bool untouched() const {
    for (const Tensor* tensor : {&out_recv_x, &out_count, &out_range, &out_src}) {
      const uint8_t* bytes = tensor->as<const uint8_t>();
      for (size_t i = 0; i < tensor->nbytes(); ++i) {
        if (bytes[i] != 0xA5) return false;
      }
    }
    return true;
  }
};

template <typename Exception, typename Call>
std::string refused(Call&& call) {
  try {
    call();
  } catch (const Exception& error) {
    return error.what();
  } catch (const std::exception& error) {
    return std::string("not the expected exception: ") + error.what();
  }
  return "no exception";
}

void expect_dispatch_refused(const std::function<void(SingleRank&, LowLatencyDispatchArgs&)>& spoil,
                             const std::string& names) {
  SingleRank single;
  LowLatencyDispatchArgs args = single.args();
  spoil(single, args);
  const std::string message = refused<InvalidArgument>([&] { single.buffer->symmetric_dispatch(args); });
  EXPECT_EQ(message.rfind(names, 0), 0u) << "expected a message starting with \"" << names << "\", got: " << message;
  EXPECT_TRUE(single.untouched()) << "outputs were written";
  single.data = workload::generate(shape_of(single.c), 3)[0];  // unspoiled inputs
  EXPECT_NO_THROW(single.buffer->symmetric_dispatch(single.args())) << "the buffer is still usable";
}

TEST(SymmetricErrors, DispatchRefusesBadInputNamingTheArgumentAndWritesNothing) {
  Tensor x5 = Tensor::empty(DType::bf16, {5, 256});
  Tensor idx5 = Tensor::empty(DType::i64, {5, 2});
  std::fill(idx5.as<int64_t>(), idx5.as<int64_t>() + 10, 0);
  expect_dispatch_refused([&](SingleRank&, LowLatencyDispatchArgs& a) { a.x = x5; a.topk_idx = idx5; }, "x:");
  expect_dispatch_refused([](SingleRank&, LowLatencyDispatchArgs& a) { a.max_tokens_per_rank = 5; },
                          "max_tokens_per_rank:");
  expect_dispatch_refused([](SingleRank&, LowLatencyDispatchArgs& a) { a.max_tokens_per_rank = 0; },
                          "max_tokens_per_rank:");
  expect_dispatch_refused([](SingleRank& s, LowLatencyDispatchArgs&) { s.data.topk_idx.as<int64_t>()[1] = 4; },
                          "topk_idx:");
  expect_dispatch_refused([](SingleRank& s, LowLatencyDispatchArgs&) { s.data.topk_idx.as<int64_t>()[1] = -2; },
                          "topk_idx:");
  expect_dispatch_refused([](SingleRank& s, LowLatencyDispatchArgs&) {
    int64_t* ids = s.data.topk_idx.as<int64_t>();
    for (int i = 0; i < 5; ++i) ids[i] = 1;  // five rows of one expert from one rank; max is 4
  }, "topk_idx:");
  Tensor x_f32 = Tensor::empty(DType::f32, {4, 256});
  expect_dispatch_refused([&](SingleRank&, LowLatencyDispatchArgs& a) { a.x = x_f32; }, "x:");
  Tensor x_192 = Tensor::empty(DType::bf16, {4, 192});
  expect_dispatch_refused([&](SingleRank&, LowLatencyDispatchArgs& a) { a.x = x_192; a.use_fp8 = true; }, "x:");
  Tensor x_wide = Tensor::empty(DType::bf16, {4, 512});  // sizing.hidden is 256
  expect_dispatch_refused([&](SingleRank&, LowLatencyDispatchArgs& a) { a.x = x_wide; }, "x:");
  expect_dispatch_refused([](SingleRank&, LowLatencyDispatchArgs& a) { a.use_ue8m0 = true; }, "use_ue8m0:");
  expect_dispatch_refused([](SingleRank&, LowLatencyDispatchArgs& a) { a.num_experts = 8; }, "num_experts:");
  Tensor idx_wide = Tensor::empty(DType::i64, {4, 3});  // sizing.topk is 2
  std::fill(idx_wide.as<int64_t>(), idx_wide.as<int64_t>() + 12, 0);
  expect_dispatch_refused([&](SingleRank&, LowLatencyDispatchArgs& a) { a.topk_idx = idx_wide; }, "topk_idx:");
  Tensor wrong_out = poisoned(DType::bf16, {4, 3, 256});
  expect_dispatch_refused([&](SingleRank&, LowLatencyDispatchArgs& a) { a.out_recv_x = wrong_out; }, "out_recv_x:");
}

TEST(SymmetricErrors, UnsupportedOptionsAreRefusedByName) {
  SingleRank single;
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
  SingleRank single;
  auto symmetric = single.buffer->symmetric_dispatch(dispatch_args(single.c, single.data));
  auto low_latency = single.buffer->low_latency_dispatch(dispatch_args(single.c, single.data));
  Tensor y = expert_outputs(symmetric.recv_x, {}, 0);
  std::string message =
      refused<InvalidArgument>([&] { single.buffer->low_latency_combine(combine_args(single.data, symmetric.handle, y)); });
  EXPECT_EQ(message.rfind("handle:", 0), 0u) << message;
  message =
      refused<InvalidArgument>([&] { single.buffer->symmetric_combine(combine_args(single.data, low_latency.handle, y)); });
  EXPECT_EQ(message.rfind("handle:", 0), 0u) << message;
  message = refused<InvalidArgument>([&] { single.buffer->low_latency_combine_buffer(symmetric.handle); });
  EXPECT_EQ(message.rfind("handle:", 0), 0u) << message;
}

TEST(SymmetricErrors, CombineRefusesShapesThatDoNotMatchTheHandle) {
  SingleRank single;
  auto dispatched = single.buffer->symmetric_dispatch(dispatch_args(single.c, single.data));
  Tensor y = expert_outputs(dispatched.recv_x, {}, 0);
  Tensor out = poisoned(DType::bf16, {4, 256});
  auto combine_refused = [&](const std::function<void(LowLatencyCombineArgs&)>& spoil, const std::string& names) {
    LowLatencyCombineArgs args = combine_args(single.data, dispatched.handle, y);
    args.out_combined_x = out;
    spoil(args);
    const std::string message = refused<InvalidArgument>([&] { single.buffer->symmetric_combine(args); });
    EXPECT_EQ(message.rfind(names, 0), 0u) << "expected a message starting with \"" << names << "\", got: " << message;
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
  const uint8_t* bytes = out.as<const uint8_t>();
  for (size_t i = 0; i < out.nbytes(); ++i) ASSERT_EQ(bytes[i], 0xA5) << "out_combined_x was written";
  SingleRank other;
  EXPECT_EQ(refused<InvalidArgument>([&] {
              other.buffer->symmetric_combine(combine_args(single.data, dispatched.handle, y));
            }).rfind("handle:", 0),
            0u);
}

TEST(SymmetricErrors, BufferWithoutASymmetricRegionRefusesTheCalls) {
  Case c = make("no_region", 1, {4}, 4, 2, 4);
  BufferOptions options = options_of(c, 0);
  options.sizing.symmetric_max_tokens_per_rank = 0;
  Buffer buffer(options);
  buffer.connect({buffer.local_handle()});
  const workload::RankData data = workload::generate(shape_of(c), 1)[0];
  const std::string message = refused<InvalidArgument>([&] { buffer.symmetric_dispatch(dispatch_args(c, data)); });
  EXPECT_NE(message.find("symmetric_max_tokens_per_rank"), std::string::npos) << message;
}

TEST(SymmetricSizing, TheRegionFollowsTheOthersAndLeavesTheirSizesAlone) {
  Case c = make("sizing", 4, {4, 4, 4, 4}, 16, 8, 32, 1024);
  BufferOptions options = options_of(c, 0);
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
}  // namespace switchyard
