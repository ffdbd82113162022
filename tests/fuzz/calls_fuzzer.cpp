// Host validation of every public call: bad input gets a switchyard::Error naming the argument, and
// nothing is written and nothing hangs. From the input: a short sequence of Buffer calls
// (get_dispatch_layout, dispatch fresh and cached, combine, low_latency and symmetric dispatch and
// combine, hooks, low_latency_combine_buffer, the symmetric heap-resident tensors
// (symmetric_input, symmetric_expert_output), the normal engine's heap inputs (normal_input,
// normal_combine_input), synchronize, rank masks, the Buffer constructor itself, and
// Tensor::part_of), with their shapes, dtypes, sizes, flags, handles and tensor contents, on
// 1-rank buffers connected to themselves. Each call must return or throw a switchyard::Error
// (fuzz_outcome.hpp), and one refused with InvalidArgument must not have written its outputs.
#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "fuzz_outcome.hpp"
#include "fuzz_tensors.hpp"
#include "switchyard/buffer.hpp"
#include "switchyard/errors.hpp"

namespace switchyard::fuzz {
namespace {

// NOTES: a 1-rank call never waits on a peer: this only bounds a wait that bad input would leave
// open, and is well below the -timeout that scripts/run-fuzz.sh gives libFuzzer.
constexpr double kTimeoutSeconds = 5.0;
// NOTES: a fuzzed BufferOptions is built only when its heap stays this small (the heap is a
// caller-sized allocation too); the sizes are computed by the same public functions the Buffer uses.
constexpr size_t kMaxFuzzedHeapBytes = size_t{8} << 20;

struct FuzzedBuffer {
  BufferSizing sizing;
  std::unique_ptr<Buffer> buffer;
};

FuzzedBuffer make_buffer(int hidden, int64_t expert_major_tokens, Config config, bool heap_tensors,
                         bool normal_heap_inputs = false) {
  BufferOptions options;
  options.topology = Topology::single_node(1);
  options.sizing.max_tokens_per_rank = 32;
  options.sizing.hidden = hidden;
  options.sizing.topk = 8;
  options.sizing.num_experts = 16;
  options.sizing.low_latency_max_tokens_per_rank = expert_major_tokens;
  options.sizing.symmetric_max_tokens_per_rank = expert_major_tokens;
  // The symmetric engine's heap-resident tensors (one rank: an expert receives at most max rows).
  options.sizing.symmetric_heap_input = heap_tensors;
  options.sizing.symmetric_heap_output_rows_per_expert = heap_tensors ? expert_major_tokens : 0;
  // The normal engine in place (docs/normal-in-place.md): every dispatch and combine must take the views.
  options.sizing.normal_heap_input_tokens = normal_heap_inputs ? options.sizing.max_tokens_per_rank : 0;
  options.sizing.normal_heap_combine_rows = normal_heap_inputs ? options.sizing.max_tokens_per_rank : 0;
  config.timeout_seconds = kTimeoutSeconds;
  options.config = config;
  FuzzedBuffer made{options.sizing, std::make_unique<Buffer>(options)};
  made.buffer->connect({made.buffer->local_handle()});
  return made;
}

// Made once, reused by every input: the default pipeline configuration on the automatic symmetric
// paths (zero-copy dispatch, pull combine), one channel with a 4-slot ring (the ring wraps) on the
// publish and push paths, and the normal engine in place.
std::vector<FuzzedBuffer>& buffers() {
  static std::vector<FuzzedBuffer> made = [] {
    std::vector<FuzzedBuffer> list;
    list.push_back(make_buffer(512, 16, Config{}, true));
    Config wrapping;
    wrapping.num_channels = 1;
    wrapping.ring_slots = 4;
    wrapping.chunk_tokens = 2;
    wrapping.symmetric_combine = SymmetricCombine::push;
    wrapping.symmetric_dispatch = SymmetricDispatch::publish;
    list.push_back(make_buffer(256, 8, wrapping, false));
    list.push_back(make_buffer(256, 8, Config{}, false, true));
    return list;
  }();
  return made;
}

// A normal dispatch that returned, with what its arguments were.
struct NormalDispatch {
  DispatchResult result;
  DType dtype;
  int64_t num_tokens, hidden, topk, num_worst_tokens;
  int num_experts;
};

// An expert-major dispatch that returned, with what its arguments were.
struct ExpertMajorDispatch {
  Engine engine;
  LowLatencyDispatchResult result;
  TensorView topk_idx;
  int64_t num_tokens, hidden, topk, local_experts, rows_per_expert;
};

// Whether a drawn tensor (any dims, maybe negative) has the shape of a view the library returned (whose
// dims it checked), so that copying one into the other is in bounds.
bool same_shape(const TensorView& view, const TensorView& drawn) {
  if (drawn.data == nullptr || drawn.ndim != view.ndim || drawn.dtype != view.dtype) return false;
  for (int d = 0; d < view.ndim; ++d) {
    if (drawn.shape[d] != view.shape[d]) return false;
  }
  return true;
}

// Passes a view the library returned (a heap-resident input) as the call's `argument`, with the drawn
// content copied into it where the shapes agree; a view of another shape goes as it is (refused by name).
void use_view(const TensorView& view, TensorView& argument) {
  if (same_shape(view, argument)) std::memcpy(view.data, argument.data, view.nbytes());
  argument = view;
}

struct Hook {
  std::function<void()> run;
};

class Session {
 public:
  Session(FuzzedDataProvider& input, FuzzedBuffer& fuzzed)
      : input_(input), draw_(input), buffer_(*fuzzed.buffer), sizing_(fuzzed.sizing) {}

