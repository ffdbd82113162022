// The `normal` engine's heap-resident inputs (docs/normal-in-place.md): with BufferSizing::
// normal_heap_input_tokens every dispatch takes x (and fp8 scales) from the Buffer's heap
// (Buffer::normal_input), each source leaves its routing beside its rows and each receiver pulls both from
// its sources' heaps, without rings; with normal_heap_combine_rows every combine takes the expert outputs
// (and weights) from the heap (Buffer::normal_combine_input) and each home rank reads its tokens' rows from
// the expert ranks' heaps. Ranks as threads with their heaps shared as threads and as processes (every rank
// maps its peers' heaps at addresses of its own, as between processes), bitwise against the reference:
// dispatch, cached dispatch, combine, and rounds that refill the inputs right after a call returns; and with
// the ranks' own tensors, which the Buffer copies into its heap inputs first (staged). Bad sizings, views and
// inputs are refused by name.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <mutex>
#include <ostream>
#include <string>
#include <vector>

#include "common/normal_protocol.hpp"
#include "common/sym_heap.hpp"
#include "core/normal_sizing.hpp"
#include "cpu/normal/combine_roles.hpp"
#include "support/normal_round_trip.hpp"
#include "support/refusal.hpp"
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

// NOTES: far above what any case needs, yet a hung engine fails well before ctest's per-test TIMEOUT.
constexpr double kTestTimeoutSeconds = 20.0;

struct HeapInputCase {
  std::string name;
  Shape shape;
  HeapSharing sharing = HeapSharing::threads;
  int ring_slots = Config::kDefaultRingSlots;
  int chunk_tokens = Config::kDefaultChunkTokens;
  bool dispatch_input = true;  // BufferSizing::normal_heap_input_tokens > 0
  bool combine_input = true;   // BufferSizing::normal_heap_combine_rows > 0
  // The ranks pass their own tensors, which the Buffer copies into its heap inputs (the views are not used).
  bool staged = false;
  // With staged fp8: the scales column-major (DispatchArgs::x_scales_column_major), transposed in.
  bool scales_column_major = false;
};

void PrintTo(const HeapInputCase& c, std::ostream* out) {
  *out << c.name << " (" << c.shape.describe() << ")";
}

