#include "cpu/normal/call.hpp"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "core/caller_dispatch_outputs.hpp"
#include "core/normal_sizing.hpp"
#include "cpu/normal/dispatch_layout.hpp"
#include "switchyard/errors.hpp"

namespace switchyard::cpu {

namespace {

// The caller's output (checked by detail::caller_dispatch_outputs), or a new one.
Tensor output_or_allocate(const TensorView& given, DType dtype, int64_t rows, int64_t cols) {
  return given.defined() ? Tensor::borrow(given) : Tensor::empty(dtype, {rows, cols});
}

// Notify: tells every destination how many tokens it gets per channel and per local expert, then
// reads what every source sends this rank into the handle.
void exchange_counts(const common::SymHeap& heap, HeapBarrier& barrier, const detail::DispatchPlan& plan,
                     const common::NormalHeapLayout& layout, const uint8_t* in_rank,
                     transport::Transport* link, detail::NormalHandleData& handle) {
  const int num_ranks = plan.topology.num_ranks;
  const int num_channels = plan.config.num_channels;
  const int local_experts = plan.local_experts;
  const int ranks_per_node = plan.topology.ranks_per_node;
  std::vector<int32_t> channel_counts(static_cast<size_t>(num_ranks) * num_channels, 0);
  std::vector<int32_t> expert_counts(static_cast<size_t>(num_ranks) * local_experts, 0);
  const int topk = plan.topk;
  const int64_t* ids = plan.args.topk_idx.as<const int64_t>();
  for (int channel = 0; channel < num_channels; ++channel) {
    int64_t begin = common::channel_begin(plan.num_tokens, num_channels, channel);
    int64_t end = common::channel_begin(plan.num_tokens, num_channels, channel + 1);
    for (int64_t token = begin; token < end; ++token) {
      for (int destination = 0; destination < num_ranks; ++destination) {
        channel_counts[destination * num_channels + channel] += in_rank[token * num_ranks + destination];
      }
    }
  }
  for (int64_t i = 0; i < plan.num_tokens * topk; ++i) {
    if (ids[i] >= 0) ++expert_counts[ids[i]];  // experts are rank-major, so this is [rank][local]
  }
  if (!plan.args.topk_idx.defined()) {  // routed by the layout alone: the caller's per-expert counts
    const int32_t* given = plan.layout->num_tokens_per_expert.as<const int32_t>();
    std::copy(given, given + plan.num_experts, expert_counts.begin());
  }
  std::vector<uint8_t> staged(link ? layout.notify_record_bytes() : 0);
  const size_t record_offset = static_cast<size_t>(
      reinterpret_cast<uint8_t*>(layout.notify_signature(heap.base, plan.rank)) - heap.base);
  for (int destination = 0; destination < num_ranks; ++destination) {
    if (link && destination / ranks_per_node != plan.rank / ranks_per_node) {
      uint8_t* record_base = staged.data();
      std::memcpy(record_base, &plan.signature, sizeof(uint64_t));
      std::memcpy(record_base + sizeof(uint64_t), &channel_counts[destination * num_channels],
                  num_channels * sizeof(int32_t));
      std::memcpy(record_base + sizeof(uint64_t) + num_channels * sizeof(int32_t),
                  &expert_counts[static_cast<size_t>(destination) * local_experts],
                  local_experts * sizeof(int32_t));
      link->put(destination, record_offset, staged.data(), staged.size());
      continue;
    }
    uint8_t* peer = heap.peer_base(destination);
    common::NotifyRecord record = layout.notify_record(peer, plan.rank);
    std::memcpy(record.channel_counts, &channel_counts[destination * num_channels],
                num_channels * sizeof(int32_t));
    std::memcpy(record.expert_counts, &expert_counts[static_cast<size_t>(destination) * local_experts],
                local_experts * sizeof(int32_t));
    *layout.notify_signature(peer, plan.rank) = plan.signature;
  }
  barrier.arrive_and_wait(heap, layout, plan.config.timeout_seconds, "dispatch", link, ranks_per_node);

  // Receive side: where each (source, channel) range lands, and the per-expert counts.
  handle.recv_channel_start = Tensor::empty(DType::i32, {num_ranks * num_channels + 1});
  int32_t* start = handle.recv_channel_start.as<int32_t>();
  std::vector<int64_t> per_expert(local_experts, 0);
  int64_t total = 0;
  for (int source = 0; source < num_ranks; ++source) {
    uint64_t signature = *layout.notify_signature(heap.base, source);
    if (signature != plan.signature) {
      throw InvalidArgument(
          "dispatch: expected every rank to call with the same shape (hidden, dtype, k, experts, "
          "alignment, mode); rank " +
          std::to_string(source) + "'s call differs from rank " + std::to_string(plan.rank) + "'s");
    }
    common::NotifyRecord record = layout.notify_record(heap.base, source);
    for (int channel = 0; channel < num_channels; ++channel) {
      start[source * num_channels + channel] = static_cast<int32_t>(total);
      total += record.channel_counts[channel];
    }
    for (int expert = 0; expert < local_experts; ++expert) per_expert[expert] += record.expert_counts[expert];
  }
  start[num_ranks * num_channels] = static_cast<int32_t>(total);
  handle.num_recv_tokens = total;
  handle.recv_expert_counts = Tensor::empty(DType::i32, {local_experts});
  handle.recv_token_count = Tensor::empty(DType::i32, {1});
  handle.num_recv_tokens_per_expert.resize(local_experts);
  for (int expert = 0; expert < local_experts; ++expert) {
    int64_t aligned = common::ceil_div(per_expert[expert], plan.expert_alignment) * plan.expert_alignment;
    handle.num_recv_tokens_per_expert[expert] = static_cast<int>(aligned);
    handle.recv_expert_counts.as<int32_t>()[expert] = static_cast<int32_t>(aligned);
  }
  handle.recv_token_count.as<int32_t>()[0] = static_cast<int32_t>(total);
}

}  // namespace

void NormalCalls::zero_rings(const common::NormalHeapLayout& layout) const {
  const common::SymHeap& heap = heap_.view();
  for (int channel = 0; channel < layout.num_channels; ++channel) {
    for (int source = 0; source < layout.num_ranks; ++source) {
      common::Ring ring = layout.ring(heap.base, channel, source);
      common::st_release_sys(ring.tail(), 0);
      common::st_release_sys(ring.head(), 0);
    }
  }
}

void NormalCalls::arrive_and_wait(const common::NormalHeapLayout& layout, const Config& config,
                                  const char* operation, transport::Transport* link, int ranks_per_node) {
  barrier_.arrive_and_wait(heap_.view(), layout, config.timeout_seconds, operation, link, ranks_per_node);
}

void NormalCalls::open_call(const common::NormalHeapLayout& layout, const Config& config,
                            const char* operation, uint64_t signature, transport::Transport* link,
                            int ranks_per_node) {
  barrier_.arrive_and_wait(heap_.view(), layout, config.timeout_seconds, operation, link, ranks_per_node,
                           signature);
}

uint64_t routing_epoch_of(const detail::NormalHandleData& handle) {
  return handle.routing_epoch.defined() ? static_cast<uint64_t>(handle.routing_epoch.as<const int64_t>()[0])
                                        : 0;
}

Tensor dispatch_routing(const detail::DispatchPlan& plan) {
  if (plan.cached) return plan.cached->is_token_in_rank;  // the handle's own, never written again
  if (plan.layout) {
    // NOTES: a copy, not the caller's tensor: the handle routes combine and cached dispatches by it,
    // and DispatchArgs::layout is borrowed for this call only (the caller may free or reuse it).
    const Tensor& caller = plan.layout->is_token_in_rank;
    Tensor owned = Tensor::empty(DType::boolean, {plan.num_tokens, plan.topology.num_ranks});
    if (caller.nbytes() > 0) std::memcpy(owned.data(), caller.data(), caller.nbytes());
    return owned;
  }
  return compute_dispatch_layout(plan.args.topk_idx, plan.num_experts, plan.topology).is_token_in_rank;
}

DispatchCall NormalCalls::start_dispatch(const detail::DispatchPlan& plan,
                                         const common::NormalHeapLayout& layout,
                                         const Tensor& is_token_in_rank, transport::Transport* link) {
  const common::SymHeap& heap = heap_.view();
  const uint8_t* in_rank = is_token_in_rank.as<const uint8_t>();
  DispatchCall call;
  call.handle = detail::new_normal_handle(plan, owner_);
  detail::NormalHandleData& handle = *call.handle;
  handle.is_token_in_rank = is_token_in_rank;
  if (!plan.cached) {
    // The routing is this call's: named by the barrier that opened it, the same number on every rank.
    handle.routing_epoch = Tensor::empty(DType::i64, {1});
    handle.routing_epoch.as<int64_t>()[0] = static_cast<int64_t>(barrier_.epoch());
    exchange_counts(heap, barrier_, plan, layout, in_rank, link, handle);
  }

  try {
    make_dispatch_outputs(plan, call);
  } catch (...) {
    // After the count exchange every peer expects this rank's part of the call (its rows, its barriers).
    call.failure = std::current_exception();
    make_scratch_outputs(plan, call);
  }
  return fill_dispatch_context(plan, layout, in_rank, std::move(call));
}

void NormalCalls::make_scratch_outputs(const detail::DispatchPlan& plan, DispatchCall& call) const {
  detail::NormalHandleData& handle = *call.handle;
  call.num_recv = handle.num_recv_tokens;
  call.rows = call.num_recv;  // room for what arrives, whatever num_worst_tokens said
  const int64_t rows = call.rows;
  DispatchResult& result = call.result;
  result = DispatchResult{};
  result.recv_x = Tensor::empty(plan.dtype, {rows, plan.hidden});
  if (plan.has_scales)
    result.recv_x_scales = Tensor::empty(DType::f32, {rows, plan.hidden / common::kScaleBlock});
  if (plan.topk > 0) result.recv_topk_idx = Tensor::empty(DType::i64, {rows, plan.topk});
  if (plan.has_weights) result.recv_topk_weights = Tensor::empty(DType::f32, {rows, plan.topk});
  handle.recv_src_token = Tensor::empty(DType::i32, {rows});
}

void NormalCalls::make_dispatch_outputs(const detail::DispatchPlan& plan, DispatchCall& call) const {
  detail::NormalHandleData& handle = *call.handle;
  call.num_recv = handle.num_recv_tokens;
  const bool worst_case = plan.num_worst_tokens > 0;
  if (worst_case && call.num_recv > plan.num_worst_tokens) {
    throw InvalidArgument("num_worst_tokens: expected at least the " + std::to_string(call.num_recv) +
                          " tokens this rank receives, got " + std::to_string(plan.num_worst_tokens));
  }
  call.rows = worst_case ? plan.num_worst_tokens : call.num_recv;
  const int64_t rows = call.rows;

  DispatchResult& result = call.result;
  // The caller's outputs (out_recv_*, or its allocator's), each checked; the rest allocated here.
  const DispatchOutputs given = detail::caller_dispatch_outputs(plan, rows, Device::cpu, 0);
  result.recv_x = output_or_allocate(given.recv_x, plan.dtype, rows, plan.hidden);
  if (plan.has_scales) {
    result.recv_x_scales =
        output_or_allocate(given.recv_x_scales, DType::f32, rows, plan.hidden / common::kScaleBlock);
  }
  if (plan.topk > 0)
    result.recv_topk_idx = output_or_allocate(given.recv_topk_idx, DType::i64, rows, plan.topk);
  if (plan.has_weights) {
    result.recv_topk_weights = output_or_allocate(given.recv_topk_weights, DType::f32, rows, plan.topk);
  }
  handle.recv_src_token = Tensor::empty(DType::i32, {rows});
}

DispatchCall NormalCalls::fill_dispatch_context(const detail::DispatchPlan& plan,
                                                const common::NormalHeapLayout& layout,
                                                const uint8_t* in_rank, DispatchCall call) const {
  const common::SymHeap& heap = heap_.view();
  const DispatchArgs& args = plan.args;
  detail::NormalHandleData& handle = *call.handle;
  DispatchResult& result = call.result;
  DispatchContext& context = call.context;
  context = DispatchContext{};
  context.heap = &heap;
  context.layout = layout;
  context.message = detail::dispatch_message(plan.hidden, plan.dtype, plan.topk, plan.has_weights);
  context.input = plan.x_in_heap ? plan.input : common::NormalInputLayout{};  // one node only
  context.row_bytes = context.message.row_bytes;
  context.num_scales = context.message.num_scales;
  context.rank = plan.rank;
  context.num_ranks = plan.topology.num_ranks;
  context.num_channels = plan.config.num_channels;
  context.local_experts = plan.local_experts;
  context.chunk_tokens = static_cast<uint32_t>(plan.config.chunk_tokens);
  context.num_tokens = plan.num_tokens;
  context.x = args.x.as<const uint8_t>();
  context.x_scales = plan.has_scales ? args.x_scales.as<const float>() : nullptr;
  context.x_scales_layout = plan.scales_layout;
  context.topk_idx = plan.topk > 0 ? args.topk_idx.as<const int64_t>() : nullptr;
  context.topk_weights = plan.has_weights ? args.topk_weights.as<const float>() : nullptr;
  context.is_token_in_rank = in_rank;
  context.recv_channel_start = handle.recv_channel_start.as<const int32_t>();
  context.recv_x = result.recv_x.as<uint8_t>();
  context.recv_x_scales = plan.has_scales ? result.recv_x_scales.as<float>() : nullptr;
  context.recv_topk_idx = plan.topk > 0 ? result.recv_topk_idx.as<int64_t>() : nullptr;
  context.recv_topk_weights = plan.has_weights ? result.recv_topk_weights.as<float>() : nullptr;
  context.recv_src_token = handle.recv_src_token.as<int32_t>();
  return call;
}

DispatchResult finish_dispatch(const detail::DispatchPlan& plan, DispatchCall& call) {
  if (call.failure) std::rethrow_exception(call.failure);
  const DispatchContext& context = call.context;
  for (int64_t row = call.num_recv; row < call.rows; ++row) {
    context.recv_src_token[row] = -1;
    for (int k = 0; k < plan.topk; ++k) {
      context.recv_topk_idx[row * plan.topk + k] = -1;
      if (context.recv_topk_weights) context.recv_topk_weights[row * plan.topk + k] = 0.0f;
    }
  }

  const bool worst_case = plan.num_worst_tokens > 0;
  DispatchResult result = std::move(call.result);
  result.num_recv_tokens = worst_case ? -1 : call.num_recv;
  if (!worst_case) result.num_recv_tokens_per_expert = call.handle->num_recv_tokens_per_expert;
  result.recv_expert_counts = call.handle->recv_expert_counts;
  result.recv_token_count = call.handle->recv_token_count;
  result.handle = DispatchHandle(std::move(call.handle));
  return result;
}

CombineResult start_combine(const detail::CombinePlan& plan) {
  const detail::NormalHandleData& handle = *plan.handle;
  const CombineArgs& args = plan.args;
  if (handle.num_channels != plan.config.num_channels) {
    throw InvalidArgument("handle: expected a dispatch made with " +
                          std::to_string(plan.config.num_channels) + " channels, got one with " +
                          std::to_string(handle.num_channels));
  }
  CombineResult result;
  result.combined_x = args.out_combined_x.defined()
                          ? Tensor::borrow(args.out_combined_x)
                          : Tensor::empty(DType::bf16, {handle.num_tokens, plan.hidden});
  if (plan.has_weights) {
    result.combined_topk_weights = args.out_combined_topk_weights.defined()
                                       ? Tensor::borrow(args.out_combined_topk_weights)
                                       : Tensor::empty(DType::f32, {handle.num_tokens, plan.topk});
  }
  return result;
}

CombineContext combine_context(const common::SymHeap& heap, const detail::CombinePlan& plan,
                               const common::NormalHeapLayout& layout, CombineResult& result) {
  const detail::NormalHandleData& handle = *plan.handle;
  const CombineArgs& args = plan.args;
  CombineContext context{};
  context.heap = &heap;
  context.layout = layout;
  context.message = detail::combine_message(plan.hidden, plan.topk, plan.has_weights);
  context.rank = plan.rank;
  context.num_ranks = plan.topology.num_ranks;
  context.ranks_per_node = plan.topology.ranks_per_node;
  context.num_channels = plan.config.num_channels;
  context.chunk_tokens = static_cast<uint32_t>(plan.config.chunk_tokens);
  context.y = args.x.as<const uint8_t>();
  context.y_topk_weights = plan.has_weights ? args.topk_weights.as<const float>() : nullptr;
  context.recv_channel_start = handle.recv_channel_start.as<const int32_t>();
  context.num_tokens = handle.num_tokens;
  context.is_token_in_rank = handle.is_token_in_rank.as<const uint8_t>();
  context.combined_x = result.combined_x.as<uint16_t>();
  context.combined_topk_weights = plan.has_weights ? result.combined_topk_weights.as<float>() : nullptr;
  context.bias0 = args.bias0.defined() ? args.bias0.as<const uint16_t>() : nullptr;
  context.bias1 = args.bias1.defined() ? args.bias1.as<const uint16_t>() : nullptr;
  context.rows_in_place = plan.y_in_heap;  // one node only (the Buffer refuses the input across nodes)
  context.input = plan.y_in_heap ? plan.combine_input : common::NormalCombineInputLayout{};
  return context;
}

}  // namespace switchyard::cpu