  void run_one() {
    switch (input_.ConsumeIntegralInRange<int>(0, 12)) {
      case 0:
        get_dispatch_layout();
        break;
      case 1:
        dispatch();
        break;
      case 2:
        cached_dispatch();
        break;
      case 3:
        combine();
        break;
      case 4:
        expert_major_dispatch(Engine::low_latency);
        break;
      case 5:
        expert_major_combine(Engine::low_latency);
        break;
      case 6:
        expert_major_dispatch(Engine::symmetric);
        break;
      case 7:
        expert_major_combine(Engine::symmetric);
        break;
      case 8:
        run_a_hook();
        break;
      case 9:
        synchronize();
        break;
      case 10:
        tensor_part();
        break;
      case 11:
        rank_mask();
        break;
      default:
        fuzzed_buffer();
        break;
    }
  }

  // Every hook runs before the tensors it may read are freed, and no buffer is left with a pending one.
  void finish() {
    for (Hook& hook : hooks_) checked_call("hook", hook.run);
    hooks_.clear();
    // The buffers outlive the input: the next input starts with nobody masked.
    checked_call("clean_mask", [&] { buffer_.clean_mask(stream()); });
  }

 private:
  // Runs `call`; a refusal with InvalidArgument must leave the outputs drawn since `mark` unwritten.
  template <typename Call>
  Outcome call(const char* what, size_t mark, Call&& body) {
    const Outcome outcome = checked_call(what, body);
    if (outcome == Outcome::invalid_argument && !draw_.unwritten(mark)) {
      finding(std::string(what) + ": refused with InvalidArgument after writing a preallocated output");
    }
    return outcome;
  }

  // Up to `max_tokens` (itself drawn, so maybe negative), then maybe off.
  int64_t tokens(int64_t max_tokens) {
    return draw_.size(input_.ConsumeIntegralInRange<int64_t>(0, std::max<int64_t>(max_tokens, 0)));
  }

  int num_experts() {
    switch (input_.ConsumeIntegralInRange<int>(0, 15)) {
      case 0:
        return 0;
      case 1:
        return -1;
      case 2:
        return input_.ConsumeIntegral<int>();
      case 3:
        return sizing_.num_experts + 1;
      case 4:
        return sizing_.num_experts * 2;
      default:
        return 1 << input_.ConsumeIntegralInRange<int>(0, 4);  // 1..16, all valid on 1 rank
    }
  }

  int64_t hidden(bool fp8) {
    switch (input_.ConsumeIntegralInRange<int>(0, 11)) {
      case 0:
        return 8;
      case 1:
        return 24;
      case 2:
        return input_.ConsumeIntegralInRange<int64_t>(-2, 1100);
      case 3:
        return sizing_.hidden + (fp8 ? 128 : 8);
      case 4:
        return 1 << 20;
      default:
        return 128 * input_.ConsumeIntegralInRange<int64_t>(1, sizing_.hidden / 128);
    }
  }

