// Bad input is refused on the host with an InvalidArgument that names the argument, before anything
// is written; a missing peer ends in a TimeoutError that names the rank and the role (DESIGN.md,
// Errors and timeouts).
#include "switchyard/errors.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <functional>
#include <future>
#include <memory>

#include "support/normal_round_trip.hpp"
#include "support/refusal.hpp"
#include "switchyard/buffer.hpp"
#include "switchyard/group.hpp"
#include "workload/workload.hpp"

namespace switchyard {
namespace {

using testing::contains;
using testing::invalid_argument_message;

// NOTES: short, so the timeout tests finish quickly; the calls that must succeed here are tiny.
constexpr double kShortTimeoutSeconds = 1.0;
// A timeout of 1 s must surface well within this, even on a loaded 2-core CI machine.
constexpr double kTimeoutDeadlineSeconds = 15.0;

bool is_identifier_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
}

// True when `text` mentions `name` as a whole identifier (so "x" does not match "x_scales" or "max").
bool mentions(const std::string& text, const std::string& name) {
  for (size_t at = text.find(name); at != std::string::npos; at = text.find(name, at + 1)) {
    const bool starts = at == 0 || !is_identifier_char(text[at - 1]);
    const size_t end = at + name.size();
    const bool ends = end >= text.size() || !is_identifier_char(text[end]);
    if (starts && ends) return true;
  }
  return false;
}

std::string lower(std::string text) {
  for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return text;
}

bool still_poisoned(const TensorView& tensor) {
  const uint8_t* bytes = tensor.as<const uint8_t>();
  for (size_t i = 0; i < tensor.nbytes(); ++i) {
    if (bytes[i] != 0xA5) return false;
  }
  return true;
}

Config short_timeout_config() {
  Config config;
  config.timeout_seconds = kShortTimeoutSeconds;
  return config;
}

workload::Shape small_shape(int num_ranks = 1) {
  workload::Shape shape;
  shape.topology = Topology::single_node(num_ranks);
  shape.tokens_per_rank = 4;
  shape.hidden = 256;
  shape.topk = 2;
  shape.num_experts = 4 * num_ranks;
  shape.dtype = DType::bf16;
  return shape;
}

BufferOptions options_for(const workload::Shape& shape, int rank) {
  BufferOptions options;
  options.topology = shape.topology;
  options.rank = rank;
  options.backend = Backend::cpu;
  options.config = short_timeout_config();
  options.sizing = testing::sizing_for(shape);
  return options;
}

// One rank (R = 1), connected to itself: no threads needed.
std::unique_ptr<Buffer> connected_single_rank(const workload::Shape& shape) {
  auto buffer = std::make_unique<Buffer>(options_for(shape, 0));
  buffer->connect({buffer->local_handle()});
  return buffer;
}

// Inputs of one rank where every token has at least one valid expert, so that the receive row
// count is N and the poisoned outputs below have the shape a valid call would use.
struct SingleRankCall {
  workload::Shape shape;
  workload::RankData data;
  Tensor out_recv_x, out_recv_x_scales, out_recv_topk_idx, out_recv_topk_weights;

  explicit SingleRankCall(const workload::Shape& s) : shape(s) {
    data = workload::generate(shape, 0x5eed)[0];
    int64_t* ids = data.topk_idx.as<int64_t>();
    for (int64_t token = 0; token < data.topk_idx.size(0); ++token)
      ids[token * shape.topk] = token % shape.num_experts;
    const int64_t rows = data.x.size(0);
    out_recv_x = poisoned(shape.dtype, {rows, shape.hidden});
    if (shape.dtype == DType::fp8_e4m3) out_recv_x_scales = poisoned(DType::f32, {rows, shape.hidden / 128});
    out_recv_topk_idx = poisoned(DType::i64, {rows, shape.topk});
    out_recv_topk_weights = poisoned(DType::f32, {rows, shape.topk});
  }

