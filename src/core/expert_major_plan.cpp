#include "core/expert_major_plan.hpp"

#include <atomic>
#include <initializer_list>
#include <string>
#include <vector>

#include "common/fp8_cast.hpp"
#include "common/logfmt.hpp"
#include "core/call_signature.hpp"
#include "core/validation.hpp"
#include "switchyard/errors.hpp"

namespace switchyard::detail {

std::shared_ptr<ExpertMajorHandleData> make_expert_major_handle(const ExpertMajorDispatchPlan& plan,
                                                                BufferId owner, Engine engine) {
  auto handle = std::make_shared<ExpertMajorHandleData>();
  handle->owner = owner;
  handle->engine = engine;
  handle->rank = plan.rank;
  handle->topology = plan.topology;
  handle->num_experts = plan.num_experts;
  handle->local_experts = plan.local_experts;
  handle->topk = plan.topk;
  handle->hidden = plan.hidden;
  handle->max_tokens_per_rank = plan.max_tokens_per_rank;
  handle->expert_capacity = plan.expert_capacity;
  handle->num_tokens = plan.num_tokens;
  return handle;
}

void check_low_latency_region(const BufferOptions& options, const char* what) {
  if (options.sizing.low_latency_max_tokens_per_rank <= 0) {
    throw InvalidArgument(std::string(what) +
                          ": expected a buffer with a low-latency region "
                          "(BufferSizing::low_latency_max_tokens_per_rank > 0), got one sized without it");
  }
}

void check_symmetric_region(const BufferOptions& options, const char* what) {
  if (options.sizing.symmetric_max_tokens_per_rank <= 0) {
    throw InvalidArgument(std::string(what) +
                          ": expected a buffer with a symmetric region "
                          "(BufferSizing::symmetric_max_tokens_per_rank > 0), got one sized without it");
  }
  // NOTES: the engine pulls from and pushes into every peer's heap by address: it needs one
  // load/store domain, and across nodes there are only a transport's puts.
  if (!options.topology.is_single_node()) {
    throw Unsupported(std::string(what) +
                      ": the symmetric engine needs every rank in one load/store domain "
                      "(ranks_per_node == num_ranks), got topology " +
                      options.topology.to_string() + "; across nodes use low_latency or normal");
  }
}

const ExpertMajorHandleData& low_latency_handle(const LowLatencyHandle* handle, Engine engine,
                                                detail::BufferId owner) {
  if (!handle || !handle->valid()) {
    throw InvalidArgument(std::string("handle: expected the handle of a ") + engine_name(engine) +
                          "_dispatch on this buffer, got none");
  }
  const ExpertMajorHandleData& data = handle->data();
  if (data.owner != owner) {
    throw InvalidArgument("handle: expected a handle made by this Buffer, got one from another Buffer");
  }
  if (data.engine != engine) {
    throw InvalidArgument(std::string("handle: expected the handle of a ") + engine_name(engine) +
                          "_dispatch, got one of a " + engine_name(data.engine) + "_dispatch");
  }
  return data;
}

namespace {

// What an expert-major engine's region holds, and the sizing field that sets its token capacity.
struct ExpertMajorCapacity {
  int hidden;
  int64_t max_tokens_per_rank;
  int num_experts;
  int topk;
  const char* max_tokens_field;
};
ExpertMajorCapacity low_latency_capacity(const common::LowLatencyLayout& layout) {
  return {layout.hidden, layout.max_tokens_per_rank, layout.num_experts(), layout.topk,
          "BufferSizing::low_latency_max_tokens_per_rank"};
}
ExpertMajorCapacity symmetric_capacity(const common::SymmetricLayout& layout) {
  return {layout.hidden, layout.max_tokens_per_rank, layout.num_experts(), layout.topk,
          "BufferSizing::symmetric_max_tokens_per_rank"};
}

// `tensor`, when given, must be `dtype` with exactly `dims`.
void expect_output(const TensorView& tensor, const char* name, DType dtype,
                   std::initializer_list<int64_t> dims, const char* what, Device device) {
  if (!tensor.defined()) return;
  expect_tensor(tensor, name, dtype, static_cast<int>(dims.size()), device);
  int dim = 0;
  for (int64_t size : dims) expect_dim(tensor, name, dim++, size, what);
}

// Fills `plan` (the engine's layout aside) from `args`, checked against `capacity`.
void plan_expert_major_dispatch(const LowLatencyDispatchArgs& args, const ExpertMajorCapacity& capacity,
                                const PlanContext& buffer, ExpertMajorDispatchPlan& plan) {
  const Device device = buffer.device;
  const int num_ranks = buffer.options.topology.num_ranks;
  plan.rank = buffer.options.rank;
  plan.topology = buffer.options.topology;
  plan.config = buffer.options.config;
  plan.args = args;

  if (args.use_ue8m0 && !args.use_fp8) {
    throw InvalidArgument(
        "use_ue8m0: expected use_fp8 with it (UE8M0 packs fp8 scales), got use_fp8 = false");
  }
  if (args.round_scale && !args.use_fp8) {
    throw InvalidArgument(
        "round_scale: expected use_fp8 with it (it rounds fp8 scales), got use_fp8 = false");
  }
  // Rows the caller already cast (symmetric only: plan_low_latency_dispatch refuses them first). They
  // travel as given, so use_fp8 must say the rows are fp8, and nothing may touch the caller's scales.
  plan.x_fp8 = args.x.defined() && args.x.dtype == DType::fp8_e4m3;
  if (plan.x_fp8) {
    if (!args.use_fp8) {
      throw InvalidArgument(
          "use_fp8: expected true with fp8_e4m3 x (the rows are fp8, carried as given), got false");
    }
    if (args.round_scale) {
      throw InvalidArgument(
          "round_scale: expected false with fp8_e4m3 x (its scales are the caller's x_scales, carried as "
          "given), got true");
    }
    if (args.use_ue8m0) {
      throw InvalidArgument(
          "use_ue8m0: expected false with fp8_e4m3 x (its scales are the caller's f32 x_scales, carried "
          "as given), got true");
    }
  }
  plan.use_fp8 = args.use_fp8;
  plan.use_ue8m0 = args.use_ue8m0;
  plan.round_scale = args.round_scale || args.use_ue8m0;

  expect_tensor(args.x, "x", plan.x_fp8 ? DType::fp8_e4m3 : DType::bf16, 2, device);
  plan.num_tokens = args.x.shape[0];
  const int64_t hidden = args.x.shape[1];
  const int64_t multiple = args.use_fp8 ? common::kScaleBlock : 8;
  if (hidden < 1 || hidden % multiple != 0) {
    throw InvalidArgument("x: expected hidden a positive multiple of " + std::to_string(multiple) +
                          (args.use_fp8 ? " (one fp8 scale per 128 channels)" : " (16-byte rows)") +
                          ", got " + args.x.describe());
  }
  if (hidden > capacity.hidden) {
    throw InvalidArgument("x: expected hidden at most " + std::to_string(capacity.hidden) +
                          " (BufferSizing::hidden), got " + args.x.describe());
  }
  plan.hidden = static_cast<int>(hidden);
  if (plan.x_fp8) {
    expect_tensor(args.x_scales, "x_scales", DType::f32, 2, device);
    expect_dim(args.x_scales, "x_scales", 0, plan.num_tokens, "num_tokens of x");
    expect_dim(args.x_scales, "x_scales", 1, hidden / common::kScaleBlock,
               "hidden / 128 of x: one scale per 128 channels");
  } else {
    expect_undefined(args.x_scales, "x_scales", "scales come only with fp8_e4m3 x (rows the caller cast)");
  }

  if (args.max_tokens_per_rank < 1 || args.max_tokens_per_rank > capacity.max_tokens_per_rank) {
    throw InvalidArgument("max_tokens_per_rank: expected 1.." + std::to_string(capacity.max_tokens_per_rank) +
                          " (" + capacity.max_tokens_field + "), got " +
                          std::to_string(args.max_tokens_per_rank));
  }
  plan.max_tokens_per_rank = args.max_tokens_per_rank;
  const int64_t all_rows = num_ranks * plan.max_tokens_per_rank;
  if (args.expert_capacity < 0 || args.expert_capacity > all_rows) {
    throw InvalidArgument("expert_capacity: expected 0 (num_ranks * max_tokens_per_rank = " +
                          std::to_string(all_rows) + " rows per local expert) or 1.." +
                          std::to_string(all_rows) + ", got " + std::to_string(args.expert_capacity));
  }
  plan.expert_capacity = args.expert_capacity == 0 ? all_rows : args.expert_capacity;
  if (plan.num_tokens > plan.max_tokens_per_rank) {
    throw InvalidArgument("x: expected at most max_tokens_per_rank (" +
                          std::to_string(plan.max_tokens_per_rank) + ") tokens, got " + args.x.describe());
  }

  check_num_experts(args.num_experts, num_ranks);
  if (args.num_experts > capacity.num_experts) {
    throw InvalidArgument("num_experts: expected at most " + std::to_string(capacity.num_experts) +
                          " (BufferSizing::num_experts, rounded down to a multiple of num_ranks), got " +
                          std::to_string(args.num_experts));
  }
  plan.num_experts = args.num_experts;
  plan.local_experts = args.num_experts / num_ranks;

  expect_tensor(args.topk_idx, "topk_idx", DType::i64, 2, device);
  expect_dim(args.topk_idx, "topk_idx", 0, plan.num_tokens, "num_tokens of x");
  check_topk(args.topk_idx.shape[1]);
  if (args.topk_idx.shape[1] > capacity.topk) {
    throw InvalidArgument("topk_idx: expected at most " + std::to_string(capacity.topk) +
                          " columns (BufferSizing::topk), got " + args.topk_idx.describe());
  }
  plan.topk = static_cast<int>(args.topk_idx.shape[1]);
  if (args.topk_idx.device == Device::cpu) {
    expect_expert_ids(args.topk_idx, plan.num_experts);
    // Each (token, slot) is one row; a token naming an expert twice takes two of its slots.
    std::vector<int64_t> rows_per_expert(plan.num_experts, 0);
    const int64_t* ids = args.topk_idx.as<const int64_t>();
    for (int64_t i = 0; i < args.topk_idx.numel(); ++i) {
      if (ids[i] >= 0 && ++rows_per_expert[ids[i]] > plan.max_tokens_per_rank) {
        throw InvalidArgument(
            "topk_idx: expected at most max_tokens_per_rank (" + std::to_string(plan.max_tokens_per_rank) +
            ") rows per expert from one rank, got " + "more for expert " + std::to_string(ids[i]) +
            " (a token that names an expert in "
            "several slots sends one row per slot)");
      }
    }
  }

  // Rows per expert: expert_capacity, or num_ranks * max_tokens_per_rank when it is 0.
  const int64_t rows = plan.expert_capacity;
  const int64_t local = plan.local_experts;
  expect_output(args.out_recv_x, "out_recv_x", plan.use_fp8 ? DType::fp8_e4m3 : DType::bf16,
                {local, rows, hidden}, "[local_experts, expert_capacity, hidden]", device);
  if (!plan.use_fp8) {
    expect_undefined(args.out_recv_x_scales, "out_recv_x_scales", "scales come only with use_fp8");
  } else if (plan.use_ue8m0) {
    expect_output(args.out_recv_x_scales, "out_recv_x_scales", DType::i32,
                  {local, rows, common::ue8m0_words(plan.hidden / common::kScaleBlock)},
                  "[local_experts, expert_capacity, ceil(hidden / 512)]", device);
  } else {
    expect_output(args.out_recv_x_scales, "out_recv_x_scales", DType::f32,
                  {local, rows, hidden / common::kScaleBlock},
                  "[local_experts, expert_capacity, hidden / 128]", device);
  }
  expect_output(args.out_recv_count, "out_recv_count", DType::i32, {local}, "[local_experts]", device);
  expect_output(args.out_layout_range, "out_layout_range", DType::i32, {local, num_ranks, 2},
                "[local_experts, num_ranks, 2]", device);
  expect_output(args.out_src_info, "out_src_info", DType::i32, {local, rows},
                "[local_experts, expert_capacity]", device);
  // NOTES: this rank's own statistics, so not part of the signature every rank's call must match.
  expect_output(args.wait_recv_cost_stats, "wait_recv_cost_stats", DType::i64, {num_ranks}, "[num_ranks]",
                device);
  // topk is in it since a receiver locates a row's slot by its own k.
  plan.signature = call_signature(3, plan.hidden, plan.topk, plan.num_experts, plan.max_tokens_per_rank,
                                  plan.expert_capacity, plan.use_fp8, plan.round_scale, plan.use_ue8m0);
}

// Fills `plan` (the engine's layout aside) from `args`. `staging`: where zero-copy outputs are
// (null when the engine has none; the caller refuses zero_copy then).
// `rows_at_home` (symmetric only, internal): the expert phase wrote the rows home already, so there is no x.
void plan_expert_major_combine(const LowLatencyCombineArgs& args, Engine engine, int capacity_hidden,
                               void* staging, const PlanContext& buffer, ExpertMajorCombinePlan& plan,
                               bool rows_at_home = false) {
  const Device device = buffer.device;
  plan.rank = buffer.options.rank;
  plan.topology = buffer.options.topology;
  plan.config = buffer.options.config;
  plan.args = args;
  const ExpertMajorHandleData& handle = low_latency_handle(args.handle, engine, buffer.owner);
  if (!handle.received.load(std::memory_order_acquire)) {
    throw InvalidArgument(
        "handle: expected a dispatch whose receive half has run, got one whose hook "
        "(return_recv_hook) was not called");
  }
  plan.handle = &handle;
  const int64_t rows = handle.rows_per_expert();  // the dispatch's expert_capacity
  const int64_t local = handle.local_experts;

  if (args.zero_copy) {
    if (args.x.defined() && args.x.data != staging) {
      throw InvalidArgument("x: expected none (or low_latency_combine_buffer's view) with zero_copy, got " +
                            args.x.describe());
    }
    plan.hidden = handle.hidden;
    plan.y = static_cast<const uint16_t*>(staging);
  } else if (rows_at_home) {
    if (args.x.defined()) {
      throw InvalidArgument("x: expected none with the rows written home by the expert phase, got " +
                            args.x.describe());
    }
    plan.hidden = handle.hidden;
    plan.y = nullptr;
  } else {
    expect_tensor(args.x, "x", DType::bf16, 3, device);
    expect_dim(args.x, "x", 0, local, "local_experts of the dispatch");
    expect_dim(args.x, "x", 1, rows,
               "expert_capacity of the dispatch, num_ranks * max_tokens_per_rank when it was 0");
    const int64_t hidden = args.x.shape[2];
    if (hidden < 1 || hidden % 8 != 0 || hidden > capacity_hidden) {
      throw InvalidArgument("x: expected hidden a positive multiple of 8 (16-byte rows) and at most " +
                            std::to_string(capacity_hidden) + " (BufferSizing::hidden), got " +
                            args.x.describe());
    }
    plan.hidden = static_cast<int>(hidden);
    plan.y = args.x.as<const uint16_t>();
  }
  if (args.use_logfmt) {
    // NOTES: DeepEP's rule too: a zero-copy combine's rows are already in the buffer, as bf16.
    if (args.zero_copy) {
      throw InvalidArgument(
          "use_logfmt: expected zero_copy off (the zero-copy rows are already in the buffer as "
          "bf16), got both");
    }
    if (plan.hidden % common::kLogfmtBlock != 0) {
      throw InvalidArgument("use_logfmt: expected hidden a multiple of " +
                            std::to_string(common::kLogfmtBlock) + " (LogFMT's 128-channel blocks), got " +
                            args.x.describe());
    }
  }

  expect_tensor(args.topk_idx, "topk_idx", DType::i64, 2, device);
  expect_dim(args.topk_idx, "topk_idx", 0, handle.num_tokens, "num_tokens of the dispatch");
  expect_dim(args.topk_idx, "topk_idx", 1, handle.topk, "k of the dispatch");
  if (args.topk_idx.device == Device::cpu && handle.topk_idx.view().device == Device::cpu) {
    const int64_t* ids = args.topk_idx.as<const int64_t>();
    const int64_t* dispatched = handle.topk_idx.as<const int64_t>();
    for (int64_t i = 0; i < args.topk_idx.numel(); ++i) {
      if (ids[i] != -1 && ids[i] != dispatched[i]) {
        throw InvalidArgument(
            "topk_idx: expected the dispatch's expert ids (or -1 to leave a slot out), got " +
            std::to_string(ids[i]) + " at token " + std::to_string(i / handle.topk) + ", slot " +
            std::to_string(i % handle.topk) + " where the dispatch had " + std::to_string(dispatched[i]));
      }
    }
  }
  expect_tensor(args.topk_weights, "topk_weights", DType::f32, 2, device);
  expect_dim(args.topk_weights, "topk_weights", 0, handle.num_tokens, "num_tokens of the dispatch");
  expect_dim(args.topk_weights, "topk_weights", 1, handle.topk, "k of the dispatch");
  expect_output(args.out_combined_x, "out_combined_x", DType::bf16, {handle.num_tokens, plan.hidden},
                "[num_tokens, hidden of x]", device);
  // NOTES: read only by this rank, so not part of the signature every rank's call must match.
  expect_optional_bias(args.bias0, "bias0", handle.num_tokens, plan.hidden, device);
  expect_optional_bias(args.bias1, "bias1", handle.num_tokens, plan.hidden, device);
  expect_output(args.wait_recv_cost_stats, "wait_recv_cost_stats", DType::i64,
                {static_cast<int64_t>(buffer.options.topology.num_ranks)}, "[num_ranks]", device);
  // use_logfmt changes what travels (DeepEP's senders encode and its receivers decode): every rank
  // must agree on it, as on the shapes.
  plan.signature = call_signature(4, plan.hidden, handle.topk, handle.num_experts, handle.max_tokens_per_rank,
                                  handle.rows_per_expert(), args.use_logfmt ? 1 : 0);
}

}  // namespace

LowLatencyDispatchPlan plan_low_latency_dispatch(const LowLatencyDispatchArgs& args,
                                                 const PlanContext& buffer,
                                                 const common::LowLatencyLayout& layout) {
  // NOTES: its receive slots hold R * max rows per expert in the heap whatever recv_x's size, so a
  // capacity would only shrink the outputs; the symmetric engine is the one meant for it.
  if (args.expert_capacity != 0) {
    throw Unsupported(
        "low_latency_dispatch: expert_capacity is not supported by the low_latency engine (expected "
        "0, got " +
        std::to_string(args.expert_capacity) +
        "); use symmetric_dispatch for "
        "per-expert capacities");
  }
  // NOTES: its senders cast bf16 rows as they write them into the receive slots; carrying the caller's
  // fp8 rows and scales is the symmetric engine's (its publish copies them).
  if (args.x.defined() && args.x.dtype == DType::fp8_e4m3) {
    throw Unsupported(
        "x: fp8_e4m3 input (rows cast by the caller, with x_scales) is not supported by the low_latency "
        "engine (expected bf16 x, which use_fp8 casts; got " +
        args.x.describe() + "); the symmetric engine carries pre-cast fp8 rows (symmetric_dispatch)");
  }
  LowLatencyDispatchPlan plan;
  plan.layout = layout;
  plan_expert_major_dispatch(args, low_latency_capacity(layout), buffer, plan);
  return plan;
}

LowLatencyCombinePlan plan_low_latency_combine(const LowLatencyCombineArgs& args, const PlanContext& buffer,
                                               const common::LowLatencyLayout& layout, void* staging) {
  LowLatencyCombinePlan plan;
  plan.layout = layout;
  plan_expert_major_combine(args, Engine::low_latency, layout.hidden, staging, buffer, plan);
  // Across nodes the CUDA engine packs LogFMT rows into the combine buffer for its puts: x there
  // would be overwritten while it is read. Refused on every backend, as the same call must be.
  const uintptr_t x = reinterpret_cast<uintptr_t>(plan.y);
  const uintptr_t area = reinterpret_cast<uintptr_t>(staging);
  if (args.use_logfmt && !plan.topology.is_single_node() && staging != nullptr &&
      x < area + layout.staging_bytes() && x + static_cast<size_t>(args.x.nbytes()) > area) {
    throw InvalidArgument(
        "use_logfmt: expected x outside the combine buffer (low_latency_combine_buffer's view) across "
        "nodes, where the packed rows are staged; got x inside it");
  }
  return plan;
}

namespace {

// `data`'s offset in this rank's heap when its `bytes` lie in the heap area [area_offset, + area_bytes),
// else -1. A tensor only partly inside is refused, naming `what`: it would read past the area.
int64_t heap_area_offset(const void* data, size_t bytes, const uint8_t* heap_base, size_t area_offset,
                         size_t area_bytes, const char* what, const char* view) {
  if (data == nullptr || area_bytes == 0 || heap_base == nullptr) return -1;
  const uintptr_t begin = reinterpret_cast<uintptr_t>(data);
  const uintptr_t area = reinterpret_cast<uintptr_t>(heap_base) + area_offset;
  if (begin < area || begin >= area + area_bytes) return -1;
  if (bytes > area + area_bytes - begin) {
    throw InvalidArgument(std::string(what) + ": expected a tensor inside the heap-resident area that " +
                          view + " returns (" + std::to_string(area_bytes) + " bytes), got one that starts " +
                          std::to_string(begin - area) + " bytes into it and is " + std::to_string(bytes) +
                          " bytes long");
  }
  return static_cast<int64_t>(begin - reinterpret_cast<uintptr_t>(heap_base));
}

}  // namespace

SymmetricDispatchPlan plan_symmetric_dispatch(const LowLatencyDispatchArgs& args, const PlanContext& buffer,
                                              const common::SymmetricLayout& layout,
                                              const uint8_t* heap_base) {
  if (args.return_recv_hook) {
    throw Unsupported(
        "symmetric_dispatch: return_recv_hook is not supported by the symmetric engine (one stage: "
        "there is no send half to split off); use low_latency_dispatch for hooks");
  }
  if (args.wait_recv_cost_stats.defined()) {
    throw Unsupported(
        "symmetric_dispatch: wait_recv_cost_stats is not supported by the symmetric engine (its receivers "
        "wait at one barrier, not per source rank); use low_latency_dispatch for it");
  }
  SymmetricDispatchPlan plan;
  plan.layout = layout;
  plan_expert_major_dispatch(args, symmetric_capacity(layout), buffer, plan);
  plan.x_heap_offset = heap_area_offset(args.x.data, args.x.nbytes(), heap_base, layout.heap_input_offset(),
                                        layout.heap_input_bytes(), "x", "Buffer::symmetric_input");
  plan.recv_x_heap_offset = heap_area_offset(args.out_recv_x.data, args.out_recv_x.nbytes(), heap_base,
                                             layout.heap_receive_offset(), layout.heap_receive_bytes(),
                                             "out_recv_x", "Buffer::symmetric_receive (its recv_x)");
  plan.recv_scales_heap_offset =
      heap_area_offset(args.out_recv_x_scales.data, args.out_recv_x_scales.nbytes(), heap_base,
                       layout.heap_receive_scales_offset(), layout.heap_receive_scales_bytes(),
                       "out_recv_x_scales", "Buffer::symmetric_receive (its recv_x_scales)");
  return plan;
}

SymmetricCombinePlan plan_symmetric_combine(const LowLatencyCombineArgs& args, const PlanContext& buffer,
                                            const common::SymmetricLayout& layout, const uint8_t* heap_base,
                                            bool rows_at_home) {
  if (args.return_recv_hook) {
    throw Unsupported(
        "symmetric_combine: return_recv_hook is not supported by the symmetric engine (one stage: "
        "there is no send half to split off); use low_latency_combine for hooks");
  }
  if (args.zero_copy) {
    throw Unsupported(
        "symmetric_combine: zero_copy is not supported by the symmetric engine (rows are pushed "
        "straight from x into the home ranks); pass the expert outputs as x");
  }
  if (args.use_logfmt) {
    throw Unsupported(
        "symmetric_combine: use_logfmt is not supported by the symmetric engine (its rows are read in "
        "place or pushed as bf16); use low_latency_combine for LogFMT");
  }
  if (args.wait_recv_cost_stats.defined()) {
    throw Unsupported(
        "symmetric_combine: wait_recv_cost_stats is not supported by the symmetric engine (its homes "
        "wait at one barrier, not per source rank); use low_latency_combine for it");
  }
  SymmetricCombinePlan plan;
  plan.layout = layout;
  plan_expert_major_combine(args, Engine::symmetric, layout.hidden, nullptr, buffer, plan, rows_at_home);
  plan.rows_at_home = rows_at_home;
  plan.y_heap_offset = heap_area_offset(plan.y, args.x.nbytes(), heap_base, layout.heap_output_offset(),
                                        layout.heap_output_bytes(), "x", "Buffer::symmetric_expert_output");
  return plan;
}

common::SymmetricHomeRows symmetric_home_rows(const SymmetricCombinePlan& plan, const common::SymHeap& heap,
                                              common::RankMaskView mask) {
  const ExpertMajorHandleData& handle = *plan.handle;
  common::SymmetricHomeRows rows;
  rows.heap = heap;
  rows.layout = plan.layout;
  rows.mask = mask;
  rows.rank = plan.rank;
  rows.num_ranks = plan.topology.num_ranks;
  rows.local_experts = handle.local_experts;
  rows.topk = handle.topk;
  rows.max_tokens_per_rank = handle.max_tokens_per_rank;
  rows.capacity = handle.rows_per_expert();
  rows.layout_range = handle.layout_range.as<const int32_t>();
  rows.src_info = handle.src_info.as<const int32_t>();
  rows.src_slot = handle.src_slot.as<const int32_t>();
  return rows;
}

TensorView symmetric_input_view(const PlanContext& buffer, const common::SymmetricLayout& layout,
                                uint8_t* heap_base, int64_t num_tokens, int hidden) {
  if (layout.heap_input_tokens <= 0) {
    throw InvalidArgument(
        "symmetric_input: expected a buffer sized with BufferSizing::symmetric_heap_input = true, got one "
        "sized without it");
  }
  if (num_tokens < 0 || num_tokens > layout.heap_input_tokens) {
    throw InvalidArgument("num_tokens: expected 0.." + std::to_string(layout.heap_input_tokens) +
                          " (sizing.symmetric_max_tokens_per_rank), got " + std::to_string(num_tokens));
  }
  if (hidden < 1 || hidden > layout.hidden) {
    throw InvalidArgument("hidden: expected 1.." + std::to_string(layout.hidden) + " (sizing.hidden), got " +
                          std::to_string(hidden));
  }
  return TensorView(heap_base + layout.heap_input_offset(), DType::bf16, {num_tokens, hidden}, buffer.device,
                    buffer.device_index());
}

TensorView symmetric_expert_output_view(const PlanContext& buffer, const common::SymmetricLayout& layout,
                                        uint8_t* heap_base, const ExpertMajorHandleData& handle, int hidden) {
  if (layout.heap_output_rows <= 0) {
    throw InvalidArgument(
        "symmetric_expert_output: expected a buffer sized with "
        "BufferSizing::symmetric_heap_output_rows_per_expert "
        "> 0, got one sized without it");
  }
  const int64_t rows = handle.rows_per_expert();
  if (rows > layout.heap_output_rows) {
    throw InvalidArgument("handle: expected a dispatch of at most " +
                          std::to_string(layout.heap_output_rows) +
                          " rows per expert (sizing.symmetric_heap_output_rows_per_expert), got one of " +
                          std::to_string(rows) + " (its expert_capacity)");
  }
  if (hidden == 0) hidden = handle.hidden;
  if (hidden < 1 || hidden > layout.hidden) {
    throw InvalidArgument("hidden: expected 1.." + std::to_string(layout.hidden) +
                          " (sizing.hidden), or 0 for the dispatch's, got " + std::to_string(hidden));
  }
  return TensorView(heap_base + layout.heap_output_offset(), DType::bf16,
                    {handle.local_experts, rows, hidden}, buffer.device, buffer.device_index());
}

SymmetricReceiveViews symmetric_receive_views(const PlanContext& buffer,
                                              const common::SymmetricLayout& layout, uint8_t* heap_base,
                                              int64_t expert_capacity, int hidden) {
  if (layout.heap_receive_rows <= 0) {
    throw InvalidArgument(
        "symmetric_receive: expected a buffer sized with "
        "BufferSizing::symmetric_heap_receive_rows_per_expert "
        "> 0, got one sized without it");
  }
  // As a dispatch resolves its expert_capacity, at the region's max_tokens_per_rank.
  const int64_t all_rows = static_cast<int64_t>(layout.num_ranks) * layout.max_tokens_per_rank;
  if (expert_capacity < 0 || expert_capacity > all_rows) {
    throw InvalidArgument("expert_capacity: expected 0 (num_ranks * sizing.symmetric_max_tokens_per_rank = " +
                          std::to_string(all_rows) + " rows per local expert) or 1.." +
                          std::to_string(all_rows) + ", got " + std::to_string(expert_capacity));
  }
  const int64_t rows = expert_capacity == 0 ? all_rows : expert_capacity;
  if (rows > layout.heap_receive_rows) {
    throw InvalidArgument("expert_capacity: expected at most " + std::to_string(layout.heap_receive_rows) +
                          " rows per local expert (sizing.symmetric_heap_receive_rows_per_expert), got " +
                          (expert_capacity == 0 ? "0 (" + std::to_string(all_rows) + " rows)"
                                                : std::to_string(expert_capacity)));
  }
  const int given = hidden;
  if (hidden == 0) hidden = layout.hidden;
  // As a dispatch of the area's dtype takes hidden: fp8 one scale per 128 channels, bf16 16-byte rows.
  const bool fp8 = layout.heap_receive_scaled();
  const int multiple = fp8 ? common::kScaleBlock : 8;
  if (hidden < 1 || hidden > layout.hidden || hidden % multiple != 0) {
    throw InvalidArgument(
        "hidden: expected a multiple of " + std::to_string(multiple) +
        (fp8 ? " (one f32 scale per 128 channels)" : " (16-byte bf16 rows)") + " in 1.." +
        std::to_string(layout.hidden) + " (sizing.hidden), or 0 for sizing.hidden, got " +
        (given == 0 ? "0 (sizing.hidden " + std::to_string(layout.hidden) + ")" : std::to_string(given)));
  }
  const int device_index = buffer.device_index();
  SymmetricReceiveViews views;
  views.recv_x = TensorView(heap_base + layout.heap_receive_offset(), fp8 ? DType::fp8_e4m3 : DType::bf16,
                            {layout.local_experts, rows, hidden}, buffer.device, device_index);
  if (fp8) {
    views.recv_x_scales =
        TensorView(heap_base + layout.heap_receive_scales_offset(), DType::f32,
                   {layout.local_experts, rows, hidden / common::kScaleBlock}, buffer.device, device_index);
  }
  return views;
}

void check_pull_reaches_y(const SymmetricCombinePlan& plan, bool pointers_shared) {
  if (pointers_shared || plan.y_heap_offset >= 0) return;
  throw InvalidArgument(
      "x: the pull combine reads every rank's expert outputs where they are, and with ranks in separate "
      "processes or on several GPUs it reaches only the heap-resident ones: expected the view "
      "Buffer::symmetric_expert_output() returns, got a tensor outside it");
}

}  // namespace switchyard::detail
