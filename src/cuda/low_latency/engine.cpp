// The CUDA `low_latency` engine, host side (see low_latency_engine.hpp and the kernels'
// low_latency_dispatch.cu / low_latency_combine.cu).
#include "cuda/low_latency/engine.hpp"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <mutex>
#include <set>
#include <string>

#include "common/fp8_cast.hpp"
#include "common/host_device.hpp"
#include "core/expert_major_plan.hpp"
#include "core/low_latency_sizing.hpp"
#include "cuda/expert_major/outputs.hpp"
#include "device/cuda_check.hpp"

namespace switchyard::cuda {

void prepare_low_latency_dispatch_kernels(int max_shared_bytes);
void prepare_low_latency_combine_kernels(int max_shared_bytes);

namespace {

// NOTES: the largest dynamic shared memory of any launch within kLowLatencyMaxExperts and
// kLowLatencyMaxHidden is 161 KiB (an fp8 dispatch sender: two 32 KiB expert tables, the 33 KiB
// message and the 64 KiB bf16 row); an H200 block may have 227 KiB.
constexpr int kMaxSharedBytes = 192 * 1024;

void expect_aligned(const void* data, const char* name) {
  if (reinterpret_cast<uintptr_t>(data) % 16 != 0) {
    throw InvalidArgument(std::string(name) +
                          ": expected data aligned to 16 bytes (the CUDA low_latency engine "
                          "moves rows as 16-byte vectors), got address " +
                          std::to_string(reinterpret_cast<uintptr_t>(data)));
  }
}

// Calls `launch(transport)` with the transport to other nodes: none on one node (the kernels as
// they always were), else the loopback device transport.
template <typename Launch>
void with_transport(const Topology& topology, const transport::LoopbackDevice& loopback, Launch&& launch) {
  if (topology.is_single_node()) {
    launch(SingleNode{});
  } else {
    launch(loopback);
  }
}

// Across nodes a put reads its source from this rank's heap: y is read there directly when it lies
// in the heap (the combine buffer), else its rows for other nodes are staged in the combine buffer.
// -1 when y is outside the heap; a y that straddles the heap's edge is refused.
int64_t heap_offset_of(const common::SymHeap& heap, const void* y, size_t y_bytes) {
  const uintptr_t begin = reinterpret_cast<uintptr_t>(y);
  const uintptr_t heap_begin = reinterpret_cast<uintptr_t>(heap.base);
  const uintptr_t heap_end = heap_begin + heap.bytes;
  if (begin + y_bytes <= heap_begin || begin >= heap_end) return -1;
  if (begin < heap_begin || begin + y_bytes > heap_end) {
    throw InvalidArgument(
        "x: expected expert outputs either inside this buffer's combine buffer or outside its "
        "heap, got a tensor of " +
        std::to_string(y_bytes) + " bytes that straddles the heap's edge");
  }
  return static_cast<int64_t>(begin - heap_begin);
}

}  // namespace

void prepare_low_latency_kernels(int device) {
  // Loading and attributes belong to a device's context: once per device.
  static std::mutex mutex;
  static std::set<int> prepared;
  const std::lock_guard<std::mutex> lock(mutex);
  if (prepared.count(device) != 0) return;
  prepare_low_latency_dispatch_kernels(kMaxSharedBytes);
  prepare_low_latency_combine_kernels(kMaxSharedBytes);
  prepared.insert(device);
}

LowLatencyEngine::LowLatencyEngine(const BufferOptions& options, const DeviceHeap& heap, int sm_count,
                                   detail::BufferId owner, CallServices& services)
    : device_(options.device),
      transport_(options.transport),
      heap_(heap),
      sm_count_(sm_count),
      owner_(owner),
      services_(services) {
  prepare_low_latency_kernels(device_);
  SY_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&state_), sizeof(LowLatencyDeviceState)));
  const LowLatencyDeviceState zero{};
  // A synchronous copy: complete before any rank's stream can launch a kernel that reads it.
  SY_CUDA_CHECK(cudaMemcpy(state_, &zero, sizeof(zero), cudaMemcpyHostToDevice));
  hook_routing_capacity_ = options.sizing.low_latency_max_tokens_per_rank * options.sizing.topk;
  if (hook_routing_capacity_ > 0) {
    SY_CUDA_CHECK(
        cudaMalloc(reinterpret_cast<void**>(&hook_topk_idx_), sizeof(int64_t) * hook_routing_capacity_));
    SY_CUDA_CHECK(
        cudaMalloc(reinterpret_cast<void**>(&hook_topk_weights_), sizeof(float) * hook_routing_capacity_));
  }
}

