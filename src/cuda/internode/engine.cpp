#include "cuda/internode/engine.hpp"

#include <algorithm>
#include <map>
#include <mutex>
#include <string>

#include "common/low_latency_protocol.hpp"
#include "core/normal_handle.hpp"
#include "core/normal_sizing.hpp"
#include "cuda/normal/combine_outputs.hpp"
#include "cuda/normal/dispatch_outputs.hpp"
#include "cuda/normal/kernels.hpp"
#include "cuda/normal/routing_copy.hpp"
#include "device/cuda_check.hpp"
#include "switchyard/errors.hpp"

namespace switchyard::cuda {

void prepare_internode_notify_kernel();
void prepare_internode_dispatch_kernel(int* blocks_per_sm);
void prepare_internode_combine_kernel(int* blocks_per_sm);

int prepare_internode_kernels(int device) {
  static std::mutex mutex;
  static std::map<int, int> blocks_per_sm;
  const std::lock_guard<std::mutex> lock(mutex);
  auto found = blocks_per_sm.find(device);
  if (found != blocks_per_sm.end()) return found->second;
  prepare_internode_notify_kernel();
  int dispatch_blocks = 0, combine_blocks = 0;
  prepare_internode_dispatch_kernel(&dispatch_blocks);
  prepare_internode_combine_kernel(&combine_blocks);
  return blocks_per_sm[device] = std::min(dispatch_blocks, combine_blocks);
}

namespace {

NvlCombineMessage nvl_combine_message(int hidden, int topk, bool has_weights) {
  NvlCombineMessage message{};
  message.row_bytes = static_cast<uint32_t>(hidden * 2);
  message.topk = static_cast<uint32_t>(topk);
  message.has_weights = has_weights ? 1u : 0u;
  return message;
}

}  // namespace

InternodeEngine::InternodeEngine(const BufferOptions& options, size_t heap_bytes, int sm_count,
                                 detail::BufferId owner, CallServices& services)
    : options_(options), device_(options.device), sm_count_(sm_count), owner_(owner), services_(services) {
  // The normal region is the heap's front, as core/buffer.cpp lays the heap out.
  const size_t tail_bytes = low_latency_heap_bytes(options.topology, options.sizing) +
                            symmetric_heap_bytes(options.topology, options.sizing);
  normal_region_bytes_ = tail_bytes == 0 ? heap_bytes
                                         : (heap_bytes - tail_bytes) / common::kLowLatencySignalAlignment *
                                               common::kLowLatencySignalAlignment;
  blocks_per_sm_ = prepare_internode_kernels(device_);
  SY_CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&pinned_counts_),
                              sizeof(int32_t) * (options.sizing.num_experts + 1), cudaHostAllocDefault));
}

InternodeEngine::~InternodeEngine() {
  cudaFreeHost(pinned_counts_);
}

Tensor InternodeEngine::allocate(cudaStream_t allocation_stream, DType dtype,
                                 std::initializer_list<int64_t> dims) const {
  return Tensor::empty(dtype, dims, Device::cuda, device_, allocation_stream);
}

void InternodeEngine::check_call(const Topology& topology, int num_channels, int sharing_ranks) const {
  if (topology.num_ranks > kMaxInternodeRanks) {
    throw Unsupported(
        "topology.num_ranks: the CUDA hierarchical normal engine (ranks_per_node < num_ranks) supports "
        "up to " +
        std::to_string(kMaxInternodeRanks) + " ranks, got " + std::to_string(topology.num_ranks));
  }
  // Every block of every rank on this GPU spins on the others: all must be resident at once.
  const int64_t needed = static_cast<int64_t>(kInternodeBlocksPerChannel) * num_channels * sharing_ranks;
  const int64_t resident = static_cast<int64_t>(sm_count_) * blocks_per_sm_;
  if (needed > resident) {
    throw Unsupported("config.num_channels: the CUDA hierarchical normal engine needs " +
                      std::to_string(kInternodeBlocksPerChannel) + " resident blocks per channel and rank; " +
                      std::to_string(num_channels) + " channels x " + std::to_string(sharing_ranks) +
                      " ranks sharing GPU " + std::to_string(device_) + " need " + std::to_string(needed) +
                      " blocks, and at most " + std::to_string(resident) + " (" + std::to_string(sm_count_) +
                      " SMs x " + std::to_string(blocks_per_sm_) + ") fit; use fewer channels");
  }
}

