#include "cuda/normal/engine.hpp"

#include <string>

#include "common/host_device.hpp"
#include "core/carved_allocation.hpp"
#include "core/normal_sizing.hpp"
#include "cuda/normal/combine_outputs.hpp"
#include "cuda/normal/dispatch_outputs.hpp"
#include "device/cuda_check.hpp"

namespace switchyard::cuda {

NormalEngine::NormalEngine(const BufferOptions& options, detail::BufferId owner, CallServices& services)
    : options_(options),
      device_(options.device),
      owner_(owner),
      services_(services),
      // Sized here for the sizing's experts: a page-locked allocation in the middle of a call could stall
      // the device.
      counts_(options.rank, options.sizing.num_experts, count_readback_from_environment()),
      phases_(options.rank) {
  // Once, before any rank launches: changing a kernel's attributes later could wait for its running
  // instances, i.e. for peers that wait for us.
  prepare_normal_kernels(device_);
  SY_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&blocks_done_), 2 * sizeof(uint64_t)));
  SY_CUDA_CHECK(cudaMemset(blocks_done_, 0, 2 * sizeof(uint64_t)));
}

NormalEngine::~NormalEngine() {
  if (blocks_done_) cudaFree(blocks_done_);
}

Tensor NormalEngine::allocate(const CallEnv& env, DType dtype, std::initializer_list<int64_t> dims) const {
  // Stream-ordered: no allocation or free inside a call synchronises the device.
  return Tensor::empty(dtype, dims, Device::cuda, device_, env.allocation_stream);
}

DispatchLayout NormalEngine::layout(const TensorView& topk_idx, int num_experts, KernelContext context,
                                    const CallEnv& env, const DispatchLayoutOutputs* out) {
  const Topology& topology = options_.topology;
  const int64_t num_tokens = topk_idx.shape[0];
  DispatchLayout layout;
  if (out) {
    layout.num_tokens_per_rank = Tensor::borrow(out->num_tokens_per_rank);
    layout.num_tokens_per_node = Tensor::borrow(out->num_tokens_per_node);
    layout.num_tokens_per_expert = Tensor::borrow(out->num_tokens_per_expert);
    layout.is_token_in_rank = Tensor::borrow(out->is_token_in_rank);
  } else {
    // One allocation carved into the four outputs (DispatchLayout::storage), the counts consecutive so
    // that one memset clears them (launch_layout).
    const size_t per_rank_at = 0;
    const size_t per_node_at = per_rank_at + topology.num_ranks * size_t{4};
    const size_t per_expert_at = per_node_at + topology.num_nodes() * size_t{4};
    const size_t in_rank_at = common::align_up(per_expert_at + num_experts * size_t{4}, 128);
    const size_t total =
        common::align_up(in_rank_at + static_cast<size_t>(num_tokens * topology.num_ranks), 128);
    layout.storage = allocate(env, DType::i32, {static_cast<int64_t>(total / 4)});
    layout.num_tokens_per_rank =
        Tensor::part_of(layout.storage, per_rank_at, DType::i32, {topology.num_ranks});
    layout.num_tokens_per_node =
        Tensor::part_of(layout.storage, per_node_at, DType::i32, {topology.num_nodes()});
    layout.num_tokens_per_expert = Tensor::part_of(layout.storage, per_expert_at, DType::i32, {num_experts});
    layout.is_token_in_rank =
        Tensor::part_of(layout.storage, in_rank_at, DType::boolean, {num_tokens, topology.num_ranks});
  }
  LayoutLaunch launch{topk_idx.as<const int64_t>(),
                      num_tokens,
                      static_cast<int>(topk_idx.shape[1]),
                      num_experts,
                      topology.num_ranks,
                      topology.ranks_per_node,
                      layout.num_tokens_per_rank.as<int32_t>(),
                      layout.num_tokens_per_node.as<int32_t>(),
                      layout.num_tokens_per_expert.as<int32_t>(),
                      layout.is_token_in_rank.as<bool>()};
  context.layout = common::NormalHeapLayout{};
  launch_layout(context, launch, env.stream);
  return layout;
}