LowLatencyEngine::~LowLatencyEngine() {
  cudaSetDevice(device_);
  cudaFree(state_);
  cudaFree(hook_topk_idx_);
  cudaFree(hook_topk_weights_);
}

const transport::LoopbackDevice& LowLatencyEngine::loopback(const common::LowLatencyLayout& layout) {
  if (!have_loopback_) {
    // Signal ids number the region's signal words from its start, 8 bytes apart (LowLatencyLayout).
    loopback_ = transport::LoopbackDevice::make(
        layout.signals_offset(), sizeof(uint64_t),
        transport::LoopbackOptions::for_buffer(transport_, heap_.view().rank));
    have_loopback_ = true;
  }
  return loopback_;
}

LowLatencyGrid LowLatencyEngine::grid() const {
  const int sharing = std::max(1, heap_.ranks_on_this_device());
  LowLatencyGrid grid{};
  // NOTES: receive blocks spin until the send kernels of the ranks they wait for have run. With at
  // most one receive block per SM over all ranks on this GPU (and kernels limited to half an SM's
  // registers), a send block always finds room, so ranks sharing a GPU cannot deadlock.
  grid.receive_blocks = std::max(1, sm_count_ / sharing);
  // A combine sender does not wait: two blocks per SM, shared by the ranks, keep HBM busy.
  grid.send_blocks = std::max(1, 2 * sm_count_ / sharing);
  return grid;
}

LowLatencyDispatchResult LowLatencyEngine::dispatch(const detail::LowLatencyDispatchPlan& plan) {
  const CallStart call = services_.begin_expert_major_call(plan.args.stream);
  return run_dispatch(plan, call.context, call.env.stream, call.env.allocation_stream);
}

LowLatencyCombineResult LowLatencyEngine::combine(const detail::LowLatencyCombinePlan& plan) {
  const CallStart call = services_.begin_expert_major_call(plan.args.stream);
  return run_combine(plan, call.context, call.env.stream, call.env.allocation_stream);
}