InternodeTransports<transport::LoopbackDevice> InternodeEngine::transports(
    const common::NormalHeapLayout& layout, const common::InternodeHeapLayout& rdma) {
  if (!have_loopback_options_) {
    // Read once, at the first call (as the CPU engine makes its transport).
    loopback_options_ = transport::LoopbackOptions::for_buffer(options_.transport, options_.rank);
    have_loopback_options_ = true;
  }
  InternodeTransports<transport::LoopbackDevice> result;
  result.rdma =
      transport::LoopbackDevice::make(rdma.counters_offset(), common::kCounterStride, loopback_options_);
  result.barrier =
      transport::LoopbackDevice::make(layout.barrier_offset(), sizeof(uint64_t), loopback_options_);
  return result;
}

DispatchResult InternodeEngine::dispatch(const detail::DispatchPlan& plan) {
  const CallStart call = services_.begin_normal_call(plan.args.stream, plan.config);
  return run_dispatch(plan, call.context, call.env);
}

CombineResult InternodeEngine::combine(const detail::CombinePlan& plan) {
  const CallStart call = services_.begin_normal_call(plan.args.stream, plan.config);
  return run_combine(plan, call.context, call.env);
}

DispatchResult InternodeEngine::run_dispatch(const detail::DispatchPlan& plan, KernelContext context,
                                             const CallEnv& env) {
  const Topology& topology = plan.topology;
  const int num_ranks = topology.num_ranks;
  const int num_channels = plan.config.num_channels;
  const int num_nodes = topology.num_nodes();
  check_call(topology, num_channels, env.sharing_ranks);
  if (!plan.cached && plan.num_worst_tokens == 0) refuse_host_synchronising_capture(env.stream);
  const cudaStream_t stream = env.stream;
  const DispatchArgs& args = plan.args;
  context.layout = detail::dispatch_heap_layout(plan);
  const InternodeShape shape{detail::dispatch_internode_layout(plan), topology.ranks_per_node, num_nodes};
  const size_t notify_shared =
      internode_notify_shared_bytes(num_ranks, num_channels, num_nodes, plan.num_experts);
  if (notify_shared > internode_notify_max_shared_bytes()) {
    throw InvalidArgument(
        "num_experts: expected (num_ranks + num_nodes) * channels + num_experts counters to fit " +
        std::to_string(internode_notify_max_shared_bytes()) + " bytes, got " + std::to_string(notify_shared));
  }
  const auto links = transports(context.layout, shape.rdma);

  std::shared_ptr<detail::NormalHandleData> handle = detail::new_normal_handle(plan, owner_);
  // Allocated before any kernel of the call (see CudaBackend::normal_dispatch).
  const int64_t source_row_capacity =
      plan.num_worst_tokens > 0 ? plan.num_worst_tokens
      : plan.cached             ? plan.cached->num_recv_tokens
                                : static_cast<int64_t>(num_ranks) * options_.sizing.max_tokens_per_rank;
  handle->recv_src_token =
      allocate(env.allocation_stream, DType::i32, {std::max<int64_t>(source_row_capacity, 1)});
  // Each destination node's tokens per channel: recomputed by every call, cached ones too. In the
  // handle, not call temporaries: on the buffer's own stream (no stream-ordered allocation there) a
  // temporary's free would be a device-synchronising cudaFree while peers spin. (Under capture a
  // temporary would now live with the graph, src/cuda/backend/device_memory.cpp; the replay stall of
  // bench/NOTES.md, 2026-11-29, was one freed under it.)
  handle->node_send_list =
      allocate(env.allocation_stream, DType::i32, {num_nodes, std::max<int64_t>(plan.num_tokens, 1)});
  handle->node_send_channel_prefix =
      allocate(env.allocation_stream, DType::i32, {num_nodes, num_channels + 1});
  const Tensor& node_send_list = handle->node_send_list;
  const Tensor& node_send_channel_prefix = handle->node_send_channel_prefix;

  InternodeNotifyLaunch notify{};
  notify.shape = shape;
  notify.num_tokens = plan.num_tokens;
  notify.node_send_list = node_send_list.as<int32_t>();
  notify.node_send_channel_prefix = node_send_channel_prefix.as<int32_t>();
  notify.signature = plan.signature;
  if (plan.cached) {
    notify.fresh = 0;
    notify.routing_epoch =
        plan.cached->routing_epoch.defined() ? plan.cached->routing_epoch.as<const int64_t>() : nullptr;
  } else {
    if (plan.layout) {
      // The caller's layout is borrowed for this call only; combine and cached dispatches read the copy.
      handle->is_token_in_rank =
          copy_is_token_in_rank(plan.layout->is_token_in_rank, device_, stream, env.allocation_stream);
    } else {
      DispatchLayout& layout = handle->own_layout;
      layout.num_tokens_per_rank = allocate(env.allocation_stream, DType::i32, {num_ranks});
      layout.num_tokens_per_node = allocate(env.allocation_stream, DType::i32, {num_nodes});
      layout.num_tokens_per_expert = allocate(env.allocation_stream, DType::i32, {plan.num_experts});
      layout.is_token_in_rank = allocate(env.allocation_stream, DType::boolean, {plan.num_tokens, num_ranks});
      LayoutLaunch launch{args.topk_idx.as<const int64_t>(),
                          plan.num_tokens,
                          plan.topk,
                          plan.num_experts,
                          num_ranks,
                          topology.ranks_per_node,
                          layout.num_tokens_per_rank.as<int32_t>(),
                          layout.num_tokens_per_node.as<int32_t>(),
                          layout.num_tokens_per_expert.as<int32_t>(),
                          layout.is_token_in_rank.as<bool>()};
      launch_layout(context, launch, stream);
      handle->is_token_in_rank = layout.is_token_in_rank;
    }
    handle->recv_channel_start = allocate(env.allocation_stream, DType::i32, {num_ranks * num_channels + 1});
    handle->recv_expert_counts = allocate(env.allocation_stream, DType::i32, {plan.local_experts});
    handle->recv_token_count = allocate(env.allocation_stream, DType::i32, {1});
    handle->routing_epoch = allocate(env.allocation_stream, DType::i64, {1});
    notify.fresh = 1;
    notify.new_routing_epoch = handle->routing_epoch.as<int64_t>();
    notify.topk_idx = args.topk_idx.as<const int64_t>();
    notify.num_tokens_per_expert =
        args.topk_idx.defined() ? nullptr : plan.layout->num_tokens_per_expert.as<const int32_t>();
    notify.topk = plan.topk;
    notify.local_experts = plan.local_experts;
    notify.expert_alignment = plan.expert_alignment;
    notify.recv_channel_start = handle->recv_channel_start.as<int32_t>();
    notify.recv_expert_counts = handle->recv_expert_counts.as<int32_t>();
    notify.recv_token_count = handle->recv_token_count.as<int32_t>();
  }
  notify.is_token_in_rank = handle->is_token_in_rank.as<const bool>();
  launch_internode_notify(context, links, notify, stream);

  // The rows: every rank's dispatch kernel, into `outputs` sized by the counts.
  const auto launch_rows = [&](const detail::DispatchPlan& call, const DispatchResult& outputs) {
    InternodeDispatchLaunch launch{};
    launch.shape = shape;
    launch.rdma_message =
        detail::internode_dispatch_message(call.hidden, call.dtype, call.topk, call.has_weights);
    launch.message = detail::dispatch_message(call.hidden, call.dtype, call.topk, call.has_weights);
    launch.local_experts = call.local_experts;
    launch.x = args.x.as<const uint8_t>();
    launch.x_scales = call.has_scales ? args.x_scales.as<const float>() : nullptr;
    launch.x_scales_layout = call.scales_layout;
    launch.topk_idx = call.topk > 0 ? args.topk_idx.as<const int64_t>() : nullptr;
    launch.topk_weights = call.has_weights ? args.topk_weights.as<const float>() : nullptr;
    launch.is_token_in_rank = handle->is_token_in_rank.as<const bool>();
    launch.num_tokens = call.num_tokens;
    launch.node_send_list = node_send_list.as<const int32_t>();
    launch.node_send_channel_prefix = node_send_channel_prefix.as<const int32_t>();
    launch.recv_channel_start = handle->recv_channel_start.as<const int32_t>();
    launch.recv_x = outputs.recv_x.as<uint8_t>();
    launch.recv_x_scales = call.has_scales ? outputs.recv_x_scales.as<float>() : nullptr;
    launch.recv_topk_idx = call.topk > 0 ? outputs.recv_topk_idx.as<int64_t>() : nullptr;
    launch.recv_topk_weights = call.has_weights ? outputs.recv_topk_weights.as<float>() : nullptr;
    launch.recv_src_token = handle->recv_src_token.as<int32_t>();
    launch.num_output_rows = call.num_worst_tokens > 0 ? call.num_worst_tokens : handle->num_recv_tokens;
    launch_internode_dispatch(context, links, launch, stream);
  };
  // After the notify every peer moves rows with this rank: a call that fails on this rank's host from then
  // on (its outputs, bad input the notify found) still runs its part, into outputs of its own
  // (stand_in_dispatch), so that the failure is this rank's alone (as the single-node engine's
  // stand_in_after_the_counts). Errors here are swallowed: the host's own failure is what the caller must
  // see.
  const auto stand_in = [&]() noexcept {
    try {
      const StandInDispatch own = stand_in_dispatch(plan, *handle, device_, env.allocation_stream);
      launch_rows(own.plan, own.outputs);
    } catch (...) {
    }
  };
  if (!plan.cached && plan.num_worst_tokens == 0) {
    // The one host synchronisation of a non-worst-case dispatch: the output sizes.
    try {
      receive_dispatch_counts(*handle, plan.local_experts, pinned_counts_, stream, env);
    } catch (...) {
      // Bad input the notify found (an expert id out of range) is raised here, after an exchange that
      // passed on every rank (the peers treat the bad ids as -1); the notify leaves -1 rows where it did not.
      if (handle->num_recv_tokens >= 0) stand_in();
      throw;
    }
  }

  DispatchResult result;
  try {
    result = dispatch_outputs(plan, *handle, device_, env.allocation_stream);
  } catch (...) {
    stand_in();
    throw;
  }
  const bool worst_case = plan.num_worst_tokens > 0;
  launch_rows(plan, result);

  result.num_recv_tokens = worst_case ? -1 : handle->num_recv_tokens;
  if (!worst_case) result.num_recv_tokens_per_expert = handle->num_recv_tokens_per_expert;
  result.recv_expert_counts = handle->recv_expert_counts;
  result.recv_token_count = handle->recv_token_count;
  result.handle = DispatchHandle(std::move(handle));
  return result;
}