DispatchResult NormalEngine::dispatch(const detail::DispatchPlan& plan) {
  const CallStart call = services_.begin_normal_call(plan.args.stream, plan.config);
  return run_dispatch(plan, call.context, call.env);
}

CombineResult NormalEngine::combine(const detail::CombinePlan& plan) {
  const CallStart call = services_.begin_normal_call(plan.args.stream, plan.config);
  return run_combine(plan, call.context, call.env);
}

namespace {

// The handle's routing epoch on the device (NormalHandleData::routing_epoch), or null for a handle without
// one (the hierarchical engine's).
const int64_t* routing_epoch_of(const detail::NormalHandleData& handle) {
  return handle.routing_epoch.defined() ? handle.routing_epoch.as<const int64_t>() : nullptr;
}

// The caller's inputs that are not the heap input's views, copied into them (core/staged_heap_input.hpp): on
// the call's stream, before its first barrier, after which peers may read them.
void stage_heap_input(const KernelContext& context, const detail::StagedHeapInput& staged,
                      cudaStream_t stream) {
  for (const detail::StagedCopy& copy : staged) {
    if (copy.scales.column_major) {
      launch_transpose_scales(reinterpret_cast<float*>(context.heap.base + copy.heap_offset),
                              static_cast<const float*>(copy.from), copy.scales, stream);
      continue;
    }
    SY_CUDA_CHECK(cudaMemcpyAsync(context.heap.base + copy.heap_offset, copy.from, copy.bytes,
                                  cudaMemcpyDeviceToDevice, stream));
  }
}

// x in the heap, a cached dispatch with topk_idx: this rank's routing, left in its heap input for its
// receivers to pull by (common::NormalInputLayout): the cached handle's send lists and this call's topk_idx
// and weights as given (a fresh dispatch's notify writes them there itself). Stream-ordered before the
// opening barrier.
void leave_cached_routing(const detail::DispatchPlan& plan, const KernelContext& context,
                          cudaStream_t stream) {
  const common::NormalInputLayout& input = plan.input;
  uint8_t* heap = context.heap.base;
  const size_t slots = static_cast<size_t>(plan.num_tokens) * plan.topk;
  if (slots == 0) return;
  SY_CUDA_CHECK(cudaMemcpyAsync(heap + input.topk_idx_offset(), plan.args.topk_idx.data,
                                slots * sizeof(int64_t), cudaMemcpyDeviceToDevice, stream));
  if (plan.has_weights) {
    SY_CUDA_CHECK(cudaMemcpyAsync(heap + input.topk_weights_offset(), plan.args.topk_weights.data,
                                  slots * sizeof(float), cudaMemcpyDeviceToDevice, stream));
  }
  const size_t row = static_cast<size_t>(plan.num_tokens) * sizeof(int32_t);
  SY_CUDA_CHECK(cudaMemcpy2DAsync(
      input.send_list(heap, 0), static_cast<size_t>(input.max_tokens) * sizeof(int32_t),
      plan.cached->send_list.data(), row, row, plan.topology.num_ranks, cudaMemcpyDeviceToDevice, stream));
}

// Where the dispatch's received rows go: `result`'s outputs of `rows` rows, in `handle`'s receive order.
ReceivedRows received_rows(const detail::DispatchPlan& plan, const detail::NormalHandleData& handle,
                           const DispatchResult& result, int64_t rows) {
  ReceivedRows received{};
  received.recv_channel_start = handle.recv_channel_start.as<const int32_t>();
  received.recv_x = result.recv_x.as<uint8_t>();
  received.recv_x_scales = plan.has_scales ? result.recv_x_scales.as<float>() : nullptr;
  received.recv_topk_idx = plan.topk > 0 ? result.recv_topk_idx.as<int64_t>() : nullptr;
  received.recv_topk_weights = plan.has_weights ? result.recv_topk_weights.as<float>() : nullptr;
  received.recv_src_token = handle.recv_src_token.as<int32_t>();
  received.num_output_rows = rows;
  return received;
}

// The in-place dispatch's pull (docs/normal-in-place.md).
GatherLaunch gather_launch(const detail::DispatchPlan& plan, const detail::NormalHandleData& handle,
                           const DispatchResult& result, const common::DispatchMessage& message,
                           int64_t rows) {
  GatherLaunch gather{};
  gather.input = plan.input;
  gather.row_bytes = message.row_bytes;
  gather.num_scales = message.num_scales;
  gather.topk = plan.topk;
  gather.local_experts = plan.local_experts;
  gather.cached_recv_src_token =
      plan.gather_by_handle ? plan.cached->recv_src_token.as<const int32_t>() : nullptr;
  gather.received = received_rows(plan, handle, result, rows);
  return gather;
}

// The ring dispatch's launch.
DispatchLaunch dispatch_launch(const detail::DispatchPlan& plan, const detail::NormalHandleData& handle,
                               const DispatchResult& result, const common::DispatchMessage& message,
                               int64_t rows) {
  const DispatchArgs& args = plan.args;
  DispatchLaunch launch{};
  launch.message = message;
  launch.row_bytes = message.row_bytes;
  launch.num_scales = message.num_scales;
  launch.local_experts = plan.local_experts;
  launch.x = args.x.as<const uint8_t>();
  launch.x_scales = plan.has_scales ? args.x_scales.as<const float>() : nullptr;
  launch.x_scales_layout = plan.scales_layout;
  launch.topk_idx = plan.topk > 0 ? args.topk_idx.as<const int64_t>() : nullptr;
  launch.topk_weights = plan.has_weights ? args.topk_weights.as<const float>() : nullptr;
  launch.num_tokens = plan.num_tokens;
  launch.send_list = handle.send_list.as<const int32_t>();
  launch.send_channel_prefix = handle.send_channel_prefix.as<const int32_t>();
  launch.received = received_rows(plan, handle, result, rows);
  return launch;
}

}  // namespace