LowLatencyDispatchResult LowLatencyEngine::run_dispatch(const detail::LowLatencyDispatchPlan& plan,
                                                        const KernelContext& context, cudaStream_t stream,
                                                        cudaStream_t allocation_stream) {
  const LowLatencyDispatchArgs& args = plan.args;
  if (plan.num_experts > kLowLatencyMaxExperts) {
    throw Unsupported(
        "num_experts: the CUDA low_latency engine supports up to " + std::to_string(kLowLatencyMaxExperts) +
        " experts (per-expert tables in shared memory), got " + std::to_string(plan.num_experts));
  }
  if (plan.hidden > kLowLatencyMaxHidden) {
    throw Unsupported("x: the CUDA low_latency engine supports hidden up to " +
                      std::to_string(kLowLatencyMaxHidden) + " (a token is staged in shared memory), got " +
                      args.x.describe());
  }
  expect_aligned(args.x.data, "x");
  if (args.out_recv_x.defined()) expect_aligned(args.out_recv_x.data, "out_recv_x");

  const int num_ranks = plan.topology.num_ranks;
  const int64_t local = plan.local_experts;
  const int64_t rows = num_ranks * plan.max_tokens_per_rank;

  // expert_capacity is R * max_tokens_per_rank here (the engine refuses another), the rows of its tables.
  auto handle = detail::make_expert_major_handle(plan, owner_, Engine::low_latency);
  // NOTES: no copy of topk_idx: it is on the device, where core does not compare combine's with it.
  // The handle's tables, carved from one allocation (each stream-ordered allocation more per call
  // delays the last of the ranks as threads, whose allocations serialise in the driver): src_slot, and
  // its own copies of the caller's out_layout_range / out_src_info, which are borrowed for the call only.
  const size_t src_slot_bytes = common::align_up(static_cast<size_t>(local * rows) * sizeof(int32_t), 128);
  const size_t kept_layout_range_bytes =
      args.out_layout_range.defined()
          ? common::align_up(static_cast<size_t>(local * num_ranks * 2) * sizeof(int32_t), 128)
          : 0;
  const size_t kept_src_info_bytes = args.out_src_info.defined() ? src_slot_bytes : 0;
  const Tensor tables = Tensor::empty(
      DType::i32,
      {static_cast<int64_t>((src_slot_bytes + kept_layout_range_bytes + kept_src_info_bytes) / 4)},
      Device::cuda, device_, allocation_stream);
  handle->src_slot = Tensor::part_of(tables, 0, DType::i32, {local, rows});

  LowLatencyDispatchResult result = expert_major_dispatch_outputs(plan, device_, allocation_stream);
  // What the combine routes by: the outputs themselves, or the handle's own copies of the caller's,
  // which the receive kernel writes beside them (LowLatencyDispatchLaunch::kept_layout_range).
  handle->layout_range = kept_layout_range_bytes > 0
                             ? Tensor::part_of(tables, src_slot_bytes, DType::i32, {local, num_ranks, 2})
                             : result.layout_range;
  handle->src_info =
      kept_src_info_bytes > 0
          ? Tensor::part_of(tables, src_slot_bytes + kept_layout_range_bytes, DType::i32, {local, rows})
          : result.src_info;

  LowLatencyDispatchLaunch launch{};
  launch.layout = plan.layout;
  launch.ranks_per_node = plan.topology.ranks_per_node;
  launch.message = detail::low_latency_dispatch_message(plan.hidden, plan.use_fp8);
  launch.state = state_;
  launch.x = args.x.as<const uint16_t>();
  launch.topk_idx = args.topk_idx.as<const int64_t>();
  launch.num_tokens = plan.num_tokens;
  launch.topk = plan.topk;
  launch.num_experts = plan.num_experts;
  launch.local_experts = plan.local_experts;
  launch.hidden = plan.hidden;
  launch.max_tokens_per_rank = plan.max_tokens_per_rank;
  launch.signature = plan.signature;
  launch.use_fp8 = plan.use_fp8;
  launch.round_scale = plan.round_scale;
  launch.use_ue8m0 = plan.use_ue8m0;
  launch.recv_x = result.recv_x.as<uint8_t>();
  launch.recv_x_scales = result.recv_x_scales.defined() ? result.recv_x_scales.data() : nullptr;
  launch.recv_count = result.recv_count.as<int32_t>();
  launch.layout_range = result.layout_range.as<int32_t>();
  launch.src_info = result.src_info.as<int32_t>();
  launch.wait_recv_cost_stats =
      args.wait_recv_cost_stats.defined() ? args.wait_recv_cost_stats.as<int64_t>() : nullptr;
  launch.src_slot = handle->src_slot.as<int32_t>();
  launch.kept_layout_range = kept_layout_range_bytes > 0 ? handle->layout_range.as<int32_t>() : nullptr;
  launch.kept_src_info = kept_src_info_bytes > 0 ? handle->src_info.as<int32_t>() : nullptr;

  with_transport(plan.topology, loopback(plan.layout), [&](const auto& transport) {
    launch_low_latency_dispatch_send(context, launch, transport, stream);
    auto receive = [context, launch, transport, grid = grid(), stream, handle, device = device_] {
      SY_CUDA_CHECK(cudaSetDevice(device));
      launch_low_latency_dispatch_receive(context, launch, transport, grid, stream);
      handle->received.store(true, std::memory_order_release);
    };
    if (args.return_recv_hook) {
      result.hook = std::move(receive);
    } else {
      receive();
    }
  });
  result.handle = LowLatencyHandle(handle);
  return result;
}