CombineResult InternodeEngine::run_combine(const detail::CombinePlan& plan, KernelContext context,
                                           const CallEnv& env) {
  const Topology& topology = plan.topology;
  const int num_channels = plan.config.num_channels;
  check_call(topology, num_channels, env.sharing_ranks);
  const detail::NormalHandleData& handle = *plan.handle;
  const CombineArgs& args = plan.args;
  // NOTES: the intranode rings carry NvlCombineMessage (a CombineMessage and the source token), so
  // the layout is this engine's own; it still fits the normal region (checked), which is sized for
  // dispatch messages that are larger.
  const NvlCombineMessage nvl_message = nvl_combine_message(plan.hidden, plan.topk, plan.has_weights);
  common::NormalHeapLayout layout{};
  layout.num_ranks = topology.num_ranks;
  layout.num_channels = num_channels;
  layout.local_experts = 0;
  layout.ring_slots = static_cast<uint32_t>(plan.config.ring_slots);
  layout.slot_bytes = static_cast<uint32_t>(nvl_message.bytes());
  const common::CombineMessage rdma_message =
      detail::combine_message(plan.hidden, plan.topk, plan.has_weights);
  const InternodeShape shape{
      detail::make_internode_layout(layout, topology, plan.config, rdma_message.bytes()),
      topology.ranks_per_node, topology.num_nodes()};
  if (shape.rdma.end() > normal_region_bytes_) {
    throw InvalidArgument("combine: expected a call that fits the normal region of the buffer's heap (" +
                          std::to_string(normal_region_bytes_) + " bytes), got one needing " +
                          std::to_string(shape.rdma.end()) + " (hidden=" + std::to_string(plan.hidden) +
                          "); size the buffer with BufferSizing for the largest call");
  }
  context.layout = layout;
  const auto links = transports(layout, shape.rdma);
  const cudaStream_t stream = env.stream;

  CombineResult result = combine_outputs(plan, handle.num_tokens, device_, env.allocation_stream);
  // Opening: resets and one barrier.
  InternodeNotifyLaunch opening{};
  opening.shape = shape;
  opening.fresh = 0;
  opening.signature = plan.signature;
  opening.routing_epoch = handle.routing_epoch.defined() ? handle.routing_epoch.as<const int64_t>() : nullptr;
  launch_internode_notify(context, links, opening, stream);

  InternodeCombineLaunch launch{};
  launch.shape = shape;
  launch.nvl_message = nvl_message;
  launch.rdma_message = rdma_message;
  launch.y = args.x.as<const uint8_t>();
  launch.y_topk_weights = plan.has_weights ? args.topk_weights.as<const float>() : nullptr;
  launch.recv_channel_start = handle.recv_channel_start.as<const int32_t>();
  launch.recv_src_token = handle.recv_src_token.as<const int32_t>();
  launch.num_tokens = handle.num_tokens;
  launch.is_token_in_rank = handle.is_token_in_rank.as<const bool>();
  launch.combined_x = result.combined_x.as<uint16_t>();
  launch.combined_topk_weights = plan.has_weights ? result.combined_topk_weights.as<float>() : nullptr;
  launch.bias0 = args.bias0.defined() ? args.bias0.as<const uint16_t>() : nullptr;
  launch.bias1 = args.bias1.defined() ? args.bias1.as<const uint16_t>() : nullptr;
  launch_internode_combine(context, links, launch, stream);
  return result;
}

}  // namespace switchyard::cuda