// After the count exchange every peer moves rows with this rank: a call that fails on this rank's host from
// then on (its outputs, bad input the notify found) still does its part, so that the failure is this rank's
// alone. In place, a gather without outputs (GatherLaunch::withdrawn) keeps the closing barrier; on the
// rings, the whole dispatch runs into outputs of its own (stand_in_dispatch). Errors are swallowed: the
// host's own failure is what the caller must see.
void NormalEngine::stand_in_after_the_counts(const detail::DispatchPlan& plan,
                                             const detail::NormalHandleData& handle,
                                             const common::DispatchMessage& message,
                                             const KernelContext& context, const CallEnv& env) noexcept {
  try {
    if (plan.x_in_heap) {
      GatherLaunch gather = gather_launch(plan, handle, DispatchResult{}, message, 0);
      gather.withdrawn = true;
      gather.blocks_done = blocks_done_;
      launch_gather(context, gather, env.stream);
      return;
    }
    const StandInDispatch own = stand_in_dispatch(plan, handle, device_, env.allocation_stream);
    const int64_t rows = plan.num_worst_tokens > 0 ? plan.num_worst_tokens : handle.num_recv_tokens;
    launch_dispatch(context, dispatch_launch(own.plan, handle, own.outputs, message, rows), env.stream);
  } catch (...) {
  }
}