  static Tensor poisoned(DType dtype, std::initializer_list<int64_t> dims) {
    Tensor tensor = Tensor::empty(dtype, dims);
    workload::poison(tensor);
    return tensor;
  }

  DispatchArgs args() const {
    DispatchArgs args;
    args.x = data.x;
    args.x_scales = data.x_scales;
    args.topk_idx = data.topk_idx;
    args.topk_weights = data.topk_weights;
    args.num_experts = shape.num_experts;
    args.out_recv_x = out_recv_x;
    args.out_recv_x_scales = out_recv_x_scales;
    args.out_recv_topk_idx = out_recv_topk_idx;
    args.out_recv_topk_weights = out_recv_topk_weights;
    return args;
  }

  void expect_outputs_untouched() const {
    EXPECT_TRUE(still_poisoned(out_recv_x)) << "out_recv_x was written";
    if (out_recv_x_scales.defined()) {
      EXPECT_TRUE(still_poisoned(out_recv_x_scales)) << "out_recv_x_scales was written";
    }
    EXPECT_TRUE(still_poisoned(out_recv_topk_idx)) << "out_recv_topk_idx was written";
    EXPECT_TRUE(still_poisoned(out_recv_topk_weights)) << "out_recv_topk_weights was written";
  }
};

// Expects dispatch(args) to throw InvalidArgument mentioning `argument` (and `given`, when not
// empty), with the outputs untouched; then expects the buffer to still work.
void expect_dispatch_refused(const workload::Shape& shape,
                             const std::function<void(SingleRankCall&, DispatchArgs&)>& spoil,
                             const std::vector<std::string>& arguments, const std::string& given = {}) {
  auto buffer = connected_single_rank(shape);
  SingleRankCall call(shape);
  DispatchArgs args = call.args();
  spoil(call, args);
  const std::string message = invalid_argument_message([&] { buffer->dispatch(args); });
  SCOPED_TRACE("message: " + message);
  bool named = false;
  for (const std::string& argument : arguments) named = named || mentions(message, argument);
  EXPECT_TRUE(named) << "the message names none of the expected arguments";
  if (!given.empty()) {
    EXPECT_TRUE(contains(message, given)) << "the message does not show what was given: " << given;
  }
  call.expect_outputs_untouched();

  // Refusing bad input leaves the buffer usable.
  SingleRankCall good(shape);
  EXPECT_NO_THROW(buffer->dispatch(good.args()));
}

TEST(DispatchErrors, ExpertIdBeyondNumExpertsIsRefused) {
  expect_dispatch_refused(
      small_shape(),
      [](SingleRankCall& call, DispatchArgs&) {
        call.data.topk_idx.as<int64_t>()[3] = 4;  // num_experts is 4
      },
      {"topk_idx"}, "4");
}

// Without topk_idx only a layout (or a cached handle) can route the tokens.
TEST(DispatchErrors, DispatchWithoutTopkIdxOrLayoutIsRefused) {
  expect_dispatch_refused(
      small_shape(),
      [](SingleRankCall&, DispatchArgs& args) {
        args.topk_idx = TensorView();
        args.topk_weights = TensorView();
        args.layout = nullptr;
      },
      {"topk_idx"}, "got none");
}

// Routed by the layout alone, the receivers count what num_tokens_per_expert claims: a negative count
// is refused rather than reported.
TEST(DispatchErrors, NegativeExpertCountInALayoutWithoutTopkIdxIsRefused) {
  const workload::Shape shape = small_shape();
  DispatchLayout layout;
  layout.num_tokens_per_rank = Tensor::empty(DType::i32, {1});
  layout.num_tokens_per_node = Tensor::empty(DType::i32, {1});
  layout.num_tokens_per_expert = Tensor::empty(DType::i32, {shape.num_experts});
  layout.is_token_in_rank = Tensor::empty(DType::boolean, {shape.tokens_per_rank, 1});
  for (int expert = 0; expert < shape.num_experts; ++expert)
    layout.num_tokens_per_expert.as<int32_t>()[expert] = 1;
  layout.num_tokens_per_expert.as<int32_t>()[2] = -3;
  for (int64_t token = 0; token < shape.tokens_per_rank; ++token)
    layout.is_token_in_rank.as<uint8_t>()[token] = 1;
  layout.num_tokens_per_rank.as<int32_t>()[0] = static_cast<int32_t>(shape.tokens_per_rank);
  layout.num_tokens_per_node.as<int32_t>()[0] = static_cast<int32_t>(shape.tokens_per_rank);
  expect_dispatch_refused(
      shape,
      [&](SingleRankCall&, DispatchArgs& args) {
        args.topk_idx = TensorView();
        args.topk_weights = TensorView();
        args.layout = &layout;
      },
      {"layout.num_tokens_per_expert"}, "-3");
}

TEST(DispatchErrors, ExpertIdBelowMinusOneIsRefused) {
  expect_dispatch_refused(
      small_shape(), [](SingleRankCall& call, DispatchArgs&) { call.data.topk_idx.as<int64_t>()[5] = -2; },
      {"topk_idx"}, "-2");
}

TEST(DispatchErrors, WrongDtypeOfXIsRefused) {
  Tensor x_f32 = Tensor::empty(DType::f32, {4, 256});
  expect_dispatch_refused(
      small_shape(), [&](SingleRankCall&, DispatchArgs& args) { args.x = x_f32; }, {"x"}, "f32");
}

TEST(DispatchErrors, WrongDtypeOfTopkIdxIsRefused) {
  Tensor topk_i32 = Tensor::empty(DType::i32, {4, 2});
  std::fill(topk_i32.as<int32_t>(), topk_i32.as<int32_t>() + 8, 0);
  expect_dispatch_refused(
      small_shape(), [&](SingleRankCall&, DispatchArgs& args) { args.topk_idx = topk_i32; }, {"topk_idx"},
      "i32");
}

TEST(DispatchErrors, WrongDtypeOfWeightsIsRefused) {
  Tensor weights_bf16 = Tensor::empty(DType::bf16, {4, 2});
  expect_dispatch_refused(
      small_shape(), [&](SingleRankCall&, DispatchArgs& args) { args.topk_weights = weights_bf16; },
      {"topk_weights"}, "bf16");
}

TEST(DispatchErrors, TopkIdxRowsDifferentFromXRowsAreRefused) {
  expect_dispatch_refused(small_shape(),
                          [](SingleRankCall& call, DispatchArgs& args) {
                            TensorView view = call.data.topk_idx.view();
                            view.shape[0] = 3;  // x has 4 rows
                            args.topk_idx = view;
                            TensorView weights = call.data.topk_weights.view();
                            weights.shape[0] = 3;
                            args.topk_weights = weights;
                          },
                          {"topk_idx"});
}

TEST(DispatchErrors, WeightsShapeDifferentFromTopkIdxIsRefused) {
  Tensor weights_wide = Tensor::empty(DType::f32, {4, 3});  // topk_idx is [4, 2]
  expect_dispatch_refused(small_shape(),
                          [&](SingleRankCall&, DispatchArgs& args) { args.topk_weights = weights_wide; },
                          {"topk_weights"});
}

TEST(DispatchErrors, Fp8WithHiddenNotAMultipleOf128IsRefused) {
  workload::Shape shape = small_shape();
  shape.dtype = DType::fp8_e4m3;
  shape.hidden = 256;
  Tensor x_odd = Tensor::empty(DType::fp8_e4m3, {4, 192});
  Tensor scales = Tensor::empty(DType::f32, {4, 2});
  expect_dispatch_refused(
      shape,
      [&](SingleRankCall&, DispatchArgs& args) {
        args.x = x_odd;
        args.x_scales = scales;
      },
      {"x", "hidden"}, "128");
}

TEST(DispatchErrors, Fp8WithoutScalesIsRefused) {
  workload::Shape shape = small_shape();
  shape.dtype = DType::fp8_e4m3;
  expect_dispatch_refused(shape, [](SingleRankCall&, DispatchArgs& args) { args.x_scales = TensorView(); },
                          {"x_scales"});
}

// x_scales_column_major takes the scales' transpose [H / 128, N]: row-major [N, H / 128] scales with the
// flag are refused (here N = 4, H / 128 = 2), naming x_scales and the flag.
TEST(DispatchErrors, ColumnMajorScalesOfTheRowMajorShapeAreRefused) {
  workload::Shape shape = small_shape();
  shape.dtype = DType::fp8_e4m3;
  expect_dispatch_refused(
      shape, [](SingleRankCall&, DispatchArgs& args) { args.x_scales_column_major = true; }, {"x_scales"},
      "x_scales_column_major");
}

TEST(DispatchErrors, ColumnMajorScalesWithBf16XAreRefused) {
  expect_dispatch_refused(
      small_shape(), [](SingleRankCall&, DispatchArgs& args) { args.x_scales_column_major = true; },
      {"x_scales_column_major"}, "bf16");
}

TEST(DispatchErrors, TokensBeyondBufferSizingAreRefused) {
  workload::Shape shape = small_shape();
  auto buffer = [&] {
    BufferOptions options = options_for(shape, 0);
    options.sizing.max_tokens_per_rank = 3;  // the call has 4
    auto b = std::make_unique<Buffer>(options);
    b->connect({b->local_handle()});
    return b;
  }();
  SingleRankCall call(shape);
  const std::string message = invalid_argument_message([&] { buffer->dispatch(call.args()); });
  SCOPED_TRACE("message: " + message);
  EXPECT_TRUE(contains(lower(message), "tokens")) << "the message does not say what ran out";
  EXPECT_TRUE(contains(message, "3") && contains(message, "4"))
      << "the message lacks the capacity or the count";
  call.expect_outputs_untouched();
}

TEST(DispatchErrors, CallLargerThanAnExplicitHeapIsRefused) {
  workload::Shape small = small_shape();
  small.hidden = 128;
  BufferOptions options = options_for(small, 0);
  options.heap_bytes = normal_heap_bytes(options.topology, options.config, options.sizing);
  Buffer buffer(options);
  buffer.connect({buffer.local_handle()});
  workload::Shape large = small_shape();
  large.hidden = 8192;
  SingleRankCall call(large);
  const std::string message = invalid_argument_message([&] { buffer.dispatch(call.args()); });
  SCOPED_TRACE("message: " + message);
  EXPECT_TRUE(contains(lower(message), "heap")) << "the message does not name the heap";
  call.expect_outputs_untouched();

  // The heap normal_heap_bytes() computed is enough for exactly the sizing it was computed for.
  SingleRankCall fitting(small);
  EXPECT_NO_THROW(buffer.dispatch(fitting.args()));
}

TEST(DispatchErrors, NumExpertsNotDivisibleByRanksIsRefusedOnEveryRank) {
  workload::Shape shape = small_shape(2);
  std::vector<std::string> dispatch_messages(2), layout_messages(2);
  run_ranks(2, [&](Group& group) {
    Buffer buffer(options_for(shape, group.rank()));
    buffer.connect(group.allgather(buffer.local_handle()));
    group.barrier();                      // a peer may only connect while this rank's Buffer is alive
    SingleRankCall call(small_shape(1));  // expert ids < 4
    DispatchArgs args = call.args();
    args.num_experts = 3;
    dispatch_messages[group.rank()] = invalid_argument_message([&] { buffer.dispatch(args); });
    layout_messages[group.rank()] =
        invalid_argument_message([&] { buffer.get_dispatch_layout(call.data.topk_idx, 3); });
    call.expect_outputs_untouched();
  });
  for (int rank = 0; rank < 2; ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank) + " dispatch: " + dispatch_messages[rank] +
                 " | get_dispatch_layout: " + layout_messages[rank]);
    EXPECT_TRUE(mentions(dispatch_messages[rank], "num_experts"));
    EXPECT_TRUE(mentions(layout_messages[rank], "num_experts"));
  }
}