LowLatencyCombineResult LowLatencyEngine::run_combine(const detail::LowLatencyCombinePlan& plan,
                                                      const KernelContext& context, cudaStream_t stream,
                                                      cudaStream_t allocation_stream) {
  const LowLatencyCombineArgs& args = plan.args;
  const detail::ExpertMajorHandleData& handle = *plan.handle;
  expect_aligned(plan.y, args.zero_copy ? "x (the combine buffer)" : "x");
  if (args.out_combined_x.defined()) expect_aligned(args.out_combined_x.data, "out_combined_x");

  LowLatencyCombineResult result;
  result.combined_x = output_or_allocate(args.out_combined_x, DType::bf16, {handle.num_tokens, plan.hidden},
                                         device_, allocation_stream);

  LowLatencyCombineLaunch launch{};
  launch.layout = plan.layout;
  launch.ranks_per_node = plan.topology.ranks_per_node;
  launch.state = state_;
  launch.num_experts = handle.num_experts;
  launch.local_experts = handle.local_experts;
  launch.hidden = plan.hidden;
  launch.max_tokens_per_rank = handle.max_tokens_per_rank;
  launch.signature = plan.signature;
  launch.y = plan.y;
  launch.y_heap_offset = -1;
  if (!plan.topology.is_single_node()) {
    const size_t y_bytes = static_cast<size_t>(handle.local_experts) * handle.topology.num_ranks *
                           handle.max_tokens_per_rank * plan.hidden * 2;
    launch.y_heap_offset = heap_offset_of(heap_.view(), plan.y, y_bytes);
  }
  launch.layout_range = handle.layout_range.as<const int32_t>();
  launch.src_info = handle.src_info.as<const int32_t>();
  launch.src_slot = handle.src_slot.as<const int32_t>();
  launch.topk_idx = args.topk_idx.as<const int64_t>();
  launch.topk_weights = args.topk_weights.as<const float>();
  launch.num_tokens = handle.num_tokens;
  launch.topk = handle.topk;
  launch.combined_x = result.combined_x.as<uint16_t>();
  launch.use_logfmt = args.use_logfmt;
  launch.bias0 = args.bias0.defined() ? args.bias0.as<const uint16_t>() : nullptr;
  launch.wait_recv_cost_stats =
      args.wait_recv_cost_stats.defined() ? args.wait_recv_cost_stats.as<int64_t>() : nullptr;
  launch.bias1 = args.bias1.defined() ? args.bias1.as<const uint16_t>() : nullptr;

  const LowLatencyGrid grid = this->grid();
  const transport::LoopbackDevice& across_nodes = loopback(plan.layout);
  with_transport(plan.topology, across_nodes, [&](const auto& transport) {
    launch_low_latency_combine_send(context, launch, transport, grid, stream);
  });
  if (!args.return_recv_hook) {
    with_transport(plan.topology, across_nodes, [&](const auto& transport) {
      launch_low_latency_combine_receive(context, launch, transport, grid, stream);
    });
    return result;
  }
  // The hook reduces later: with its own copy of the routing, as the CPU engine keeps one.
  const int64_t pairs = handle.num_tokens * handle.topk;
  if (pairs > hook_routing_capacity_) {
    throw Error("low_latency_combine: " + std::to_string(pairs) + " routing entries exceed the hook copy's " +
                std::to_string(hook_routing_capacity_) +
                " (BufferSizing low_latency_max_tokens_per_rank * topk)");
  }
  if (pairs > 0) {
    SY_CUDA_CHECK(cudaMemcpyAsync(hook_topk_idx_, launch.topk_idx, sizeof(int64_t) * pairs,
                                  cudaMemcpyDeviceToDevice, stream));
    SY_CUDA_CHECK(cudaMemcpyAsync(hook_topk_weights_, launch.topk_weights, sizeof(float) * pairs,
                                  cudaMemcpyDeviceToDevice, stream));
  }
  launch.topk_idx = hook_topk_idx_;
  launch.topk_weights = hook_topk_weights_;
  result.hook = [context, launch, grid, stream, device = device_, topology = plan.topology,
                 across_nodes = across_nodes] {
    SY_CUDA_CHECK(cudaSetDevice(device));
    with_transport(topology, across_nodes, [&](const auto& transport) {
      launch_low_latency_combine_receive(context, launch, transport, grid, stream);
    });
  };
  return result;
}

}  // namespace switchyard::cuda