Shape make_shape(int num_ranks, std::vector<int64_t> tokens, int hidden, int topk, int num_experts,
                 DType dtype, bool with_weights = true, Routing routing = Routing::random) {
  Shape shape;
  shape.topology = Topology::single_node(num_ranks);
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

// Every case's largest call fills the dispatch input exactly (testing::sizing_for's tokens; one where no rank
// has a token, as a Buffer without an input has none), and the combine input holds the most rows a rank
// can receive.
BufferSizing heap_input_sizing(const HeapInputCase& c) {
  BufferSizing sizing = testing::sizing_for(c.shape);
  sizing.max_tokens_per_rank = std::max<int64_t>(1, sizing.max_tokens_per_rank);
  if (c.dispatch_input) sizing.normal_heap_input_tokens = sizing.max_tokens_per_rank;
  if (c.combine_input)
    sizing.normal_heap_combine_rows = c.shape.topology.num_ranks * sizing.max_tokens_per_rank;
  return sizing;
}

// Runs `body(buffer, rank)` on every rank (threads), each with a connected Buffer that has a heap input.
void run_on_ranks(const HeapInputCase& c, const std::function<void(Buffer&, int)>& body) {
  run_ranks(c.shape.topology.num_ranks, [&](Group& group) {
    BufferOptions options;
    options.topology = c.shape.topology;
    options.rank = group.rank();
    options.backend = Backend::cpu;
    options.sharing = c.sharing;
    options.config.ring_slots = c.ring_slots;
    options.config.chunk_tokens = c.chunk_tokens;
    options.config.timeout_seconds = kTestTimeoutSeconds;
    options.sizing = heap_input_sizing(c);
    Buffer buffer(options);
    buffer.connect(group.allgather(buffer.local_handle()));
    body(buffer, group.rank());
  });
}

void report(const std::vector<std::string>& failures) {
  for (const std::string& failure : failures) ADD_FAILURE() << failure;
}

class NormalHeapInputTest : public ::testing::TestWithParam<HeapInputCase> {};

// Two rounds on one Buffer, each a layout + dispatch, the synthetic expert and a combine, then a cached
// dispatch of the same tokens and its combine, with x and y in the heap as the case says: the second round's
// tokens are other ones, written into the inputs as soon as the first round's calls returned (a peer still
// reading would see them).
TEST_P(NormalHeapInputTest, RoundTripsThroughTheHeapMatchTheReferenceBitwise) {
  const HeapInputCase& c = GetParam();
  const int num_ranks = c.shape.topology.num_ranks;
  struct Round {
    uint64_t seed;
    std::vector<workload::RankData> data;
    Expected expected;
  };
  std::vector<Round> rounds;
  for (const char* name : {"/first", "/second"}) {
    Round round;
    round.seed = testing::seed_for("normal_heap_input/" + c.name + name);
    round.data = workload::generate(c.shape, round.seed);
    round.expected = testing::compute_expected(c.shape, round.data, 1);
    rounds.push_back(std::move(round));
  }
  RoundTripOptions options;
  options.x_in_heap = c.dispatch_input;
  options.y_in_heap = c.combine_input;
  options.staged = c.staged;
  options.scales_column_major = c.scales_column_major;
  std::vector<std::vector<RankRun>> runs(rounds.size(), std::vector<RankRun>(num_ranks));
  std::vector<std::vector<RankRun>> cached(rounds.size(), std::vector<RankRun>(num_ranks));
  // DeepEP's cached dispatch (no topk_idx): with x in the heap it pulls every row by the handle's receive
  // order (DispatchPlan::gather_by_handle).
  std::vector<std::vector<RankRun>> gathered(rounds.size(), std::vector<RankRun>(num_ranks));
  run_on_ranks(c, [&](Buffer& buffer, int rank) {
    for (size_t r = 0; r < rounds.size(); ++r) {
      const Round& round = rounds[r];
      runs[r][rank] = testing::run_round_trip(buffer, c.shape, round.data[rank], round.expected, options);
      cached[r][rank] = testing::run_cached_round_trip(buffer, c.shape, round.data[rank], round.expected,
                                                       options, runs[r][rank], true);
      gathered[r][rank] = testing::run_cached_round_trip(buffer, c.shape, round.data[rank], round.expected,
                                                         options, runs[r][rank], false);
    }
  });
  std::vector<std::string> failures;
  for (size_t r = 0; r < rounds.size(); ++r) {
    const Round& round = rounds[r];
    for (int rank = 0; rank < num_ranks; ++rank) {
      const std::string where = "round " + std::to_string(r) + " seed " + std::to_string(round.seed) + ": ";
      std::vector<std::string> found;
      testing::check_layout(runs[r][rank], round.expected, rank, &found);
      testing::check_dispatch(runs[r][rank], c.shape, round.expected, rank, options, true, &found);
      testing::check_combine(runs[r][rank], c.shape, round.expected, rank, c.shape.with_weights, &found);
      const int64_t rows = static_cast<int64_t>(round.expected.dispatched[rank].recv_src_rank.size());
      testing::check_identical(cached[r][rank], runs[r][rank], rows, &found);
      testing::check_combine(cached[r][rank], c.shape, round.expected, rank, c.shape.with_weights, &found);
      testing::check_identical_rows(gathered[r][rank], runs[r][rank], rows, &found);
      testing::check_combine(gathered[r][rank], c.shape, round.expected, rank, false, &found);
      for (const std::string& failure : found) failures.push_back(where + failure);
    }
  }
  report(failures);
}

// Worst-case mode (fixed-size outputs, no host synchronisation) from the heap: the combine input holds the
// padded rows, the received ones read in place.
TEST_P(NormalHeapInputTest, WorstCaseRoundTripsThroughTheHeapMatchTheReferenceBitwise) {
  const HeapInputCase& c = GetParam();
  const int num_ranks = c.shape.topology.num_ranks;
  const uint64_t seed = testing::seed_for("normal_heap_input_worst/" + c.name);
  const std::vector<workload::RankData> data = workload::generate(c.shape, seed);
  const Expected expected = testing::compute_expected(c.shape, data, 1);
  RoundTripOptions options;
  options.x_in_heap = c.dispatch_input;
  options.y_in_heap = c.combine_input;
  options.staged = c.staged;
  options.scales_column_major = c.scales_column_major;
  int64_t most = 0;
  for (const auto& dispatched : expected.dispatched)
    most = std::max<int64_t>(most, static_cast<int64_t>(dispatched.recv_src_rank.size()));
  // Padded past every rank's rows, within what the combine input holds.
  options.num_worst_tokens = std::min<int64_t>(most + 3, heap_input_sizing(c).normal_heap_combine_rows);
  if (!c.combine_input) options.num_worst_tokens = most + 3;
  std::vector<RankRun> runs(num_ranks);
  run_on_ranks(c, [&](Buffer& buffer, int rank) {
    runs[rank] = testing::run_round_trip(buffer, c.shape, data[rank], expected, options);
  });
  std::vector<std::string> failures;
  for (int rank = 0; rank < num_ranks; ++rank) {
    testing::check_dispatch(runs[rank], c.shape, expected, rank, options, true, &failures);
    testing::check_combine(runs[rank], c.shape, expected, rank, c.shape.with_weights, &failures);
  }
  report(failures);
}

std::vector<HeapInputCase> heap_input_cases() {
  constexpr DType bf16 = DType::bf16, fp8 = DType::fp8_e4m3;
  std::vector<HeapInputCase> cases = {
      {"r1_bf16", make_shape(1, {16}, 256, 4, 8, bf16)},
      {"r2_fp8", make_shape(2, {9}, 512, 4, 8, fp8)},
      {"r2_zero_tokens", make_shape(2, {0}, 256, 2, 4, bf16)},
      {"r3_one_rank_without_tokens", make_shape(3, {5, 0, 7}, 256, 4, 12, fp8)},
      // Rings of 2 slots: the routing-only messages wrap many times per call.
      {"r4_wrap", make_shape(4, {24}, 384, 4, 16, bf16), HeapSharing::threads, 2, 1},
      {"r4_no_weights", make_shape(4, {8}, 1024, 6, 16, bf16, false)},
      {"r8_h7168_fp8", make_shape(8, {6}, 7168, 8, 64, fp8)},
      {"r8_skewed", make_shape(8, {40}, 256, 8, 32, bf16, true, Routing::skewed)},
  };
  // One heap input at a time: the other call goes through the rings.
  HeapInputCase dispatch_only{"r4_dispatch_input_only", make_shape(4, {12}, 512, 4, 16, fp8)};
  dispatch_only.combine_input = false;
  HeapInputCase combine_only{"r4_combine_input_only", make_shape(4, {12}, 512, 4, 16, bf16)};
  combine_only.dispatch_input = false;
  cases.push_back(dispatch_only);
  cases.push_back(combine_only);
  // fp8 scales column-major, as DeepEP's callers pass them: staged, transposed into the row-major views.
  HeapInputCase column_major{"r4_fp8_column_major_scales_staged", make_shape(4, {10}, 512, 4, 16, fp8)};
  column_major.staged = true;
  column_major.scales_column_major = true;
  cases.push_back(column_major);
  // The ranks' own tensors, staged into the heap inputs by the Buffer (rounds that refill x right after a
  // call returned now refill the caller's tensors, and the next call copies them).
  for (const char* name : {"r2_fp8", "r8_skewed", "r4_dispatch_input_only", "r4_combine_input_only"}) {
    for (const HeapInputCase& base : std::vector<HeapInputCase>(cases)) {
      if (base.name != name) continue;
      HeapInputCase staged = base;
      staged.name += "_staged";
      staged.staged = true;
      cases.push_back(staged);
    }
  }
  // The same with every rank's heap mapped at addresses of its own, as between processes.
  const size_t count = cases.size();
  for (size_t i = 0; i < count; ++i) {
    HeapInputCase processes = cases[i];
    processes.name += "_processes";
    processes.sharing = HeapSharing::processes;
    cases.push_back(processes);
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Cases, NormalHeapInputTest, ::testing::ValuesIn(heap_input_cases()),
                         [](const ::testing::TestParamInfo<HeapInputCase>& info) { return info.param.name; });

// A rank whose outputs fail after the count exchange (here rank 0's out_recv_x has a row too many) still
// plays its part in the call on outputs of its own (cpu::DispatchCall::failure) and raises the
// InvalidArgument naming out_recv_x at its end: every other rank's call returns well inside the timeout with
// its rows, and the next round trip is bitwise right on every rank. In place (the peers read rank 0's input,
// then meet it at the closing barrier), through rings (they wait for its senders and its receivers' room),
// and across two nodes (the hierarchical engine's roles). (The CUDA backend does the in-place one with a
// withdrawn gather.)
TEST(NormalHeapInput, ARankWhoseOutputsFailAfterTheCountsLetsItsPeersFinish) {
  enum class Path { in_place, rings, two_nodes };
  for (const Path path : {Path::in_place, Path::rings, Path::two_nodes}) {
    SCOPED_TRACE(path == Path::in_place ? "in place" : path == Path::rings ? "through rings" : "two nodes");
    const bool in_place = path == Path::in_place;
    HeapInputCase c{"outputs_fail",
                    make_shape(path == Path::two_nodes ? 4 : 3, {24}, 256, 4, 12, DType::bf16)};
    if (path == Path::two_nodes) c.shape.topology = Topology{4, 2};
    c.dispatch_input = c.combine_input = in_place;
    const uint64_t seed = testing::seed_for("normal_heap_input/outputs_fail");
    const std::vector<workload::RankData> data = workload::generate(c.shape, seed);
    const Expected expected = testing::compute_expected(c.shape, data, 1);
    const int num_ranks = c.shape.topology.num_ranks;
    std::vector<std::string> messages(num_ranks);
    std::vector<std::string> failures;
    std::mutex failures_mutex;
    std::vector<RankRun> first(num_ranks), after(num_ranks);
    RoundTripOptions options;
    options.x_in_heap = in_place;
    options.y_in_heap = in_place;
    const auto start = std::chrono::steady_clock::now();
    run_on_ranks(c, [&](Buffer& buffer, int rank) {
      const int64_t rows = static_cast<int64_t>(expected.dispatched[rank].recv_src_rank.size());
      TensorView x = data[rank].x;
      if (in_place) {
        const NormalInputViews views = buffer.normal_input(data[rank].x.size(0), c.shape.hidden, DType::bf16);
        std::memcpy(views.x.data, data[rank].x.data(), data[rank].x.nbytes());
        x = views.x;
      }
      Tensor recv_x = Tensor::empty(DType::bf16, {rank == 0 ? rows + 1 : rows, c.shape.hidden});
      DispatchArgs args;
      args.x = x;
      args.topk_idx = data[rank].topk_idx;
      args.topk_weights = data[rank].topk_weights;
      args.num_experts = c.shape.num_experts;
      args.out_recv_x = recv_x;
      std::string problem;
      try {
        const DispatchResult result = buffer.dispatch(args);
        if (rank == 0) problem = "expected an InvalidArgument naming out_recv_x";
        // The peers' rows, rank 0's among them, are all there (recv_x is the caller's: kept alive with it).
        first[rank].dispatch = result;
        first[rank].out_recv_x = recv_x;
      } catch (const InvalidArgument& error) {
        messages[rank] = error.what();
        if (rank != 0) problem = std::string("refused: ") + error.what();
      } catch (const std::exception& error) {
        problem = std::string("threw: ") + error.what();
      }
      if (!problem.empty()) {
        const std::lock_guard<std::mutex> lock(failures_mutex);
        failures.push_back("rank " + std::to_string(rank) + ": " + problem);
      }
      after[rank] = testing::run_round_trip(buffer, c.shape, data[rank], expected, options);
    });
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_LT(seconds, kTestTimeoutSeconds / 2) << "a peer waited for the timeout";
    EXPECT_TRUE(testing::contains(messages[0], "out_recv_x: expected")) << messages[0];
    for (int rank = 0; rank < num_ranks; ++rank) {
      std::vector<std::string> found;
      if (rank != 0) {
        first[rank].layout = after[rank].layout;
        testing::check_dispatch(first[rank], c.shape, expected, rank, options, true, &found);
      }
      testing::check_dispatch(after[rank], c.shape, expected, rank, options, true, &found);
      testing::check_combine(after[rank], c.shape, expected, rank, c.shape.with_weights, &found);
      for (const std::string& failure : found)
        failures.push_back("rank " + std::to_string(rank) + ": " + failure);
    }
    report(failures);
  }
}

// ---- refusals ------------------------------------------------------------------------------------------

BufferOptions one_rank_options(int64_t input_tokens) {
  BufferOptions options;
  options.topology = Topology::single_node(1);
  options.backend = Backend::cpu;
  options.config.timeout_seconds = kTestTimeoutSeconds;
  options.sizing.max_tokens_per_rank = 16;
  options.sizing.hidden = 256;
  options.sizing.topk = 2;
  options.sizing.num_experts = 4;
  options.sizing.normal_heap_input_tokens = input_tokens;
  return options;
}

TEST(NormalHeapInput, BadSizingsAreRefusedNamingTheField) {
  BufferOptions too_many = one_rank_options(17);
  EXPECT_TRUE(
      testing::contains(testing::invalid_argument_message([&] { Buffer buffer(too_many); }),
                        "sizing.normal_heap_input_tokens: expected 0..max_tokens_per_rank (16), got 17"));
  BufferOptions negative = one_rank_options(-1);
  EXPECT_TRUE(testing::contains(testing::invalid_argument_message([&] { Buffer buffer(negative); }),
                                "sizing.normal_heap_input_tokens"));
  BufferOptions across_nodes = one_rank_options(4);
  across_nodes.topology = Topology{2, 1};
  EXPECT_TRUE(testing::contains(testing::invalid_argument_message([&] { Buffer buffer(across_nodes); }),
                                "sizing.normal_heap_input_tokens: expected 0 across nodes"));
}

TEST(NormalHeapInput, ViewsOutsideTheInputAreRefused) {
  Buffer without(one_rank_options(0));
  without.connect({without.local_handle()});
  EXPECT_TRUE(
      testing::contains(testing::invalid_argument_message([&] { without.normal_input(1, 256); }),
                        "normal_input: expected a buffer sized with BufferSizing::normal_heap_input_tokens"));
  Buffer buffer(one_rank_options(8));
  buffer.connect({buffer.local_handle()});
  EXPECT_TRUE(testing::contains(testing::invalid_argument_message([&] { buffer.normal_input(9, 256); }),
                                "num_tokens: expected 0..8"));
  EXPECT_TRUE(testing::contains(testing::invalid_argument_message([&] { buffer.normal_input(8, 512); }),
                                "hidden: expected 1..256"));
  EXPECT_TRUE(testing::contains(
      testing::invalid_argument_message([&] { buffer.normal_input(8, 64, DType::fp8_e4m3); }),
      "hidden: expected a multiple of 128 for fp8"));
  EXPECT_TRUE(
      testing::contains(testing::invalid_argument_message([&] { buffer.normal_input(8, 256, DType::f32); }),
                        "dtype: expected bf16 or fp8_e4m3"));
  // bf16 and fp8 views of one input share its memory; fp8's scales lie after the largest fp8 x.
  const NormalInputViews bf16 = buffer.normal_input(8, 256);
  const NormalInputViews fp8 = buffer.normal_input(8, 256, DType::fp8_e4m3);
  EXPECT_EQ(bf16.x.data, fp8.x.data);
  EXPECT_FALSE(bf16.x_scales.defined());
  ASSERT_TRUE(fp8.x_scales.defined());
  EXPECT_GE(static_cast<uint8_t*>(fp8.x_scales.data), static_cast<uint8_t*>(fp8.x.data) + 8 * 256);
  EXPECT_EQ(fp8.x_scales.shape[0], 8);
  EXPECT_EQ(fp8.x_scales.shape[1], 2);
}

// A dispatch on a Buffer with a heap input whose x (or scales) are elsewhere: copied into the views first
// (core/staged_heap_input.hpp), received bit for bit; a tensor that overlaps a view without being it is
// refused before anything is written (one rank, so a wrongly accepted call would run rather than hang).
TEST(NormalHeapInput, DispatchesFromElsewhereAreStagedAndOverlapsRefusedNamingTheArgument) {
  Buffer buffer(one_rank_options(8));
  buffer.connect({buffer.local_handle()});
  const NormalInputViews bf16 = buffer.normal_input(4, 256);
  const NormalInputViews fp8 = buffer.normal_input(4, 256, DType::fp8_e4m3);
  Tensor own_x = Tensor::empty(DType::bf16, {4, 256});
  for (int64_t i = 0; i < 4 * 256; ++i) own_x.as<uint16_t>()[i] = static_cast<uint16_t>(0x3c00 + i % 977);
  Tensor topk = Tensor::empty(DType::i64, {4, 2});
  for (int i = 0; i < 8; ++i) topk.as<int64_t>()[i] = i % 4;
  Tensor own_scales = Tensor::empty(DType::f32, {4, 2});
  for (int i = 0; i < 8; ++i) own_scales.as<float>()[i] = 0.25f * static_cast<float>(i + 1);
  DispatchArgs args;
  args.topk_idx = topk;
  args.num_experts = 4;
  // Overlapping the view without being it: a part of the view that does not start where it does.
  args.x = TensorView(static_cast<uint16_t*>(bf16.x.data) + 256, DType::bf16, {4, 256});
  EXPECT_TRUE(testing::contains(testing::invalid_argument_message([&] { buffer.dispatch(args); }),
                                "x: expected Buffer::normal_input's view or a tensor apart from it"));
  // Staged: the rows reach the receiver as given (one rank: every token comes back, in order), and the view
  // holds the copy.
  std::memset(bf16.x.data, 0, bf16.x.nbytes());
  args.x = own_x;
  const DispatchResult staged = buffer.dispatch(args);
  ASSERT_EQ(staged.num_recv_tokens, 4);
  EXPECT_EQ(std::memcmp(staged.recv_x.data(), own_x.data(), own_x.nbytes()), 0);
  EXPECT_EQ(std::memcmp(bf16.x.data, own_x.data(), own_x.nbytes()), 0);
  // fp8: x in its view, the scales staged; then scales overlapping their view, refused.
  std::memset(fp8.x.data, 0x38, fp8.x.nbytes());
  args.x = fp8.x;
  args.x_scales = own_scales;
  const DispatchResult scaled = buffer.dispatch(args);
  ASSERT_EQ(scaled.num_recv_tokens, 4);
  EXPECT_EQ(std::memcmp(scaled.recv_x_scales.data(), own_scales.data(), own_scales.nbytes()), 0);
  args.x_scales = TensorView(static_cast<float*>(fp8.x_scales.data) + 1, DType::f32, {4, 2});
  EXPECT_TRUE(
      testing::contains(testing::invalid_argument_message([&] { buffer.dispatch(args); }),
                        "x_scales: expected Buffer::normal_input's x_scales view or a tensor apart from it"));
  // Column-major scales (DeepEP's: the memory of [B, N]) are transposed into the row-major view; the view
  // itself, or anything overlapping it, cannot be column-major.
  const Tensor columns = testing::transpose_scales(own_scales);
  args.x_scales = columns;
  args.x_scales_column_major = true;
  const DispatchResult transposed = buffer.dispatch(args);
  ASSERT_EQ(transposed.num_recv_tokens, 4);
  EXPECT_EQ(std::memcmp(transposed.recv_x_scales.data(), own_scales.data(), own_scales.nbytes()), 0);
  EXPECT_EQ(std::memcmp(fp8.x_scales.data, own_scales.data(), own_scales.nbytes()), 0);
  args.x_scales = TensorView(fp8.x_scales.data, DType::f32, {2, 4});
  EXPECT_TRUE(testing::contains(
      testing::invalid_argument_message([&] { buffer.dispatch(args); }),
      "x_scales: expected column-major scales apart from Buffer::normal_input's x_scales view"));
  // More top-k columns than the heap keeps for the receivers to pull the routing by (sizing.topk = 2).
  args.x = own_x;
  args.x_scales = TensorView();
  args.x_scales_column_major = false;
  Tensor wide_topk = Tensor::empty(DType::i64, {4, 3});
  for (int i = 0; i < 12; ++i) wide_topk.as<int64_t>()[i] = i % 4;
  args.topk_idx = wide_topk;
  EXPECT_TRUE(testing::contains(testing::invalid_argument_message([&] { buffer.dispatch(args); }),
                                "topk_idx: expected at most 2 columns (sizing.topk"));
  // The views themselves go through, read where they are.
  args.topk_idx = topk;
  args.x = bf16.x;
  std::memset(bf16.x.data, 0, bf16.x.nbytes());
  const DispatchResult result = buffer.dispatch(args);
  EXPECT_EQ(result.num_recv_tokens, 4);
}

TEST(NormalHeapCombineInput, BadSizingsAndViewsAreRefusedNamingTheField) {
  BufferOptions too_many = one_rank_options(0);
  too_many.sizing.normal_heap_combine_rows = 17;  // one rank of at most 16 tokens
  EXPECT_TRUE(
      testing::contains(testing::invalid_argument_message([&] { Buffer buffer(too_many); }),
                        "sizing.normal_heap_combine_rows: expected 0..num_ranks * max_tokens_per_rank (16), "
                        "got 17"));
  BufferOptions across_nodes = one_rank_options(0);
  across_nodes.topology = Topology{2, 1};
  across_nodes.sizing.normal_heap_combine_rows = 4;
  EXPECT_TRUE(testing::contains(testing::invalid_argument_message([&] { Buffer buffer(across_nodes); }),
                                "sizing.normal_heap_combine_rows: expected 0 across nodes"));

  Buffer without(one_rank_options(0));
  without.connect({without.local_handle()});
  EXPECT_TRUE(testing::contains(
      testing::invalid_argument_message([&] { without.normal_combine_input(DispatchHandle()); }),
      "normal_combine_input: expected a buffer sized with BufferSizing::normal_heap_combine_rows"));
  BufferOptions options = one_rank_options(0);
  options.sizing.normal_heap_combine_rows = 3;
  Buffer buffer(options);
  buffer.connect({buffer.local_handle()});
  EXPECT_TRUE(testing::contains(
      testing::invalid_argument_message([&] { buffer.normal_combine_input(DispatchHandle()); }),
      "handle: expected a handle from dispatch"));
  Tensor x = Tensor::empty(DType::bf16, {4, 256});
  std::memset(x.data(), 0, x.nbytes());
  Tensor topk = Tensor::empty(DType::i64, {4, 2});
  for (int i = 0; i < 8; ++i) topk.as<int64_t>()[i] = i % 4;
  DispatchArgs dispatch;
  dispatch.x = x;
  dispatch.topk_idx = topk;
  dispatch.num_experts = 4;
  const DispatchResult received = buffer.dispatch(dispatch);  // 4 rows: more than the input holds
  EXPECT_TRUE(testing::contains(
      testing::invalid_argument_message([&] { buffer.normal_combine_input(received.handle); }),
      "handle: expected a dispatch of at most 3 received rows"));
}

// A combine on a Buffer with a combine input whose x (or weights) are elsewhere: copied into the views first
// and combined bit for bit as from the views; overlapping a view without being it, refused before anything is
// written or waited for.
TEST(NormalHeapCombineInput, CombinesFromElsewhereAreStagedAndOverlapsRefusedNamingTheArgument) {
  BufferOptions options = one_rank_options(0);
  options.sizing.normal_heap_combine_rows = 16;
  Buffer buffer(options);
  buffer.connect({buffer.local_handle()});
  Tensor x = Tensor::empty(DType::bf16, {4, 256});
  for (int64_t i = 0; i < 4 * 256; ++i) x.as<uint16_t>()[i] = static_cast<uint16_t>(0x3c00 + i % 613);
  Tensor topk = Tensor::empty(DType::i64, {4, 2});
  Tensor weights = Tensor::empty(DType::f32, {4, 2});
  for (int i = 0; i < 8; ++i) {
    topk.as<int64_t>()[i] = i % 4;
    weights.as<float>()[i] = 0.5f;
  }
  DispatchArgs dispatch;
  dispatch.x = x;
  dispatch.topk_idx = topk;
  dispatch.topk_weights = weights;
  dispatch.num_experts = 4;
  const DispatchResult received = buffer.dispatch(dispatch);
  const NormalCombineInputViews views = buffer.normal_combine_input(received.handle);
  ASSERT_TRUE(views.topk_weights.defined());
  EXPECT_EQ(views.x.shape[0], 4);
  EXPECT_EQ(views.x.shape[1], 256);
  EXPECT_EQ(views.topk_weights.shape[1], 2);
  CombineArgs args;
  args.handle = &received.handle;
  // Overlapping the views without being them: refused, naming each.
  args.x = TensorView(static_cast<uint16_t*>(views.x.data) + 8, DType::bf16, {4, 256});
  EXPECT_TRUE(
      testing::contains(testing::invalid_argument_message([&] { buffer.combine(args); }),
                        "x: expected Buffer::normal_combine_input's x view or a tensor apart from it"));
  args.x = views.x;
  args.topk_weights = TensorView(static_cast<float*>(views.topk_weights.data) + 1, DType::f32, {4, 2});
  EXPECT_TRUE(testing::contains(
      testing::invalid_argument_message([&] { buffer.combine(args); }),
      "topk_weights: expected Buffer::normal_combine_input's topk_weights view or a tensor apart from it"));
  // Staged: the dispatch's own outputs, copied into the views. Each token's rows summed (both of its experts
  // are on this rank, so it came once), weights likewise.
  std::memset(views.x.data, 0, views.x.nbytes());
  args.x = received.recv_x;
  args.topk_weights = received.recv_topk_weights;
  const CombineResult staged = buffer.combine(args);
  EXPECT_EQ(std::memcmp(staged.combined_x.data(), x.data(), x.nbytes()), 0);
  EXPECT_EQ(std::memcmp(staged.combined_topk_weights.data(), weights.data(), weights.nbytes()), 0);
  EXPECT_EQ(std::memcmp(views.x.data, received.recv_x.data(), received.recv_x.nbytes()), 0);
  // The views themselves go through, read where they are.
  std::memcpy(views.topk_weights.data, received.recv_topk_weights.data(),
              received.recv_topk_weights.nbytes());
  args.x = views.x;
  args.topk_weights = views.topk_weights;
  const CombineResult combined = buffer.combine(args);
  EXPECT_EQ(std::memcmp(combined.combined_x.data(), x.data(), x.nbytes()), 0);
  EXPECT_EQ(std::memcmp(combined.combined_topk_weights.data(), weights.data(), weights.nbytes()), 0);
}

// What a home takes from its peers on trust is checked before any read. Ranks on the handles of different
// dispatches are refused at the opening barrier already (tests/cpu/mismatched_calls_test.cpp), so this writes
// the table by hand, as a corrupt peer would: rank 0 says rank 1's 8 rows on its one channel start at row 8
// of its 10-row combine input. Rank 1's receiver refuses before reading; a range that fits is taken.
TEST(NormalHeapCombineInput, APublishedRangeOutsideThePeersInputIsRefusedBeforeAnyRead) {
  constexpr int kTokens = 8, kHidden = 256;
  const common::NormalCombineInputLayout input{0, 10, kHidden, 1, 2, 1};
  std::vector<uint8_t> heap0(input.bytes()), heap1(input.bytes());
  common::SymHeap view;  // rank 1's
  view.base = heap1.data();
  view.bytes = heap1.size();
  view.rank = 1;
  view.num_ranks = 2;
  view.peer_offset[0] = reinterpret_cast<intptr_t>(heap0.data()) - reinterpret_cast<intptr_t>(heap1.data());
  std::vector<uint8_t> in_rank(kTokens * 2, 0);
  for (int token = 0; token < kTokens; ++token) in_rank[token * 2] = 1;  // every token's row is on rank 0
  cpu::CombineContext context{};
  context.heap = &view;
  context.message = detail::combine_message(kHidden, 1, false);
  context.rank = 1;
  context.num_ranks = 2;
  context.ranks_per_node = 2;
  context.num_channels = 1;
  context.num_tokens = kTokens;
  context.is_token_in_rank = in_rank.data();
  context.rows_in_place = true;
  context.input = input;
  input.first_rows(heap1.data(), 0)[0] = 8;
  std::string message;
  try {
    cpu::CombineReceiver receiver(context, 0);
  } catch (const SystemError& error) {
    message = error.what();
  }
  EXPECT_TRUE(testing::contains(message,
                                "rank 1's receiver on channel 0 found its 8 rows on rank 0 at [8, 16), "
                                "outside that rank's heap combine input of 10 rows"))
      << message;
  input.first_rows(heap1.data(), 0)[0] = 2;
  EXPECT_NO_THROW(cpu::CombineReceiver(context, 0));
}

}  // namespace
}  // namespace switchyard