// ---- combine ----------------------------------------------------------------------------------

struct CombineFixture {
  workload::Shape shape = small_shape();
  std::unique_ptr<Buffer> buffer = connected_single_rank(shape);
  SingleRankCall call{shape};
  DispatchResult dispatched = buffer->dispatch(call.args());
  Tensor y = workload::synthetic_expert(dispatched.recv_x, dispatched.recv_x_scales, 0);
  Tensor out_combined_x = SingleRankCall::poisoned(DType::bf16, {shape.tokens_per_rank, shape.hidden});
};

TEST(CombineErrors, HandleFromAnotherBufferIsRefused) {
  CombineFixture fixture;
  auto other = connected_single_rank(fixture.shape);
  CombineArgs args;
  args.x = fixture.y;
  args.handle = &fixture.dispatched.handle;
  args.out_combined_x = fixture.out_combined_x;
  const std::string message = invalid_argument_message([&] { other->combine(args); });
  SCOPED_TRACE("message: " + message);
  EXPECT_TRUE(mentions(message, "handle"));
  EXPECT_TRUE(still_poisoned(fixture.out_combined_x)) << "out_combined_x was written";
}

TEST(CombineErrors, RowsOfXDifferentFromReceivedTokensAreRefused) {
  CombineFixture fixture;
  TensorView short_y = fixture.y.view();
  short_y.shape[0] -= 1;
  CombineArgs args;
  args.x = short_y;
  args.handle = &fixture.dispatched.handle;
  args.out_combined_x = fixture.out_combined_x;
  const std::string message = invalid_argument_message([&] { fixture.buffer->combine(args); });
  SCOPED_TRACE("message: " + message);
  EXPECT_TRUE(mentions(message, "x"));
  EXPECT_TRUE(still_poisoned(fixture.out_combined_x)) << "out_combined_x was written";
}