DispatchResult NormalEngine::run_dispatch(const detail::DispatchPlan& plan, KernelContext context,
                                          const CallEnv& env) {
  const cudaStream_t stream = env.stream;
  const int num_ranks = plan.topology.num_ranks;
  const int num_channels = plan.config.num_channels;
  // With x in the heap no ring is used: the receivers pull the rows, and the routing each source leaves
  // beside them, in place (docs/normal-in-place.md).
  context.layout = detail::dispatch_heap_layout(plan);
  const DispatchArgs& args = plan.args;
  // A fresh dispatch without num_worst_tokens: its host waits for the counts (receive, below).
  const bool counts_to_host = !plan.cached && plan.num_worst_tokens == 0;
  if (counts_to_host) {
    refuse_host_synchronising_capture(stream);
    counts_.reserve(plan.local_experts);
  }

  const common::DispatchMessage message =
      detail::dispatch_message(plan.hidden, plan.dtype, plan.topk, plan.has_weights);
  std::shared_ptr<detail::NormalHandleData> handle = detail::new_normal_handle(plan, owner_);
  // Allocated before any kernel of the call: once peers spin in their dispatch kernels, an
  // allocation that had to grow the pool could wait on the device. M is at most every source's
  // capacity (or the worst-case rows).
  const int64_t source_row_capacity =
      plan.num_worst_tokens > 0 ? plan.num_worst_tokens
      : plan.cached             ? plan.cached->num_recv_tokens
                                : static_cast<int64_t>(num_ranks) * options_.sizing.max_tokens_per_rank;
  stage_heap_input(context, plan.staged, stream);
  if (plan.cached) {
    handle->recv_src_token = allocate(env, DType::i32, {source_row_capacity});
    if (plan.x_in_heap && !plan.gather_by_handle) leave_cached_routing(plan, context, stream);
    launch_begin_call(context, plan.signature, routing_epoch_of(*plan.cached), stream);
  } else {
    // The new handle's tables in one allocation (detail::CarvedAllocation): 8-9 tensors for the price of one.
    const int64_t tokens = plan.num_tokens;
    detail::CarvedAllocation tables;
    const size_t src_token_at = tables.reserve(DType::i32, source_row_capacity);
    const size_t channel_start_at = tables.reserve(DType::i32, num_ranks * num_channels + 1);
    const size_t expert_counts_at = tables.reserve(DType::i32, plan.local_experts);
    const size_t token_count_at = tables.reserve(DType::i32, 1);
    const size_t epoch_at = tables.reserve(DType::i64, 1);
    const size_t send_list_at = tables.reserve(DType::i32, num_ranks * tokens);
    const size_t channel_prefix_at = tables.reserve(DType::i32, num_ranks * (num_channels + 1));
    const size_t send_slot_at = tables.reserve(DType::i32, tokens * num_ranks);
    // is_token_in_rank: the copy of the caller's, or the layout's own; the layout's counts consecutive (as
    // layout() carves them, so that its grid path clears them with one memset).
    const size_t in_rank_at = tables.reserve(DType::boolean, tokens * num_ranks);
    const int num_nodes = plan.topology.num_nodes();
    const size_t counts_at =
        plan.layout ? 0 : tables.reserve(DType::i32, num_ranks + num_nodes + plan.num_experts);
    const Tensor storage = tables.allocate(Device::cuda, device_, env.allocation_stream);
    handle->recv_src_token = Tensor::part_of(storage, src_token_at, DType::i32, {source_row_capacity});
    handle->recv_channel_start =
        Tensor::part_of(storage, channel_start_at, DType::i32, {num_ranks * num_channels + 1});
    handle->recv_expert_counts = Tensor::part_of(storage, expert_counts_at, DType::i32, {plan.local_experts});
    handle->recv_token_count = Tensor::part_of(storage, token_count_at, DType::i32, {1});
    handle->routing_epoch = Tensor::part_of(storage, epoch_at, DType::i64, {1});
    handle->send_list = Tensor::part_of(storage, send_list_at, DType::i32, {num_ranks, tokens});
    handle->send_channel_prefix =
        Tensor::part_of(storage, channel_prefix_at, DType::i32, {num_ranks, num_channels + 1});
    handle->send_slot = Tensor::part_of(storage, send_slot_at, DType::i32, {tokens, num_ranks});
    handle->is_token_in_rank = Tensor::part_of(storage, in_rank_at, DType::boolean, {tokens, num_ranks});
    phases_.begin(stream);
    if (!plan.layout) {
      DispatchLayout& own = handle->own_layout;
      own.num_tokens_per_rank = Tensor::part_of(storage, counts_at, DType::i32, {num_ranks});
      own.num_tokens_per_node =
          Tensor::part_of(storage, counts_at + sizeof(int32_t) * num_ranks, DType::i32, {num_nodes});
      own.num_tokens_per_expert = Tensor::part_of(
          storage, counts_at + sizeof(int32_t) * (num_ranks + num_nodes), DType::i32, {plan.num_experts});
      own.is_token_in_rank = handle->is_token_in_rank;
      const DispatchLayoutOutputs into{own.num_tokens_per_rank, own.num_tokens_per_node,
                                       own.num_tokens_per_expert, own.is_token_in_rank};
      layout(args.topk_idx, plan.num_experts, context, env, &into);
    }
    phases_.mark(kDispatchLaidOut, stream);
    NotifyLaunch notify{};
    // The caller's layout is borrowed for this call only; combine and cached dispatches read the handle's
    // copy of its is_token_in_rank, which the notify writes as it scans the caller's (routing_copy) rather
    // than a copy of its own on the call's path (the phases' "layout" step, that copy, took 13-20 us of the
    // 128-token dispatch as 8 processes: session 34).
    notify.is_token_in_rank = plan.layout ? plan.layout->is_token_in_rank.as<const bool>()
                                          : handle->is_token_in_rank.as<const bool>();
    notify.routing_copy = plan.layout ? handle->is_token_in_rank.as<bool>() : nullptr;
    notify.topk_idx = args.topk_idx.as<const int64_t>();
    notify.num_tokens_per_expert =
        args.topk_idx.defined() ? nullptr : plan.layout->num_tokens_per_expert.as<const int32_t>();
    notify.num_tokens = plan.num_tokens;
    notify.topk = plan.topk;
    notify.local_experts = plan.local_experts;
    notify.expert_alignment = plan.expert_alignment;
    notify.signature = plan.signature;
    notify.recv_channel_start = handle->recv_channel_start.as<int32_t>();
    notify.recv_expert_counts = handle->recv_expert_counts.as<int32_t>();
    notify.recv_token_count = handle->recv_token_count.as<int32_t>();
    notify.routing_epoch = handle->routing_epoch.as<int64_t>();
    notify.send_list = handle->send_list.as<int32_t>();
    notify.send_channel_prefix = handle->send_channel_prefix.as<int32_t>();
    notify.send_slot = handle->send_slot.as<int32_t>();
    if (plan.x_in_heap) {
      uint8_t* heap = context.heap.base;
      notify.heap_send_lists = plan.input.send_list(heap, 0);
      notify.heap_send_list_stride = plan.input.max_tokens;
      notify.heap_topk_idx =
          plan.topk > 0 ? reinterpret_cast<int64_t*>(heap + plan.input.topk_idx_offset()) : nullptr;
      notify.heap_topk_weights =
          plan.has_weights ? reinterpret_cast<float*>(heap + plan.input.topk_weights_offset()) : nullptr;
      notify.topk_weights = plan.has_weights ? args.topk_weights.as<const float>() : nullptr;
    }
    const int32_t tag = counts_to_host ? counts_.next_tag() : 0;
    if (counts_to_host) {
      notify.posted = counts_.mailbox_for_device();
      notify.posted_tag = tag;
    }
    notify.stamps = phases_.stamps();
    launch_dispatch_notify(context, notify, stream);
    phases_.mark(kDispatchNotified, stream);
    if (counts_to_host) counts_.request(*handle, plan.local_experts, stream);
    phases_.mark(kDispatchCountsCopied, stream);
    // The one host wait of a non-worst-case dispatch: the output sizes.
    if (counts_to_host) {
      try {
        counts_.receive(*handle, plan.local_experts, tag, stream, env);
      } catch (...) {
        // Bad input the notify found (an expert id out of range) is raised here, after the count exchange
        // passed on every rank (the peers treat the bad ids as -1, as the notify counted them).
        if (counts_.exchanged(tag)) stand_in_after_the_counts(plan, *handle, message, context, env);
        throw;
      }
    }
    phases_.host_stamp(kHostCountsSeen);
  }

  DispatchResult result;
  try {
    result = dispatch_outputs(plan, *handle, device_, env.allocation_stream);
  } catch (...) {
    // A cached dispatch's opening barrier, or a fresh one's count exchange, has passed on every rank.
    stand_in_after_the_counts(plan, *handle, message, context, env);
    throw;
  }
  const bool worst_case = plan.num_worst_tokens > 0;
  const int64_t rows = worst_case ? plan.num_worst_tokens : handle->num_recv_tokens;
  phases_.mark(kDispatchRowsQueued, stream);
  if (plan.x_in_heap) {
    GatherLaunch gather = gather_launch(plan, *handle, result, message, rows);
    gather.blocks_done = blocks_done_;
    gather.stamps = phases_.stamps();
    // Its last block holds the closing barrier: every peer is done reading this rank's input before the
    // caller's next write to it.
    launch_gather(context, gather, stream);
  } else {
    DispatchLaunch rings = dispatch_launch(plan, *handle, result, message, rows);
    rings.stamps = phases_.stamps();
    launch_dispatch(context, rings, stream);
  }
  phases_.host_stamp(kHostRowsLaunched);
  phases_.mark(kDispatchRowsMoved, stream);

  result.num_recv_tokens = worst_case ? -1 : handle->num_recv_tokens;
  if (!worst_case) result.num_recv_tokens_per_expert = handle->num_recv_tokens_per_expert;
  result.recv_expert_counts = handle->recv_expert_counts;
  result.recv_token_count = handle->recv_token_count;
  result.handle = DispatchHandle(std::move(handle));
  return result;
}