  int64_t topk() { return draw_.size(input_.ConsumeIntegralInRange<int64_t>(1, sizing_.topk)); }

  Stream stream() {
    // The CPU backend ignores streams; any value must do.
    return input_.ConsumeIntegral<uint8_t>() < 240
               ? nullptr
               : reinterpret_cast<Stream>(input_.ConsumeIntegral<uintptr_t>());
  }

  void get_dispatch_layout() {
    const int64_t n = tokens(sizing_.max_tokens_per_rank);
    const int experts = num_experts();
    const TensorView topk_idx = draw_.argument(DType::i64, {n, topk()}, {Fill::expert_ids, experts});
    call("get_dispatch_layout", draw_.outputs_drawn(),
         [&] { layouts_.push_back(buffer_.get_dispatch_layout(topk_idx, experts, stream())); });
  }

  void dispatch() {
    const size_t mark = draw_.outputs_drawn();
    const bool fp8 = input_.ConsumeIntegral<uint8_t>() >= 192;
    const DType dtype = fp8 ? DType::fp8_e4m3 : DType::bf16;
    const int64_t n = tokens(sizing_.max_tokens_per_rank + 1);
    const int64_t h = hidden(fp8);
    const int64_t k = topk();
    const int experts = num_experts();
    DispatchArgs args;
    args.x = draw_.argument(dtype, {n, h});
    if (fp8 || input_.ConsumeIntegral<uint8_t>() >= 240)
      args.x_scales = draw_.argument(DType::f32, {n, h / 128});
    args.topk_idx = draw_.argument(DType::i64, {n, k}, {Fill::expert_ids, experts});
    args.topk_weights = draw_.optional(DType::f32, {n, k}, {Fill::weights});
    args.num_experts = experts;
    args.expert_alignment = expert_alignment();
    if (!layouts_.empty() && input_.ConsumeBool()) {
      args.layout = &layouts_[input_.ConsumeIntegralInRange<size_t>(0, layouts_.size() - 1)];
    }
    args.num_worst_tokens = num_worst_tokens(n);
    const int64_t rows = args.num_worst_tokens > 0 ? args.num_worst_tokens : n;
    // The outputs: preallocated (out_recv_*), made by the caller's allocator once the rows are known
    // (DispatchArgs::allocate_outputs: drawn like out_recv_*, of the rows it is asked for or others), or both
    // (refused by name).
    const uint8_t outputs = input_.ConsumeIntegralInRange<uint8_t>(0, 7);
    if (outputs < 5 || outputs == 7) {
      args.out_recv_x = draw_.output(dtype, {rows, h});
      args.out_recv_x_scales = draw_.output(DType::f32, {rows, h / 128});
      args.out_recv_topk_idx = draw_.output(DType::i64, {rows, k});
      args.out_recv_topk_weights = draw_.output(DType::f32, {rows, k});
    }
    if (outputs >= 5) {
      args.allocate_outputs = [this, dtype, h, k](int64_t asked) {
        const int64_t made = draw_.size(asked);
        return DispatchOutputs{draw_.output(dtype, {made, h}), draw_.output(DType::f32, {made, h / 128}),
                               draw_.output(DType::i64, {made, k}), draw_.output(DType::f32, {made, k})};
      };
    }
    args.stream = stream();
    const NormalInputDraw heap = normal_input_draw(n, h);
    call("dispatch", mark, [&] {
      take_normal_input(heap, dtype, args);
      normal_.push_back({buffer_.dispatch(args), dtype, n, h, k, args.num_worst_tokens, experts});
    });
  }

  // x from the normal engine's heap input (a Buffer sized for it): of the call's shape, or of any other
  // (refused by name); `use` false: x where it was drawn (refused by name on such a Buffer).
  struct NormalInputDraw {
    bool use;
    int64_t tokens, hidden;
  };
  NormalInputDraw normal_input_draw(int64_t n, int64_t h) {
    const bool use = sizing_.normal_heap_input_tokens > 0 && input_.ConsumeIntegral<uint8_t>() < 224;
    // draw_.size(): mostly the call's, sometimes one off, 0, small or any int64.
    return {use, draw_.size(n), draw_.size(h)};
  }
  void take_normal_input(const NormalInputDraw& heap, DType dtype, DispatchArgs& args) {
    if (!heap.use) return;
    const NormalInputViews views = buffer_.normal_input(heap.tokens, static_cast<int>(heap.hidden), dtype);
    use_view(views.x, args.x);
    if (views.x_scales.defined() && args.x_scales.defined()) use_view(views.x_scales, args.x_scales);
  }