TEST(CombineErrors, MissingHandleIsRefused) {
  CombineFixture fixture;
  CombineArgs args;
  args.x = fixture.y;
  args.out_combined_x = fixture.out_combined_x;
  const std::string message = invalid_argument_message([&] { fixture.buffer->combine(args); });
  SCOPED_TRACE("message: " + message);
  EXPECT_TRUE(mentions(message, "handle"));
  EXPECT_TRUE(still_poisoned(fixture.out_combined_x)) << "out_combined_x was written";
}

// A bias must be bf16 [tokens of the dispatch, hidden of x]: each wrong one is refused naming the
// argument, what was expected and what was given, before anything is written.
TEST(CombineErrors, BiasOfTheWrongDtypeOrShapeIsRefused) {
  CombineFixture fixture;
  const int64_t tokens = fixture.shape.tokens_per_rank;
  const int64_t hidden = fixture.shape.hidden;
  struct BadBias {
    const char* name;
    Tensor bias;
    const char* expected;  // a piece of the message
  };
  const std::vector<BadBias> cases = {
      {"bias0", Tensor::empty(DType::f32, {tokens, hidden}), "dtype bf16"},
      {"bias1", Tensor::empty(DType::bf16, {tokens + 1, hidden}), "tokens of the dispatch"},
      {"bias0", Tensor::empty(DType::bf16, {tokens, hidden / 2}), "hidden of x"},
      {"bias1", Tensor::empty(DType::bf16, {tokens * hidden}), "2 dimensions"},
  };
  for (const BadBias& bad : cases) {
    CombineArgs args;
    args.x = fixture.y;
    args.handle = &fixture.dispatched.handle;
    args.out_combined_x = fixture.out_combined_x;
    (std::string(bad.name) == "bias0" ? args.bias0 : args.bias1) = bad.bias;
    const std::string message = invalid_argument_message([&] { fixture.buffer->combine(args); });
    SCOPED_TRACE("message: " + message);
    EXPECT_TRUE(mentions(message, bad.name));
    EXPECT_TRUE(mentions(message, bad.expected));
    EXPECT_TRUE(mentions(message, bad.bias.view().describe()));
    EXPECT_TRUE(still_poisoned(fixture.out_combined_x)) << "out_combined_x was written";
  }
}