CombineResult NormalEngine::run_combine(const detail::CombinePlan& plan, KernelContext context,
                                        const CallEnv& env) {
  const detail::NormalHandleData& handle = *plan.handle;
  const CombineArgs& args = plan.args;
  context.layout = detail::combine_heap_layout(plan);
  CombineResult result = combine_outputs(plan, handle.num_tokens, device_, env.allocation_stream);
  stage_heap_input(context, plan.staged, env.stream);
  if (plan.y_in_heap) {
    // Each home rank learns where its rows start in this rank's receive order before the barrier.
    launch_begin_combine_in_place(context, handle.recv_channel_start.as<const int32_t>(), plan.combine_input,
                                  plan.signature, routing_epoch_of(handle), env.stream);
  } else {
    launch_begin_call(context, plan.signature, routing_epoch_of(handle), env.stream);
  }
  CombineLaunch launch{};
  launch.message = detail::combine_message(plan.hidden, plan.topk, plan.has_weights);
  launch.ranks_per_node = plan.topology.ranks_per_node;
  launch.rows_in_place = plan.y_in_heap;
  launch.input = plan.combine_input;
  launch.y = args.x.as<const uint8_t>();
  launch.y_topk_weights = plan.has_weights ? args.topk_weights.as<const float>() : nullptr;
  launch.recv_channel_start = handle.recv_channel_start.as<const int32_t>();
  launch.num_tokens = handle.num_tokens;
  launch.is_token_in_rank = handle.is_token_in_rank.as<const bool>();
  launch.send_slot = handle.send_slot.as<const int32_t>();
  launch.send_channel_prefix = handle.send_channel_prefix.as<const int32_t>();
  launch.combined_x = result.combined_x.as<uint16_t>();
  launch.combined_topk_weights = plan.has_weights ? result.combined_topk_weights.as<float>() : nullptr;
  launch.bias0 = args.bias0.defined() ? args.bias0.as<const uint16_t>() : nullptr;
  launch.bias1 = args.bias1.defined() ? args.bias1.as<const uint16_t>() : nullptr;
  // Rows in place: the combine's last block holds the closing barrier (every home is done reading this
  // rank's rows before the caller's next write to them).
  launch.blocks_done = plan.y_in_heap ? blocks_done_ + 1 : nullptr;
  launch_combine(context, launch, env.stream);
  return result;
}

}  // namespace switchyard::cuda