  int expert_alignment() {
    switch (input_.ConsumeIntegralInRange<int>(0, 9)) {
      case 0:
        return 0;
      case 1:
        return -1;
      case 2:
        return INT_MAX;
      case 3:
        return input_.ConsumeIntegral<int>();
      case 4:
        return 128;
      default:
        return 1;
    }
  }

  // NOTES: from 2^16 to 2^61 rows, worst-case outputs are caller-sized allocations (up to exabytes,
  // refused by the allocator or first by libFuzzer's malloc limit), not a validation question; from
  // 2^61 on their byte counts overflow, which Tensor::empty must refuse. So the middle is left out.
  static int64_t worst_case_rows(int64_t rows) {
    constexpr int64_t kMostAllocated = int64_t{1} << 16, kOverflowing = int64_t{1} << 61;
    return rows > kMostAllocated && rows < kOverflowing ? kMostAllocated : rows;
  }

  int64_t num_worst_tokens(int64_t num_tokens) { return worst_case_rows(any_num_worst_tokens(num_tokens)); }

  int64_t any_num_worst_tokens(int64_t num_tokens) {
    switch (input_.ConsumeIntegralInRange<int>(0, 9)) {
      case 0:
        return num_tokens;
      case 1:
        return draw_.size(static_cast<int64_t>(static_cast<uint64_t>(num_tokens) + 3));  // n may be any int64
      case 2:
        return input_.ConsumeIntegral<int64_t>();
      default:
        return 0;
    }
  }

  NormalDispatch* pick_normal() {
    if (normal_.empty()) return nullptr;
    return &normal_[input_.ConsumeIntegralInRange<size_t>(0, normal_.size() - 1)];
  }

  const DispatchHandle* normal_handle(NormalDispatch& earlier) {
    const uint8_t choice = input_.ConsumeIntegral<uint8_t>();
    if (choice < 8) return nullptr;
    if (choice < 16) return &empty_dispatch_handle_;
    return &earlier.result.handle;
  }

  void cached_dispatch() {
    NormalDispatch* earlier = pick_normal();
    if (!earlier) return;
    const size_t mark = draw_.outputs_drawn();
    const bool fp8 = input_.ConsumeIntegral<uint8_t>() >= 224 ? earlier->dtype == DType::bf16
                                                              : earlier->dtype == DType::fp8_e4m3;
    const DType dtype = fp8 ? DType::fp8_e4m3 : DType::bf16;
    const int64_t n = draw_.size(earlier->num_tokens);
    const int64_t h = input_.ConsumeBool() ? earlier->hidden : hidden(fp8);
    DispatchArgs args;
    args.x = draw_.argument(dtype, {n, h});
    if (fp8) args.x_scales = draw_.argument(DType::f32, {n, h / 128});
    if (input_.ConsumeBool()) {
      args.topk_idx =
          draw_.argument(DType::i64, {n, earlier->topk}, {Fill::expert_ids, earlier->num_experts});
      args.topk_weights = draw_.optional(DType::f32, {n, earlier->topk}, {Fill::weights});
    }
    args.num_experts = input_.ConsumeBool() ? 0 : num_experts();
    args.num_worst_tokens = input_.ConsumeBool() ? earlier->num_worst_tokens : num_worst_tokens(n);
    args.cached_handle = normal_handle(*earlier);
    const int64_t rows = args.num_worst_tokens > 0 ? args.num_worst_tokens : earlier->result.num_recv_tokens;
    args.out_recv_x = draw_.output(dtype, {rows, h});
    args.out_recv_topk_idx = draw_.output(DType::i64, {rows, earlier->topk});
    args.stream = stream();
    const NormalInputDraw heap = normal_input_draw(n, h);
    call("cached dispatch", mark, [&] {
      take_normal_input(heap, dtype, args);
      normal_.push_back(
          {buffer_.dispatch(args), dtype, n, h, earlier->topk, args.num_worst_tokens, earlier->num_experts});
    });
  }