// ---- connect ----------------------------------------------------------------------------------

TEST(ConnectErrors, WrongNumberOfHandlesIsRefused) {
  workload::Shape shape = small_shape(1);
  Buffer buffer(options_for(shape, 0));
  const std::string message = invalid_argument_message([&] {
    buffer.connect({buffer.local_handle(), buffer.local_handle()});
  });
  SCOPED_TRACE("message: " + message);
  EXPECT_TRUE(contains(message, "handles"));
  EXPECT_TRUE(contains(message, "1") && contains(message, "2")) << "expected and given counts";
  EXPECT_FALSE(buffer.is_connected());
}

TEST(ConnectErrors, HandleOfADifferentTopologyIsRefused) {
  workload::Shape shape = small_shape(2);
  Buffer rank0(options_for(shape, 0));
  BufferOptions other_options = options_for(shape, 1);
  other_options.topology = Topology{2, 1};  // two nodes instead of one
  Buffer other_rank1(other_options);
  const std::string message = invalid_argument_message([&] {
    rank0.connect({rank0.local_handle(), other_rank1.local_handle()});
  });
  SCOPED_TRACE("message: " + message);
  EXPECT_TRUE(contains(message, "handles"));
  EXPECT_TRUE(contains(lower(message), "topology"));
  EXPECT_FALSE(rank0.is_connected());
}

