#include "core/normal_plan.hpp"

#include <algorithm>
#include <string>
#include <utility>

#include "common/fp8_cast.hpp"
#include "core/call_signature.hpp"
#include "core/normal_sizing.hpp"
#include "core/staged_heap_input.hpp"
#include "core/validation.hpp"
#include "switchyard/errors.hpp"

namespace switchyard::detail {

namespace {

void check_tokens(int64_t num_tokens, const NormalPlanContext& buffer) {
  if (num_tokens > buffer.options.sizing.max_tokens_per_rank) {
    throw InvalidArgument("x: expected at most " + std::to_string(buffer.options.sizing.max_tokens_per_rank) +
                          " tokens (BufferSizing::max_tokens_per_rank), got " + std::to_string(num_tokens));
  }
}

// On a Buffer with a heap-resident dispatch input every dispatch reads x (and its scales) from there (a
// receiver reads a source's row at an address it computes from the source's token index): the Buffer's
// views as given, or any other tensor copied into the views' bytes first (plan.staged;
// core/staged_heap_input.hpp). What cannot be is refused here, before anything is written.
void check_heap_input(DispatchPlan& plan, const NormalPlanContext& buffer) {
  const common::NormalInputLayout& input = buffer.input;
  if (plan.hidden > input.max_hidden) {
    throw InvalidArgument("x: expected hidden <= " + std::to_string(input.max_hidden) +
                          " (sizing.hidden, the heap input's rows), got " + plan.args.x.describe());
  }
  if (plan.num_tokens > input.max_tokens) {
    throw InvalidArgument("x: expected at most " + std::to_string(input.max_tokens) +
                          " tokens (sizing.normal_heap_input_tokens), got " + plan.args.x.describe());
  }
  if (plan.topk > input.max_topk) {
    throw InvalidArgument(
        "topk_idx: expected at most " + std::to_string(input.max_topk) +
        " columns (sizing.topk: with x in the heap the routing is left there for the receivers), "
        "got " +
        plan.args.topk_idx.describe());
  }
  stage_unless_view(plan.args.x, "x", "Buffer::normal_input's view", buffer.heap_base, input.x_offset(),
                    plan.staged);
  if (plan.has_scales && plan.scales_layout.column_major) {
    // DeepEP's column-major scales: transposed into the row-major view.
    stage_column_major_scales(plan.args.x_scales, plan.scales_layout, buffer.heap_base, input.scales_offset(),
                              plan.staged);
  } else if (plan.has_scales) {
    stage_unless_view(plan.args.x_scales, "x_scales", "Buffer::normal_input's x_scales view",
                      buffer.heap_base, input.scales_offset(), plan.staged);
  }
}

// On a Buffer with a heap-resident combine input every combine takes its x (and weights) from there: each
// home rank reads an expert rank's rows at addresses it computes. The Buffer's views as given, or any other
// tensor copied into the views' bytes first (plan.staged). Refused here, before anything is written.
void check_combine_input(CombinePlan& plan, const NormalPlanContext& buffer) {
  const common::NormalCombineInputLayout& input = buffer.combine_input;
  if (plan.args.x.shape[0] > input.max_rows || plan.hidden > input.max_hidden) {
    throw InvalidArgument("x: expected at most " + std::to_string(input.max_rows) + " rows of at most " +
                          std::to_string(input.max_hidden) +
                          " channels (sizing.normal_heap_combine_rows, sizing.hidden), got " +
                          plan.args.x.describe());
  }
  if (plan.has_weights && plan.topk > input.max_topk) {
    throw InvalidArgument("topk_weights: expected at most " + std::to_string(input.max_topk) +
                          " columns (sizing.topk, the heap input's), got " +
                          plan.args.topk_weights.describe());
  }
  stage_unless_view(plan.args.x, "x", "Buffer::normal_combine_input's x view", buffer.heap_base,
                    input.y_offset(), plan.staged);
  if (plan.has_weights) {
    stage_unless_view(plan.args.topk_weights, "topk_weights",
                      "Buffer::normal_combine_input's topk_weights view", buffer.heap_base,
                      input.weights_offset(), plan.staged);
  }
}

// `needed`: normal_call_bytes of the call (the intranode layout, plus the RDMA region).
void check_heap(size_t needed, const char* what, int hidden, const CallTuning& tuning,
                const NormalPlanContext& buffer) {
  if (needed > buffer.normal_region_bytes) {
    const char* subject = tuning.is_default() ? what : "tuning";
    throw InvalidArgument(
        std::string(subject) + ": expected a call that fits the normal region of the buffer's heap (" +
        std::to_string(buffer.normal_region_bytes) + " of " + std::to_string(buffer.heap_bytes) +
        " bytes), got a " + what + " needing " + std::to_string(needed) + " (hidden=" +
        std::to_string(hidden) + (tuning.is_default() ? std::string() : ", " + tuning.to_string()) +
        "); size the buffer with BufferSizing for the largest call, or tune the call for fewer ring bytes");
  }
}

// The call's Config: the Buffer's, with what `tuning` sets (CallTuning). `handle_channels` > 0: the call
// replays a dispatch (combine, cached dispatch), whose channel partition its handle holds, so it runs
// with those channels.
Config tuned_config(const CallTuning& tuning, const NormalPlanContext& buffer, int handle_channels,
                    const char* handle_name) {
  Config config = buffer.options.config;
  config.num_channels = buffer.num_channels;
  if (handle_channels > 0) {
    if (tuning.num_channels != 0 && tuning.num_channels != handle_channels) {
      throw InvalidArgument("tuning.num_channels: expected 0 or " + std::to_string(handle_channels) +
                            " (the " + handle_name + "'s dispatch ran with that many channels), got " +
                            std::to_string(tuning.num_channels));
    }
    config.num_channels = handle_channels;
  } else if (tuning.num_channels != 0) {
    if (tuning.num_channels < 1 || tuning.num_channels > buffer.max_num_channels) {
      throw InvalidArgument("tuning.num_channels: expected 0 (the Buffer's " +
                            std::to_string(buffer.num_channels) + ") or 1.." +
                            std::to_string(buffer.max_num_channels) +
                            " (what stays co-resident with the ranks sharing this device), got " +
                            std::to_string(tuning.num_channels));
    }
    config.num_channels = tuning.num_channels;
  }
  if (tuning.ring_slots < 0) {
    throw InvalidArgument("tuning.ring_slots: expected 0 (the Buffer's) or >= 1, got " +
                          std::to_string(tuning.ring_slots));
  }
  if (tuning.ring_slots > 0) config.ring_slots = tuning.ring_slots;
  if (tuning.chunk_tokens != 0) {
    if (tuning.chunk_tokens < 1 || tuning.chunk_tokens > config.ring_slots) {
      throw InvalidArgument("tuning.chunk_tokens: expected 0 (the Buffer's) or 1..ring_slots (" +
                            std::to_string(config.ring_slots) + " in this call), got " +
                            std::to_string(tuning.chunk_tokens));
    }
    config.chunk_tokens = tuning.chunk_tokens;
  } else {
    // The Buffer's chunk, within the call's rings (a chunk never exceeds its ring).
    config.chunk_tokens = std::min(config.chunk_tokens, config.ring_slots);
  }
  return config;
}

// Output shapes that are known before the count exchange are checked here; row counts of
// preallocated outputs outside worst-case mode are checked by the backend once M is known.
void check_dispatch_outputs(const DispatchPlan& plan, Device device) {
  const DispatchArgs& args = plan.args;
  if (args.allocate_outputs) {
    for (auto [tensor, name] : {std::pair{&args.out_recv_x, "out_recv_x"},
                                {&args.out_recv_x_scales, "out_recv_x_scales"},
                                {&args.out_recv_topk_idx, "out_recv_topk_idx"},
                                {&args.out_recv_topk_weights, "out_recv_topk_weights"}}) {
      expect_undefined(*tensor, name, "allocate_outputs makes the outputs");
    }
  }
  expect_optional_tensor(args.out_recv_x, "out_recv_x", plan.dtype, 2, device);
  if (args.out_recv_x.defined()) expect_dim(args.out_recv_x, "out_recv_x", 1, plan.hidden, "hidden");
  if (plan.has_scales) {
    expect_optional_tensor(args.out_recv_x_scales, "out_recv_x_scales", DType::f32, 2, device);
    if (args.out_recv_x_scales.defined()) {
      expect_dim(args.out_recv_x_scales, "out_recv_x_scales", 1, plan.hidden / common::kScaleBlock,
                 "hidden / 128");
    }
  } else {
    expect_undefined(args.out_recv_x_scales, "out_recv_x_scales", "x is bf16");
  }
  if (plan.topk > 0) {
    expect_optional_tensor(args.out_recv_topk_idx, "out_recv_topk_idx", DType::i64, 2, device);
    if (args.out_recv_topk_idx.defined())
      expect_dim(args.out_recv_topk_idx, "out_recv_topk_idx", 1, plan.topk, "k");
  } else {
    expect_undefined(args.out_recv_topk_idx, "out_recv_topk_idx", "no topk_idx was given");
  }
  if (plan.has_weights) {
    expect_optional_tensor(args.out_recv_topk_weights, "out_recv_topk_weights", DType::f32, 2, device);
    if (args.out_recv_topk_weights.defined()) {
      expect_dim(args.out_recv_topk_weights, "out_recv_topk_weights", 1, plan.topk, "k");
    }
  } else {
    expect_undefined(args.out_recv_topk_weights, "out_recv_topk_weights", "no topk_weights were given");
  }
  if (plan.num_worst_tokens > 0) {
    for (auto [tensor, name] : {std::pair{&args.out_recv_x, "out_recv_x"},
                                {&args.out_recv_x_scales, "out_recv_x_scales"},
                                {&args.out_recv_topk_idx, "out_recv_topk_idx"},
                                {&args.out_recv_topk_weights, "out_recv_topk_weights"}}) {
      if (tensor->defined()) expect_dim(*tensor, name, 0, plan.num_worst_tokens, "num_worst_tokens");
    }
  }
}

}  // namespace

DispatchPlan plan_dispatch(const DispatchArgs& args, const NormalPlanContext& buffer) {
  const Device device = buffer.device;
  DispatchPlan plan;
  plan.rank = buffer.options.rank;
  plan.topology = buffer.options.topology;
  plan.args = args;

  const TensorView& x = args.x;
  if (!x.defined())
    throw InvalidArgument("x: expected a bf16 or fp8_e4m3 tensor [num_tokens, hidden], got none");
  if (x.dtype != DType::bf16 && x.dtype != DType::fp8_e4m3) {
    throw InvalidArgument("x: expected dtype bf16 or fp8_e4m3, got " + x.describe());
  }
  expect_tensor(x, "x", x.dtype, 2, device);
  plan.num_tokens = x.shape[0];
  plan.dtype = x.dtype;
  if (x.shape[1] < 1 || x.shape[1] > (1 << 20)) {
    throw InvalidArgument("x: expected hidden in 1..1048576, got " + x.describe());
  }
  plan.hidden = static_cast<int>(x.shape[1]);
  if ((plan.hidden * dtype_size(plan.dtype)) % 16 != 0) {
    throw InvalidArgument("x: expected rows that are a multiple of 16 bytes (hidden a multiple of " +
                          std::to_string(16 / dtype_size(plan.dtype)) + " for " + dtype_name(plan.dtype) +
                          "), got " + x.describe());
  }
  check_tokens(plan.num_tokens, buffer);

  if (plan.dtype == DType::fp8_e4m3) {
    if (plan.hidden % common::kScaleBlock != 0) {
      throw InvalidArgument(
          "x: expected hidden a multiple of 128 for fp8 (one scale per 128 channels), got " + x.describe());
    }
    expect_tensor(args.x_scales, "x_scales", DType::f32, 2, device);
    const int64_t num_scales = plan.hidden / common::kScaleBlock;
    if (args.x_scales_column_major) {
      // Given as its transpose [H / 128, N]: the memory of DeepEP's column-major scales.
      expect_dim(args.x_scales, "x_scales", 0, num_scales,
                 "hidden / 128: x_scales_column_major gives the transpose");
      expect_dim(args.x_scales, "x_scales", 1, plan.num_tokens,
                 "num_tokens of x: x_scales_column_major gives the transpose");
    } else {
      expect_dim(args.x_scales, "x_scales", 0, plan.num_tokens, "num_tokens of x");
      expect_dim(args.x_scales, "x_scales", 1, num_scales, "hidden / 128");
    }
    plan.has_scales = true;
    plan.scales_layout = {plan.num_tokens, static_cast<uint32_t>(num_scales), args.x_scales_column_major};
  } else {
    expect_undefined(args.x_scales, "x_scales", "x is bf16; scales come only with fp8");
    if (args.x_scales_column_major) {
      throw InvalidArgument("x_scales_column_major: expected false with bf16 x (it has no scales), got true");
    }
  }

  if (args.cached_handle) {
    if (!args.cached_handle->valid())
      throw InvalidArgument("cached_handle: expected a handle from dispatch, got an empty one");
    const NormalHandleData& cached = args.cached_handle->data();
    if (cached.owner != buffer.owner) {
      throw InvalidArgument(
          "cached_handle: expected a handle made by this Buffer, got one from another Buffer");
    }
    if (cached.num_tokens != plan.num_tokens) {
      throw InvalidArgument("x: expected " + std::to_string(cached.num_tokens) +
                            " tokens (as in the cached dispatch), got " + x.describe());
    }
    if (args.num_experts != 0 && args.num_experts != cached.num_experts) {
      throw InvalidArgument("num_experts: expected " + std::to_string(cached.num_experts) +
                            " (as in the cached dispatch) or 0, got " + std::to_string(args.num_experts));
    }
    if (args.num_worst_tokens != cached.num_worst_tokens) {
      throw InvalidArgument("num_worst_tokens: expected " + std::to_string(cached.num_worst_tokens) +
                            " (as in the cached dispatch), got " + std::to_string(args.num_worst_tokens));
    }
    plan.cached = &cached;
    plan.config = tuned_config(args.tuning, buffer, cached.num_channels, "cached_handle");
    plan.num_experts = cached.num_experts;
    plan.expert_alignment = cached.expert_alignment;
  } else {
    plan.config = tuned_config(args.tuning, buffer, 0, nullptr);
    check_num_experts(args.num_experts, buffer.options.topology.num_ranks);
    plan.num_experts = args.num_experts;
    if (args.expert_alignment < 1) {
      throw InvalidArgument("expert_alignment: expected >= 1, got " + std::to_string(args.expert_alignment));
    }
    plan.expert_alignment = args.expert_alignment;
    // Without topk_idx the layout routes the tokens (DeepEP's dispatch by is_token_in_rank alone):
    // its num_tokens_per_expert gives the receivers' per-expert counts, and no expert ids travel.
    if (!args.topk_idx.defined() && !args.layout) {
      throw InvalidArgument(
          "topk_idx: expected an i64 tensor [num_tokens, k], got none (only a cached dispatch, or one "
          "given a layout to route by, may omit it)");
    }
  }
  plan.local_experts = plan.num_experts / buffer.options.topology.num_ranks;

  if (args.topk_idx.defined()) {
    expect_tensor(args.topk_idx, "topk_idx", DType::i64, 2, device);
    expect_dim(args.topk_idx, "topk_idx", 0, plan.num_tokens, "num_tokens of x");
    check_topk(args.topk_idx.shape[1]);
    plan.topk = static_cast<int>(args.topk_idx.shape[1]);
    if (args.topk_idx.device == Device::cpu) expect_expert_ids(args.topk_idx, plan.num_experts);
  }
  if (args.topk_weights.defined()) {
    if (!args.topk_idx.defined()) {
      throw InvalidArgument("topk_weights: expected none without topk_idx, got " +
                            args.topk_weights.describe());
    }
    expect_tensor(args.topk_weights, "topk_weights", DType::f32, 2, device);
    expect_dim(args.topk_weights, "topk_weights", 0, plan.num_tokens, "num_tokens of x");
    expect_dim(args.topk_weights, "topk_weights", 1, plan.topk, "k of topk_idx");
    plan.has_weights = true;
  }

  if (args.num_worst_tokens < 0) {
    throw InvalidArgument("num_worst_tokens: expected >= 0, got " + std::to_string(args.num_worst_tokens));
  }
  plan.num_worst_tokens = args.num_worst_tokens;
  if (args.layout) {
    if (plan.cached)
      throw InvalidArgument("layout: expected none with a cached handle (the handle has the routing)");
    expect_tensor(args.layout->is_token_in_rank, "layout.is_token_in_rank", DType::boolean, 2, device);
    expect_dim(args.layout->is_token_in_rank, "layout.is_token_in_rank", 0, plan.num_tokens, "num_tokens");
    expect_dim(args.layout->is_token_in_rank, "layout.is_token_in_rank", 1, buffer.options.topology.num_ranks,
               "num_ranks");
    expect_tensor(args.layout->num_tokens_per_expert, "layout.num_tokens_per_expert", DType::i32, 1, device);
    expect_dim(args.layout->num_tokens_per_expert, "layout.num_tokens_per_expert", 0, plan.num_experts,
               "num_experts");
    plan.layout = args.layout;
    if (!args.topk_idx.defined() && device == Device::cpu) {
      const int32_t* counts = args.layout->num_tokens_per_expert.as<const int32_t>();
      for (int expert = 0; expert < plan.num_experts; ++expert) {
        if (counts[expert] < 0) {
          throw InvalidArgument("layout.num_tokens_per_expert: expected counts >= 0, got " +
                                std::to_string(counts[expert]) + " for expert " + std::to_string(expert));
        }
      }
    }
  }
  check_dispatch_outputs(plan, device);
  if (buffer.input.present()) {
    check_heap_input(plan, buffer);
    plan.x_in_heap = true;
    plan.input = buffer.input;
    plan.gather_by_handle = plan.cached != nullptr && plan.topk == 0;
  }
  check_heap(normal_call_bytes(plan), "dispatch", plan.hidden, args.tuning, buffer);
  plan.signature = call_signature(1, plan.hidden, static_cast<int>(plan.dtype), plan.topk, plan.has_weights,
                                  plan.num_experts, plan.expert_alignment, plan.cached != nullptr,
                                  plan.num_worst_tokens > 0, plan.config.num_channels);
  return plan;
}

NormalInputViews normal_input_views(const NormalPlanContext& buffer, int64_t num_tokens, int hidden,
                                    DType dtype) {
  const common::NormalInputLayout& input = buffer.input;
  if (!input.present()) {
    throw InvalidArgument(
        "normal_input: expected a buffer sized with BufferSizing::normal_heap_input_tokens > 0, got one "
        "sized without it");
  }
  if (num_tokens < 0 || num_tokens > input.max_tokens) {
    throw InvalidArgument("num_tokens: expected 0.." + std::to_string(input.max_tokens) +
                          " (sizing.normal_heap_input_tokens), got " + std::to_string(num_tokens));
  }
  if (hidden < 1 || hidden > input.max_hidden) {
    throw InvalidArgument("hidden: expected 1.." + std::to_string(input.max_hidden) +
                          " (sizing.hidden), got " + std::to_string(hidden));
  }
  if (dtype != DType::bf16 && dtype != DType::fp8_e4m3) {
    throw InvalidArgument(std::string("dtype: expected bf16 or fp8_e4m3, got ") + dtype_name(dtype));
  }
  if (dtype == DType::fp8_e4m3 && hidden % common::kScaleBlock != 0) {
    throw InvalidArgument("hidden: expected a multiple of 128 for fp8 (one scale per 128 channels), got " +
                          std::to_string(hidden));
  }
  uint8_t* base = const_cast<uint8_t*>(buffer.heap_base);
  const int index = buffer.device_index();
  NormalInputViews views;
  views.x = TensorView(base + input.x_offset(), dtype, {num_tokens, hidden}, buffer.device, index);
  if (dtype == DType::fp8_e4m3) {
    views.x_scales = TensorView(base + input.scales_offset(), DType::f32,
                                {num_tokens, hidden / common::kScaleBlock}, buffer.device, index);
  }
  return views;
}

NormalCombineInputViews normal_combine_input_views(const NormalPlanContext& buffer,
                                                   const DispatchHandle& handle, int hidden) {
  const common::NormalCombineInputLayout& input = buffer.combine_input;
  if (!input.present()) {
    throw InvalidArgument(
        "normal_combine_input: expected a buffer sized with BufferSizing::normal_heap_combine_rows > 0, got "
        "one sized without it");
  }
  if (!handle.valid()) throw InvalidArgument("handle: expected a handle from dispatch, got an empty one");
  const NormalHandleData& data = handle.data();
  if (data.owner != buffer.owner) {
    throw InvalidArgument("handle: expected a handle made by this Buffer, got one from another Buffer");
  }
  const int64_t rows = data.num_worst_tokens > 0 ? data.num_worst_tokens : data.num_recv_tokens;
  if (rows < 0 || rows > input.max_rows) {
    throw InvalidArgument("handle: expected a dispatch of at most " + std::to_string(input.max_rows) +
                          " received rows (sizing.normal_heap_combine_rows), got " + std::to_string(rows));
  }
  if (data.topk > input.max_topk) {
    throw InvalidArgument("handle: expected a dispatch of at most " + std::to_string(input.max_topk) +
                          " top-k slots (sizing.topk, the heap input's weights), got " +
                          std::to_string(data.topk));
  }
  if (hidden == 0) hidden = input.max_hidden;
  if (hidden < 1 || hidden > input.max_hidden) {
    throw InvalidArgument("hidden: expected 1.." + std::to_string(input.max_hidden) +
                          " (sizing.hidden) or 0, got " + std::to_string(hidden));
  }
  uint8_t* base = const_cast<uint8_t*>(buffer.heap_base);
  const int index = buffer.device_index();
  NormalCombineInputViews views;
  views.x = TensorView(base + input.y_offset(), DType::bf16, {rows, hidden}, buffer.device, index);
  if (data.topk > 0) {
    views.topk_weights =
        TensorView(base + input.weights_offset(), DType::f32, {rows, data.topk}, buffer.device, index);
  }
  return views;
}

CombinePlan plan_combine(const CombineArgs& args, const NormalPlanContext& buffer) {
  const Device device = buffer.device;
  CombinePlan plan;
  plan.rank = buffer.options.rank;
  plan.topology = buffer.options.topology;
  plan.args = args;
  if (!args.handle || !args.handle->valid()) {
    throw InvalidArgument("handle: expected the handle of a dispatch on this buffer, got none");
  }
  const NormalHandleData& handle = args.handle->data();
  if (handle.owner != buffer.owner) {
    throw InvalidArgument("handle: expected a handle made by this Buffer, got one from another Buffer");
  }
  plan.config = tuned_config(args.tuning, buffer, handle.num_channels, "handle");
  plan.handle = &handle;
  expect_tensor(args.x, "x", DType::bf16, 2, device);
  int64_t expected_rows = handle.num_worst_tokens > 0 ? handle.num_worst_tokens : handle.num_recv_tokens;
  expect_dim(
      args.x, "x", 0, expected_rows,
      handle.num_worst_tokens > 0 ? "num_worst_tokens of the dispatch" : "tokens received by the dispatch");
  if (args.x.shape[1] < 1 || args.x.shape[1] % 8 != 0 || args.x.shape[1] > (1 << 20)) {
    throw InvalidArgument("x: expected hidden a multiple of 8 (16-byte rows), got " + args.x.describe());
  }
  plan.hidden = static_cast<int>(args.x.shape[1]);
  if (args.topk_weights.defined()) {
    expect_tensor(args.topk_weights, "topk_weights", DType::f32, 2, device);
    expect_dim(args.topk_weights, "topk_weights", 0, expected_rows, "rows of x");
    check_topk(args.topk_weights.shape[1]);
    plan.has_weights = true;
    plan.topk = static_cast<int>(args.topk_weights.shape[1]);
  }
  expect_optional_tensor(args.out_combined_x, "out_combined_x", DType::bf16, 2, device);
  if (args.out_combined_x.defined()) {
    expect_dim(args.out_combined_x, "out_combined_x", 0, handle.num_tokens, "tokens of the dispatch");
    expect_dim(args.out_combined_x, "out_combined_x", 1, plan.hidden, "hidden of x");
  }
  if (plan.has_weights) {
    expect_optional_tensor(args.out_combined_topk_weights, "out_combined_topk_weights", DType::f32, 2,
                           device);
    if (args.out_combined_topk_weights.defined()) {
      expect_dim(args.out_combined_topk_weights, "out_combined_topk_weights", 0, handle.num_tokens,
                 "tokens of the dispatch");
      expect_dim(args.out_combined_topk_weights, "out_combined_topk_weights", 1, plan.topk, "k");
    }
  } else {
    expect_undefined(args.out_combined_topk_weights, "out_combined_topk_weights",
                     "no topk_weights were given");
  }
  // NOTES: the biases stay on this rank (only its own tokens' sums read them), so they are not part
  // of the signature that every rank's call must match.
  expect_optional_bias(args.bias0, "bias0", handle.num_tokens, plan.hidden, device);
  expect_optional_bias(args.bias1, "bias1", handle.num_tokens, plan.hidden, device);
  if (buffer.combine_input.present()) {
    check_combine_input(plan, buffer);
    plan.y_in_heap = true;
    plan.combine_input = buffer.combine_input;
  }
  check_heap(normal_call_bytes(plan), "combine", plan.hidden, args.tuning, buffer);
  plan.signature = call_signature(2, plan.hidden, plan.topk, plan.has_weights, plan.config.num_channels);
  return plan;
}

}  // namespace switchyard::detail