  void combine() {
    NormalDispatch* earlier = pick_normal();
    if (!earlier) return;
    const size_t mark = draw_.outputs_drawn();
    const int64_t rows = draw_.size(earlier->num_worst_tokens > 0 ? earlier->num_worst_tokens
                                                                  : earlier->result.num_recv_tokens);
    const int64_t h = input_.ConsumeBool() ? earlier->hidden : hidden(false);
    const int64_t k = draw_.size(earlier->topk);
    CombineArgs args;
    args.x = draw_.argument(DType::bf16, {rows, h});
    args.topk_weights = draw_.optional(DType::f32, {rows, k}, {Fill::weights});
    args.handle = normal_handle(*earlier);
    args.out_combined_x = draw_.output(DType::bf16, {earlier->num_tokens, h});
    args.out_combined_topk_weights = draw_.output(DType::f32, {earlier->num_tokens, k});
    args.stream = stream();
    // y (and the weights) from the normal engine's heap combine input, for the handle's dispatch (or another
    // hidden), on a Buffer sized for it.
    const bool heap = sizing_.normal_heap_combine_rows > 0 && input_.ConsumeIntegral<uint8_t>() < 224;
    const int heap_hidden = input_.ConsumeBool() ? 0 : static_cast<int>(hidden(false));
    call("combine", mark, [&] {
      if (heap && args.handle) {
        const NormalCombineInputViews views = buffer_.normal_combine_input(*args.handle, heap_hidden);
        use_view(views.x, args.x);
        if (views.topk_weights.defined() && args.topk_weights.defined())
          use_view(views.topk_weights, args.topk_weights);
      }
      buffer_.combine(args);
    });
  }

  int64_t expert_major_tokens() const {
    return sizing_.low_latency_max_tokens_per_rank;  // the same for both regions of these buffers
  }

  void expert_major_dispatch(Engine engine) {
    const size_t mark = draw_.outputs_drawn();
    const bool low_latency = engine == Engine::low_latency;
    LowLatencyDispatchArgs args;
    args.max_tokens_per_rank = input_.ConsumeIntegral<uint8_t>() < 240
                                   ? input_.ConsumeIntegralInRange<int64_t>(1, expert_major_tokens())
                                   : draw_.size(expert_major_tokens() + 1);
    const uint8_t flags = input_.ConsumeIntegral<uint8_t>();
    args.use_fp8 = flags & 1;
    args.round_scale = (flags & 6) == 6;
    args.use_ue8m0 = (flags & 24) == 24;
    args.return_recv_hook = (flags & 32) && ((flags & 64) || low_latency);
    const int64_t n = tokens(args.max_tokens_per_rank);
    const int64_t h = hidden(args.use_fp8);
    const int64_t k = topk();
    args.num_experts = num_experts();
    args.expert_capacity = input_.ConsumeIntegral<uint8_t>() < 224 ? 0 : draw_.size(n);
    args.x = draw_.argument(DType::bf16, {n, h});
    args.topk_idx = draw_.argument(DType::i64, {n, k}, {Fill::expert_ids, args.num_experts});
    const int64_t local = args.num_experts;  // one rank holds every expert
    const int64_t rows = args.expert_capacity > 0 ? args.expert_capacity : args.max_tokens_per_rank;
    args.out_recv_x = draw_.output(args.use_fp8 ? DType::fp8_e4m3 : DType::bf16, {local, rows, h});
    args.out_recv_x_scales = args.use_ue8m0 ? draw_.output(DType::i32, {local, rows, (h / 128 + 3) / 4})
                                            : draw_.output(DType::f32, {local, rows, h / 128});
    args.out_recv_count = draw_.output(DType::i32, {local});
    args.out_layout_range = draw_.output(DType::i32, {local, 1, 2});
    args.out_src_info = draw_.output(DType::i32, {local, rows});
    args.wait_recv_cost_stats = draw_.output(DType::i64, {1});  // symmetric refuses it by name
    args.stream = stream();
    // symmetric: x from the heap-resident input, of the call's shape or of any other (refused by name).
    const bool heap_input = !low_latency && (flags & 128);
    // draw_.size(): mostly the call's, sometimes one off, 0, small or any int64.
    const int64_t view_tokens = draw_.size(n);
    const int64_t view_hidden = draw_.size(h);
    call(low_latency ? "low_latency_dispatch" : "symmetric_dispatch", mark, [&] {
      if (heap_input) {
        use_view(buffer_.symmetric_input(view_tokens, static_cast<int>(view_hidden)), args.x);
      }
      LowLatencyDispatchResult result =
          low_latency ? buffer_.low_latency_dispatch(args) : buffer_.symmetric_dispatch(args);
      if (result.hook) hooks_.push_back({std::move(result.hook)});
      expert_major_.push_back({engine, std::move(result), args.topk_idx, n, h, k, local, rows});
    });
  }