TEST(ConnectErrors, HandleOfTheWrongRankIndexIsRefused) {
  workload::Shape shape = small_shape(2);
  Buffer rank0(options_for(shape, 0));
  Buffer another_rank0(options_for(shape, 0));
  const std::string message = invalid_argument_message([&] {
    rank0.connect({rank0.local_handle(), another_rank0.local_handle()});
  });
  SCOPED_TRACE("message: " + message);
  EXPECT_TRUE(contains(message, "handles"));
  EXPECT_TRUE(contains(lower(message), "rank"));
  EXPECT_FALSE(rank0.is_connected());
}

TEST(ConnectErrors, GarbageHandleBytesAreRefused) {
  Buffer buffer(options_for(small_shape(1), 0));
  const std::string message = invalid_argument_message([&] { buffer.connect({Bytes{1, 2, 3}}); });
  SCOPED_TRACE("message: " + message);
  EXPECT_TRUE(contains(message, "handles"));
  EXPECT_FALSE(buffer.is_connected());
}

// ---- peers that never arrive or disagree --------------------------------------------------------

TEST(Timeouts, DispatchWithoutItsPeerTimesOutNamingRankAndRole) {
  workload::Shape shape = small_shape(2);
  std::promise<void> rank0_returned;
  std::shared_future<void> release = rank0_returned.get_future().share();
  std::string message;
  bool timed_out = false;
  double seconds = 0;
  run_ranks(2, [&](Group& group) {
    Buffer buffer(options_for(shape, group.rank()));
    buffer.connect(group.allgather(buffer.local_handle()));
    if (group.rank() == 1) {
      // Never dispatches; leaves once rank 0 has its answer (or after a minute, if rank 0 hangs).
      release.wait_for(std::chrono::seconds(60));
      return;
    }
    // Rank 1 is released however rank 0 leaves.
    struct Release {
      std::promise<void>& promise;
      ~Release() { promise.set_value(); }
    } release_rank1{rank0_returned};
    SingleRankCall call(small_shape(1));  // expert ids < 4: all on rank 0, yet rank 0 needs rank 1's counts
    DispatchArgs args = call.args();
    args.num_experts = shape.num_experts;
    const auto start = std::chrono::steady_clock::now();
    try {
      buffer.dispatch(args);
    } catch (const TimeoutError& error) {
      timed_out = true;
      message = error.what();
    } catch (const std::exception& error) {
      message = std::string("not a TimeoutError: ") + error.what();
    }
    seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  });
  SCOPED_TRACE("message: " + message);
  EXPECT_TRUE(timed_out);
  EXPECT_LT(seconds, kTimeoutDeadlineSeconds);
  EXPECT_GE(seconds, kShortTimeoutSeconds * 0.5) << "gave up long before the configured timeout";
  const std::string text = lower(message);
  EXPECT_TRUE(contains(text, "rank 0") || contains(text, "rank=0") || contains(text, "rank: 0"))
      << "the message does not name the rank";
  bool names_role = false;
  for (const char* role : {"sender", "receiver", "notify", "barrier", "forwarder", "coordinator", "role"}) {
    names_role = names_role || contains(text, role);
  }
  EXPECT_TRUE(names_role) << "the message does not name the role";
}

