// The opening of a hierarchical `normal` call: resets, each destination node's token lists, and for
// a fresh dispatch the count exchange. Records for ranks of our node are stored; records for ranks
// of other nodes are staged in our RDMA send buffers and put, ahead of the barrier's signal.
#include "cuda/backend/dependent_launch.hpp"
#include "cuda/backend/kernel_preload.hpp"
#include "cuda/internode/device.cuh"
#include "device/cuda_check.hpp"
#include "transport/loopback_device.cuh"
#include "transport/nccl_gin.cuh"

namespace switchyard::cuda {

namespace {

// NOTES: 512 threads (at most 64 registers each) need half an SM's registers, so the block finds
// room next to another rank's spinning block instead of waiting for a whole SM to drain.
constexpr int kNotifyThreads = 512;
// NOTES: room for R * C + nodes * C channel counters and E expert counters; set once in
// prepare_internode_kernels.
constexpr size_t kNotifySharedBytes = 128 * 1024;

// Whether `token` goes to `target`: a destination rank, or with `per_node` any rank of node `target`.
__device__ __forceinline__ bool token_goes_to(const InternodeNotifyLaunch& launch, int num_ranks,
                                              int64_t token, int target, bool per_node) {
  const bool* in_rank = launch.is_token_in_rank + token * num_ranks;
  if (!per_node) return in_rank[target];
  const int ranks_per_node = launch.shape.ranks_per_node;
  for (int local = 0; local < ranks_per_node; ++local) {
    if (in_rank[target * ranks_per_node + local]) return true;
  }
  return false;
}

// Counts (`list` null) or lists each target's tokens per channel, a warp per (target, channel), 32
// tokens per ballot. `counts` is [targets * C], target-major; `prefix` [targets, C + 1].
__device__ void scan_targets(const KernelContext& context, const InternodeNotifyLaunch& launch,
                             int num_targets, bool per_node, int32_t* counts, const int32_t* prefix,
                             int32_t* list) {
  const int num_channels = context.num_channels;
  const int warps = static_cast<int>(blockDim.x / 32);
  const int lane = lane_id();
  for (int pair = static_cast<int>(threadIdx.x / 32); pair < num_targets * num_channels; pair += warps) {
    const int target = pair / num_channels;
    const int channel = pair % num_channels;
    const int64_t begin = common::channel_begin(launch.num_tokens, num_channels, channel);
    const int64_t end = common::channel_begin(launch.num_tokens, num_channels, channel + 1);
    const int32_t base = list ? prefix[target * (num_channels + 1) + channel] : 0;
    int32_t found = 0;
    for (int64_t first = begin; first < end; first += 32) {
      const int64_t token = first + lane;
      const bool goes = token < end && token_goes_to(launch, context.num_ranks, token, target, per_node);
      const uint32_t mask = __ballot_sync(0xffffffffu, goes);
      if (list && goes) {
        list[target * launch.num_tokens + base + found + __popc(mask & ((1u << lane) - 1u))] =
            static_cast<int32_t>(token);
      }
      found += __popc(mask);
    }
    if (!list && lane == 0) counts[pair] = found;
  }
}

// Field `field` of this rank's notify record for `destination` at `record` (the signature word
// first, then channel counts, then expert counts).
__device__ __forceinline__ void write_record_field(const KernelContext& context,
                                                   const InternodeNotifyLaunch& launch, int destination,
                                                   const int32_t* channel_counts,
                                                   const int32_t* expert_counts, uint8_t* record, int field) {
  const int num_channels = context.num_channels;
  int32_t* counts = reinterpret_cast<int32_t*>(record + sizeof(uint64_t));
  counts[field] = field < num_channels
                      ? channel_counts[destination * num_channels + field]
                      : expert_counts[destination * launch.local_experts + field - num_channels];
  if (field == 0) *reinterpret_cast<uint64_t*>(record) = launch.signature;
}

template <typename Transport>
__global__ void __launch_bounds__(kNotifyThreads, 2)
    internode_notify_kernel(const __grid_constant__ KernelContext context,
                            const __grid_constant__ InternodeTransports<Transport> transports,
                            const __grid_constant__ InternodeNotifyLaunch launch) {
  ptx::wait_for_previous_grid();  // launched by launch_dependent: before any global access
  extern __shared__ int32_t shared_counts[];
  const int num_ranks = context.num_ranks;
  const int num_channels = context.num_channels;
  const int num_nodes = launch.shape.num_nodes;
  const int ranks_per_node = launch.shape.ranks_per_node;
  const int num_experts = num_ranks * launch.local_experts;
  int32_t* node_counts = shared_counts;                                // [nodes * C]
  int32_t* channel_counts = node_counts + num_nodes * num_channels;    // [R * C], fresh only
  int32_t* expert_counts = channel_counts + num_ranks * num_channels;  // [E], fresh only

  // -1 until the exchange has passed (thread 0 writes the count at the end): a host that meets an error after
  // copying the counts back tells by it whether its peers went on to move rows (InternodeEngine).
  if (launch.fresh && threadIdx.x == 0) launch.recv_token_count[0] = -1;

  // 1. Our rings and counters are empty before any peer can reach them (the barrier below).
  reset_internode_call(context, transports, launch.shape);
  for (int i = threadIdx.x; i < num_nodes * num_channels; i += blockDim.x) node_counts[i] = 0;
  if (launch.fresh) {
    for (int i = threadIdx.x; i < num_ranks * num_channels; i += blockDim.x) channel_counts[i] = 0;
    for (int i = threadIdx.x; i < num_experts; i += blockDim.x) expert_counts[i] = 0;
  }
  __syncthreads();

  // 2. Each destination node's tokens, per channel (local work: before the barrier).
  if (launch.node_send_list) {
    scan_targets(context, launch, num_nodes, true, node_counts, nullptr, nullptr);
    __syncthreads();
    for (int node = threadIdx.x; node < num_nodes; node += blockDim.x) {
      int32_t running = 0;
      int32_t* prefix = launch.node_send_channel_prefix + node * (num_channels + 1);
      for (int channel = 0; channel < num_channels; ++channel) {
        prefix[channel] = running;
        running += node_counts[node * num_channels + channel];
      }
      prefix[num_channels] = running;
    }
    __syncthreads();
    scan_targets(context, launch, num_nodes, true, nullptr, launch.node_send_channel_prefix,
                 launch.node_send_list);
  }
  if (!launch.fresh) {
    const uint64_t signature =
        launch.routing_epoch
            ? common::routed_signature(launch.signature, static_cast<uint64_t>(*launch.routing_epoch))
            : launch.signature;
    internode_barrier(
        context, transports.barrier, ranks_per_node, [](auto&, int) {}, signature);
    return;
  }

  // 3. A fresh dispatch counts what goes to each rank (per channel) and to each expert.
  scan_targets(context, launch, num_ranks, false, channel_counts, nullptr, nullptr);
  const int64_t num_slots = launch.num_tokens * launch.topk;
  for (int64_t i = threadIdx.x; i < num_slots; i += blockDim.x) {
    const int64_t expert = launch.topk_idx[i];
    if (expert >= 0 && expert < num_experts) {
      atomicAdd(&expert_counts[expert], 1);
    } else if (expert != -1) {
      WaitSite site{common::WaitRole::notify, common::WaitTarget::invalid_expert, -1, -1};
      record_wait_failure(context, site, num_experts, expert, 0, false);
    }
  }
  if (launch.num_tokens_per_expert) {  // no topk_idx: the layout's counts
    for (int i = threadIdx.x; i < num_experts; i += blockDim.x)
      expert_counts[i] = launch.num_tokens_per_expert[i];
  }
  if (!internode_barrier(
          context, transports.barrier, ranks_per_node, [](auto&, int) {}, launch.signature))
    return;
  // The routing this call makes is named by that barrier's number, the same on every rank.
  if (threadIdx.x == 0) *launch.new_routing_epoch = static_cast<int64_t>(*context.barrier_epoch);

  // 4. Records: stored into the heaps of our node's ranks; staged and put to the others', each put
  // ahead of our arrival signal to that rank (same session), so the barrier delivers them.
  const int fields = num_channels + launch.local_experts;
  const size_t record_bytes = context.layout.notify_record_bytes();
  const size_t record_offset = context.layout.notify_offset() + record_bytes * context.rank;
  const size_t staging_offset = launch.shape.rdma.notify_staging_offset();
  for (int i = threadIdx.x; i < num_ranks * fields; i += blockDim.x) {
    const int destination = i / fields;
    uint8_t* record = same_node(context.rank, destination, ranks_per_node)
                          ? context.heap.peer_base(destination) + record_offset
                          : context.heap.base + staging_offset + record_bytes * destination;
    write_record_field(context, launch, destination, channel_counts, expert_counts, record, i % fields);
  }
  const auto put_record = [&](transport::WarpSession<Transport>& session, int destination) {
    session.put(destination, record_offset, staging_offset + record_bytes * destination, record_bytes);
  };
  if (!internode_barrier(context, transports.barrier, ranks_per_node, put_record)) return;

  // 5. Every source's record for us.
  __shared__ int signatures_match;
  if (threadIdx.x == 0) signatures_match = 1;
  __syncthreads();
  for (int source = threadIdx.x; source < num_ranks; source += blockDim.x) {
    const uint64_t signature = *context.layout.notify_signature(context.heap.base, source);
    if (signature != launch.signature) {
      WaitSite site{common::WaitRole::notify, common::WaitTarget::call_signature, -1, source};
      record_wait_failure(context, site, static_cast<int64_t>(launch.signature),
                          static_cast<int64_t>(signature), 0);
      atomicExch(&signatures_match, 0);
    }
  }
  for (int i = threadIdx.x; i < num_ranks * num_channels; i += blockDim.x) {
    channel_counts[i] =
        context.layout.notify_record(context.heap.base, i / num_channels).channel_counts[i % num_channels];
  }
  __syncthreads();
  if (!signatures_match) return;
  if (threadIdx.x == 0) {
    // Source-major, then channel: the rank-major receive order.
    int32_t running = 0;
    for (int i = 0; i < num_ranks * num_channels; ++i) {
      launch.recv_channel_start[i] = running;
      running += channel_counts[i];
    }
    launch.recv_channel_start[num_ranks * num_channels] = running;
    launch.recv_token_count[0] = running;
  }
  for (int expert = threadIdx.x; expert < launch.local_experts; expert += blockDim.x) {
    int64_t sum = 0;
    for (int source = 0; source < num_ranks; ++source) {
      sum += context.layout.notify_record(context.heap.base, source).expert_counts[expert];
    }
    const int64_t aligned =
        (sum + launch.expert_alignment - 1) / launch.expert_alignment * launch.expert_alignment;
    launch.recv_expert_counts[expert] = static_cast<int32_t>(aligned);
  }
}

}  // namespace

size_t internode_notify_shared_bytes(int num_ranks, int num_channels, int num_nodes, int num_experts) {
  return sizeof(int32_t) * (static_cast<size_t>(num_nodes) * num_channels +
                            static_cast<size_t>(num_ranks) * num_channels + static_cast<size_t>(num_experts));
}

size_t internode_notify_max_shared_bytes() {
  return kNotifySharedBytes;
}

void prepare_internode_notify_kernel() {
  preload_kernel(internode_notify_kernel<transport::LoopbackDevice>);
  SY_CUDA_CHECK(cudaFuncSetAttribute(internode_notify_kernel<transport::LoopbackDevice>,
                                     cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(kNotifySharedBytes)));
}

template <typename Transport>
void launch_internode_notify(const KernelContext& context, const InternodeTransports<Transport>& transports,
                             const InternodeNotifyLaunch& launch, cudaStream_t stream) {
  const size_t shared_bytes =
      internode_notify_shared_bytes(context.num_ranks, context.num_channels, launch.shape.num_nodes,
                                    context.num_ranks * launch.local_experts);
  launch_dependent(internode_notify_kernel<Transport>, 1, kNotifyThreads, shared_bytes, stream, context,
                   transports, launch);
}

template void launch_internode_notify<transport::LoopbackDevice>(
    const KernelContext&, const InternodeTransports<transport::LoopbackDevice>&, const InternodeNotifyLaunch&,
    cudaStream_t);

// nccl_gin: the same kernels over NCCL's GIN device session (transport/nccl_gin.cuh), compiled wherever the
// build has NCCL's device API so that the kernels keep to the transport's interface; the host does not
// launch them yet (cuda/backend/nccl_gin_choice.cpp refuses the transport: docs/ARCHITECTURE.md, "Not yet").
#if SWITCHYARD_WITH_NCCL_GIN
template void launch_internode_notify<transport::NcclGinDevice>(
    const KernelContext&, const InternodeTransports<transport::NcclGinDevice>&, const InternodeNotifyLaunch&,
    cudaStream_t);
#endif

}  // namespace switchyard::cuda