  void expert_major_combine(Engine engine) {
    if (expert_major_.empty()) return;
    ExpertMajorDispatch& earlier =
        expert_major_[input_.ConsumeIntegralInRange<size_t>(0, expert_major_.size() - 1)];
    const size_t mark = draw_.outputs_drawn();
    const bool low_latency = engine == Engine::low_latency;
    const uint8_t flags = input_.ConsumeIntegral<uint8_t>();
    LowLatencyCombineArgs args;
    args.zero_copy = (flags & 3) == 3;
    args.return_recv_hook = (flags & 4) && ((flags & 8) || low_latency);
    args.use_logfmt = (flags & 128) != 0;  // LogFMT-10 on whatever x holds (NaN, infinities, any hidden)
    const int64_t h = input_.ConsumeBool() ? earlier.hidden : hidden(false);
    if (!args.zero_copy || (flags & 16)) {
      args.x = draw_.argument(DType::bf16, {earlier.local_experts, earlier.rows_per_expert, h});
    }
    args.topk_idx = input_.ConsumeIntegral<uint8_t>() < 200
                        ? earlier.topk_idx
                        : draw_.argument(DType::i64, {earlier.num_tokens, earlier.topk},
                                         {Fill::expert_ids, static_cast<int>(earlier.local_experts)});
    args.topk_weights = draw_.argument(DType::f32, {earlier.num_tokens, earlier.topk}, {Fill::weights});
    const uint8_t handle_choice = input_.ConsumeIntegral<uint8_t>();
    args.handle = handle_choice < 8    ? nullptr
                  : handle_choice < 16 ? &empty_low_latency_handle_
                                       : &earlier.result.handle;
    args.out_combined_x = draw_.output(DType::bf16, {earlier.num_tokens, h});
    args.wait_recv_cost_stats = draw_.output(DType::i64, {1});
    args.stream = stream();
    const bool staging_view = args.zero_copy && (flags & 32) && low_latency;
    // symmetric: y from the heap-resident expert outputs, for the handle's dispatch (or another hidden).
    const bool heap_output = !low_latency && (flags & 64);
    const int heap_hidden = input_.ConsumeBool() ? 0 : static_cast<int>(hidden(false));
    call(low_latency ? "low_latency_combine" : "symmetric_combine", mark, [&] {
      if (staging_view && args.handle) args.x = buffer_.low_latency_combine_buffer(*args.handle);
      if (heap_output && args.handle) {
        use_view(buffer_.symmetric_expert_output(*args.handle, heap_hidden), args.x);
      }
      LowLatencyCombineResult result =
          low_latency ? buffer_.low_latency_combine(args) : buffer_.symmetric_combine(args);
      if (result.hook) hooks_.push_back({std::move(result.hook)});
    });
  }

  void run_a_hook() {
    if (hooks_.empty()) return;
    Hook& hook = hooks_[input_.ConsumeIntegralInRange<size_t>(0, hooks_.size() - 1)];
    checked_call("hook", hook.run);  // a second call of the same hook is refused, never run twice
  }

  void synchronize() {
    checked_call("synchronize", [&] { buffer_.synchronize(stream()); });
    checked_call("symmetric paths", [&] {
      buffer_.symmetric_combine_path();
      buffer_.symmetric_dispatch_path();
    });
  }

  // Rank masks: any rank number (only 0 is valid on these 1-rank buffers); a masked buffer's later
  // calls in this input then run with this rank masked in its own view.
  void rank_mask() {
    const int rank = input_.ConsumeBool() ? 0 : input_.ConsumeIntegral<int>();
    const bool masked = input_.ConsumeBool();
    checked_call("update_mask", [&] { buffer_.update_mask(rank, masked, stream()); });
    checked_call("query_mask", [&] {
      const Tensor mask = buffer_.query_mask(stream());
      if (mask.numel() != 1) finding("query_mask: expected i32 [1] on a 1-rank buffer");
    });
    if (input_.ConsumeBool()) checked_call("clean_mask", [&] { buffer_.clean_mask(stream()); });
  }