TEST(Timeouts, BadInputOnOneRankIsRefusedThereAndItsPeerTimesOutInsteadOfHanging) {
  workload::Shape shape = small_shape(2);
  std::vector<std::string> messages(2);
  std::vector<int> invalid_argument(2, 0), other_error(2, 0);
  std::vector<double> seconds(2, 0);
  run_ranks(2, [&](Group& group) {
    const int rank = group.rank();
    Buffer buffer(options_for(shape, rank));
    buffer.connect(group.allgather(buffer.local_handle()));
    SingleRankCall call(small_shape(1));
    if (rank == 0) call.data.topk_idx.as<int64_t>()[0] = shape.num_experts;  // out of range
    DispatchArgs args = call.args();
    args.num_experts = shape.num_experts;
    const auto start = std::chrono::steady_clock::now();
    try {
      buffer.dispatch(args);
    } catch (const InvalidArgument& error) {
      invalid_argument[rank] = 1;
      messages[rank] = error.what();
    } catch (const Error& error) {
      other_error[rank] = 1;
      messages[rank] = error.what();
    }
    seconds[rank] = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (rank == 0) call.expect_outputs_untouched();
    // NOTES: a peer still inside dispatch writes into this rank's heap; keep it alive until both
    // calls have returned (ranks as threads share plain memory).
    group.barrier();
  });
  SCOPED_TRACE("rank 0: " + messages[0] + " | rank 1: " + messages[1]);
  EXPECT_TRUE(invalid_argument[0]) << "rank 0 passed an expert id out of range";
  EXPECT_TRUE(mentions(messages[0], "topk_idx"));
  EXPECT_TRUE(invalid_argument[1] || other_error[1])
      << "rank 1 returned from a dispatch its peer never joined";
  EXPECT_LT(seconds[1], kTimeoutDeadlineSeconds);
}

TEST(Timeouts, RanksCallingDispatchWithDifferentHiddenSizesFail) {
  workload::Shape shape = small_shape(2);
  shape.hidden = 512;
  std::vector<int> threw(2, 0);
  std::vector<std::string> messages(2);
  run_ranks(2, [&](Group& group) {
    Buffer buffer(options_for(shape, group.rank()));
    buffer.connect(group.allgather(buffer.local_handle()));
    workload::Shape mine = small_shape(2);
    mine.hidden = group.rank() == 0 ? 256 : 512;
    workload::RankData data = workload::generate(mine, 7)[group.rank()];
    DispatchArgs args;
    args.x = data.x;
    args.topk_idx = data.topk_idx;
    args.topk_weights = data.topk_weights;
    args.num_experts = mine.num_experts;
    try {
      buffer.dispatch(args);
    } catch (const Error& error) {
      threw[group.rank()] = 1;
      messages[group.rank()] = error.what();
    }
    group.barrier();  // no heap is freed while the peer may still be in its call
  });
  for (int rank = 0; rank < 2; ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank) + " message: " + messages[rank]);
    EXPECT_TRUE(threw[rank]) << "a rank returned from a dispatch whose peers disagreed on hidden";
  }
}

}  // namespace
}  // namespace switchyard