  // Tensor::part_of: a part that is returned lies within its owner, whatever offset, dtype and dims.
  void tensor_part() {
    const Tensor owner = Tensor::empty(DType::boolean, {input_.ConsumeIntegralInRange<int64_t>(0, 256)});
    const size_t offset = input_.ConsumeBool() ? input_.ConsumeIntegralInRange<size_t>(0, 300)
                                               : input_.ConsumeIntegral<size_t>();
    const auto dtype = static_cast<DType>(input_.ConsumeIntegralInRange<int>(0, 5));
    // Sometimes 2^k rows, whose byte count wraps to a few bytes for some dtype and column count.
    const int64_t rows = input_.ConsumeIntegral<uint8_t>() < 32
                             ? int64_t{1} << input_.ConsumeIntegralInRange<int>(56, 62)
                             : draw_.size(input_.ConsumeIntegralInRange<int64_t>(0, 16));
    const int64_t columns = draw_.size(input_.ConsumeIntegralInRange<int64_t>(0, 16));
    Tensor part;
    if (checked_call("Tensor::part_of", [&] {
          part = Tensor::part_of(owner, offset, dtype, {rows, columns});
        }) != Outcome::returned) {
      return;
    }
    const auto* begin = static_cast<const uint8_t*>(owner.data());
    const auto* data = static_cast<const uint8_t*>(part.data());
    const bool inside = rows >= 0 && columns >= 0 && data >= begin &&
                        static_cast<size_t>(data - begin) + part.nbytes() <= owner.nbytes();
    if (!inside) finding("Tensor::part_of returned " + part.view().describe() + " beyond its owner's bytes");
    if (part.nbytes() > 0) std::memset(part.data(), 0, part.nbytes());
  }

  // The constructor's checks, from options drawn widely; a Buffer that is built is connected to itself
  // where it has one rank, and runs one small call of each engine.
  void fuzzed_buffer() {
    BufferOptions options;
    options.topology.num_ranks = small_or_any(1, 3);
    options.topology.ranks_per_node = input_.ConsumeBool() ? options.topology.num_ranks : small_or_any(1, 3);
    options.rank = input_.ConsumeIntegral<uint8_t>() < 224 ? 0 : input_.ConsumeIntegral<int>();
    options.backend = input_.ConsumeIntegral<uint8_t>() < 240
                          ? Backend::cpu
                          : static_cast<Backend>(input_.ConsumeIntegral<uint8_t>());
    options.sharing = input_.ConsumeBool() ? HeapSharing::threads
                                           : static_cast<HeapSharing>(input_.ConsumeIntegral<uint8_t>() & 1);
    options.config.num_channels = small_or_any(0, 8);
    options.config.ring_slots = small_or_any(1, 64);
    options.config.chunk_tokens = small_or_any(1, 16);
    options.config.timeout_seconds =
        input_.ConsumeIntegral<uint8_t>() < 240 ? kTimeoutSeconds : input_.ConsumeFloatingPoint<double>();
    options.config.symmetric_combine = static_cast<SymmetricCombine>(input_.ConsumeIntegral<uint8_t>() % 4);
    options.config.symmetric_dispatch = static_cast<SymmetricDispatch>(input_.ConsumeIntegral<uint8_t>() % 4);
    options.sizing.max_tokens_per_rank = small_or_any(0, 64);
    options.sizing.hidden = small_or_any(1, 1024);
    options.sizing.topk = small_or_any(1, 9);
    options.sizing.num_experts = small_or_any(1, 64);
    options.sizing.dtype = static_cast<DType>(input_.ConsumeIntegralInRange<int>(0, 5));
    options.sizing.low_latency_max_tokens_per_rank = small_or_any(0, 16);
    options.sizing.symmetric_max_tokens_per_rank = small_or_any(0, 16);
    options.sizing.symmetric_heap_input = input_.ConsumeBool();
    options.sizing.symmetric_heap_output_rows_per_expert = input_.ConsumeBool() ? 0 : small_or_any(0, 64);
    options.heap_bytes = input_.ConsumeIntegral<uint8_t>() < 224
                             ? 0
                             : input_.ConsumeIntegralInRange<size_t>(0, kMaxFuzzedHeapBytes);
    if (!heap_is_small(options)) return;
    // NOTES: a threads heap of several ranks stays registered (and allocated) until its peers connect,
    // which never happens here; processes heaps are unlinked by their destructor.
    if (options.topology.num_ranks != 1) options.sharing = HeapSharing::processes;
    std::unique_ptr<Buffer> made;
    checked_call("Buffer(options)", [&] { made = std::make_unique<Buffer>(options); });
    if (!made || options.topology.num_ranks != 1) return;
    if (checked_call("connect", [&] { made->connect({made->local_handle()}); }) != Outcome::returned) return;
    small_round_trips(*made);
  }

  int small_or_any(int low, int high) {
    return input_.ConsumeIntegral<uint8_t>() < 224 ? input_.ConsumeIntegralInRange<int>(low, high)
                                                   : input_.ConsumeIntegral<int>();
  }

  bool heap_is_small(const BufferOptions& options) {
    size_t bytes = 0;
    const Outcome outcome = checked_call("heap sizes", [&] {
      bytes = low_latency_heap_bytes(options.topology, options.sizing) +
              symmetric_heap_bytes(options.topology, options.sizing);
      if (options.heap_bytes == 0)
        bytes += normal_heap_bytes(options.topology, options.config, options.sizing);
    });
    // Sizes that throw are refused by the constructor before it allocates anything.
    return outcome != Outcome::returned || bytes <= kMaxFuzzedHeapBytes;
  }

  // One token of hidden 128 through each engine, on a buffer whose sizing the input chose.
  void small_round_trips(Buffer& made) {
    TensorView x = draw_.argument(DType::bf16, {1, 128});
    TensorView topk_idx = draw_.argument(DType::i64, {1, 1}, {Fill::expert_ids, 1});
    TensorView weights = draw_.argument(DType::f32, {1, 1}, {Fill::weights});
    checked_call("small normal round trip", [&] {
      DispatchArgs args;
      args.x = x;
      args.topk_idx = topk_idx;
      args.topk_weights = weights;
      args.num_experts = 1;
      DispatchResult dispatched = made.dispatch(args);
      CombineArgs combine;
      combine.x = dispatched.recv_x;
      combine.handle = &dispatched.handle;
      made.combine(combine);
    });
    for (const Engine engine : {Engine::low_latency, Engine::symmetric}) {
      checked_call("small expert-major round trip", [&] {
        LowLatencyDispatchArgs args;
        args.x = x;
        args.topk_idx = topk_idx;
        args.max_tokens_per_rank = 1;
        args.num_experts = 1;
        const bool low_latency = engine == Engine::low_latency;
        LowLatencyDispatchResult dispatched =
            low_latency ? made.low_latency_dispatch(args) : made.symmetric_dispatch(args);
        LowLatencyCombineArgs combine;
        combine.x = dispatched.recv_x;
        combine.topk_idx = topk_idx;
        combine.topk_weights = weights;
        combine.handle = &dispatched.handle;
        low_latency ? made.low_latency_combine(combine) : made.symmetric_combine(combine);
      });
    }
  }

  FuzzedDataProvider& input_;
  TensorDraw draw_;  // declared first, destroyed last: the views and hooks below point into it
  Buffer& buffer_;
  const BufferSizing& sizing_;
  std::vector<DispatchLayout> layouts_;
  std::vector<NormalDispatch> normal_;
  std::vector<ExpertMajorDispatch> expert_major_;
  std::vector<Hook> hooks_;
  DispatchHandle empty_dispatch_handle_;
  LowLatencyHandle empty_low_latency_handle_;
};

// NOTES: a few calls per input: enough for handles to flow from a dispatch into combines and cached
// dispatches, few enough that one input stays within milliseconds.
constexpr int kMaxCallsPerInput = 6;

}  // namespace
}  // namespace switchyard::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace switchyard::fuzz;
  FuzzedDataProvider input(data, size);
  std::vector<FuzzedBuffer>& all = buffers();
  Session session(input, all[input.ConsumeIntegralInRange<size_t>(0, all.size() - 1)]);
  const int calls = input.ConsumeIntegralInRange<int>(1, kMaxCallsPerInput);
  for (int i = 0; i < calls; ++i) session.run_one();
  session.finish();
  return 0;
}
