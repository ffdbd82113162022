// The CUDA hierarchical `normal` combine, the reverse of dispatch. Per channel three blocks:
//   0: NVLink senders, a warp group per home rank: each received row back to the forwarder of our
//      node that serves the home rank, with its source token; a sentinel ends each stream.
//   1: forwarders, a warp group per home node: merge the node's streams by source token, reduce each
//      token's rows (ascending local rank, fp32 from +0, rounded to bf16 once) into one partial;
//      the group's first warp is the coordinator that puts the partials to the home rank
//      (cuda/internode/combine_forwarder.cuh).
//   2: RDMA receivers: sum each token's node partials in ascending node order (fp32 from +0,
//      rounded once) and free the RDMA slots by signal. DESIGN.md, Combine.
#include "common/numeric.hpp"
#include "cuda/backend/dependent_launch.hpp"
#include "cuda/backend/kernel_preload.hpp"
#include "cuda/internode/combine_forwarder.cuh"
#include "cuda/internode/device.cuh"
#include "device/cuda_check.hpp"
#include "device/warp_copy.cuh"
#include "transport/loopback_device.cuh"
#include "transport/nccl_gin.cuh"

namespace switchyard::cuda {

namespace {

struct InternodeCombineShared {
  int group_abort[kInternodeWarps];  // NVLink senders
  ForwarderShared forwarder;
  // RDMA receiver.
  int block_abort;
  uint32_t node_wants[kInternodeWarps];   // per warp's token: the nodes with a partial for it
  uint64_t consumed[kMaxInternodeRanks];  // per node: partials consumed
  uint32_t token_slots[kInternodeWarps][kMaxInternodeRanks];  // per warp: its token's partials, node order
};

// Role 0: this rank's rows for one home rank, to the forwarder of our node with the home's local index.
__device__ void nvl_sender(const KernelContext& context, const InternodeCombineLaunch& launch,
                           InternodeCombineShared& shared, int channel, const WarpGroup& group) {
  const InternodeShape& shape = launch.shape;
  const int home = group.index;
  const int ranks_per_node = shape.ranks_per_node;
  const int forwarder = (context.rank / ranks_per_node) * ranks_per_node + home % ranks_per_node;
  const int index = home * context.num_channels + channel;
  const int64_t first_row = launch.recv_channel_start[index];
  const uint64_t rows = static_cast<uint64_t>(launch.recv_channel_start[index + 1] - first_row);
  const uint64_t total = rows + 1;  // and the sentinel
  const int ring_index =
      common::combine_ring_index(context.rank % ranks_per_node, home / ranks_per_node, shape.num_nodes);
  const common::Ring ring = context.layout.ring(context.heap.peer_base(forwarder), channel, ring_index);
  const uint64_t num_slots = ring.num_slots;
  const NvlCombineMessage& message = launch.nvl_message;
  const int topk = static_cast<int>(message.topk);
  const WaitSite site{common::WaitRole::internode_combine_nvl_sender, common::WaitTarget::ring_space, channel,
                      forwarder};
  for (uint64_t round_begin = 0; round_begin < total; round_begin += context.chunk_tokens) {
    const uint64_t round_end = min(total, round_begin + context.chunk_tokens);
    if (group.leader()) {
      const bool room =
          round_end <= num_slots || wait_at_least(context, ring.head(), round_end - num_slots, site);
      shared.group_abort[home] = room ? 0 : 1;
    }
    group.sync();
    if (shared.group_abort[home]) return;
    for (uint64_t i = round_begin + group.warp_in_group; i < round_end; i += group.size) {
      uint8_t* slot = ring.slot(i);
      if (i == rows) {
        if (lane_id() == 0) *message.src_token(slot) = -1;
        continue;
      }
      const int64_t row = first_row + static_cast<int64_t>(i);
      warp_copy<CopyLoad::read_only, 8>(message.row(slot), launch.y + row * message.row_bytes,
                                        message.row_bytes);
      if (message.has_weights) {
        for (int k = lane_id(); k < topk; k += 32)
          message.topk_weights(slot)[k] = __ldg(launch.y_topk_weights + row * topk + k);
      }
      if (lane_id() == 0) *message.src_token(slot) = launch.recv_src_token[row];
    }
    group.sync();
    if (group.leader()) {
      ptx::fence_acq_rel_sys();
      common::st_release_sys(ring.tail(), round_end);
    }
  }
}

// Role 2: the RDMA receiver of this channel's tokens: a warp per token, a batch per round.
template <typename Transport>
__device__ void rdma_receiver(const KernelContext& context, const InternodeTransports<Transport>& transports,
                              const InternodeCombineLaunch& launch, InternodeCombineShared& shared,
                              int channel) {
  const InternodeShape& shape = launch.shape;
  const common::InternodeHeapLayout& rdma = shape.rdma;
  const int num_nodes = shape.num_nodes;
  const int ranks_per_node = shape.ranks_per_node;
  const int my_node = context.rank / ranks_per_node;
  const int warp = static_cast<int>(threadIdx.x / 32);
  const int warps = static_cast<int>(blockDim.x / 32);
  const int lane = lane_id();
  const common::CombineMessage& message = launch.rdma_message;
  const int topk = static_cast<int>(message.topk);
  const uint32_t chunks = message.row_bytes / 16;
  // NOTES: a batch waits for partials while holding the slots before them, and a forwarder may hold
  // staged partials unput while it waits for space (combine_rounds: one round, or two pipelined), so a
  // batch must not need its own slots freed (as in dispatch).
  const int batch =
      min(warps, static_cast<int>(rdma.rdma_slots - combine_rounds(context, shape).held_slots() + 1));
  const int64_t begin = common::channel_begin(launch.num_tokens, context.num_channels, channel);
  const int64_t end = common::channel_begin(launch.num_tokens, context.num_channels, channel + 1);
  transport::WarpSession<Transport> session(
      transports.rdma, context.heap,
      static_cast<uint32_t>((context.num_channels + channel) * num_nodes + warp));
  if (threadIdx.x < static_cast<unsigned>(num_nodes)) shared.consumed[threadIdx.x] = 0;
  if (threadIdx.x == 0) shared.block_abort = 0;
  __syncthreads();

  for (int64_t first = begin; first < end; first += batch) {
    const int64_t token = first + warp;
    const bool mine = warp < batch && token < end;
    if (mine) {
      bool wants = false;
      if (lane < num_nodes) {
        const bool* in_rank = launch.is_token_in_rank + token * context.num_ranks + lane * ranks_per_node;
        for (int local = 0; local < ranks_per_node; ++local) wants = wants || in_rank[local];
      }
      const uint32_t nodes = __ballot_sync(0xffffffffu, wants);
      if (lane == 0) shared.node_wants[warp] = nodes;
    }
    __syncthreads();
    if (mine) {
      const uint32_t nodes = shared.node_wants[warp];
      uint64_t positions[kMaxInternodeRanks];
      bool ready = true;
      for (uint32_t pending = nodes; pending != 0 && ready; pending &= pending - 1u) {
        const int node = __ffs(pending) - 1;
        const uint32_t earlier =
            __ballot_sync(0xffffffffu, lane < warp && ((shared.node_wants[lane] >> node) & 1u));
        positions[node] = shared.consumed[node] + __popc(earlier);
        const WaitSite site{common::WaitRole::internode_combine_rdma_receiver, common::WaitTarget::ring_data,
                            channel, common::rdma_peer(context.rank, node, ranks_per_node)};
        ready = session.wait_signal(context, rdma_signal(rdma, channel, node, RdmaSignal::recv_tail),
                                    positions[node] + 1, site);
      }
      if (!ready) {
        if (lane == 0) shared.block_abort = 1;
      } else {
        // DESIGN.md: node partials in ascending node order, fp32 from bias0 + bias1 (+0 without
        // biases), rounded once.
        uint32_t* slots = shared.token_slots[warp];
        int count = 0;
        for (uint32_t pending = nodes; pending != 0; pending &= pending - 1u) {
          const int node = __ffs(pending) - 1;
          if (lane == 0)
            slots[count] = static_cast<uint32_t>(rdma.recv_slot_offset(channel, node, positions[node]) / 16);
          ++count;
        }
        __syncwarp();
        const int64_t row_elements = message.row_bytes / 2;
        reduce_bf16_rows(context.heap.base, slots, count, message.row_offset(), chunks,
                         reinterpret_cast<int4*>(launch.combined_x + token * row_elements),
                         launch.bias0 ? launch.bias0 + token * row_elements : nullptr,
                         launch.bias1 ? launch.bias1 + token * row_elements : nullptr);
        if (launch.combined_topk_weights) {
          for (int k = lane; k < topk; k += 32) {
            float sum = 0.0f;
            for (uint32_t pending = nodes; pending != 0; pending &= pending - 1u) {
              const int node = __ffs(pending) - 1;
              uint8_t* slot = context.heap.base + rdma.recv_slot_offset(channel, node, positions[node]);
              sum += message.topk_weights(slot)[k];
            }
            launch.combined_topk_weights[token * topk + k] = sum;
          }
        }
      }
    }
    __syncthreads();
    if (shared.block_abort) return;
    // Free the batch's slots: per node, the partials it held.
    const int batch_tokens = static_cast<int>(min(static_cast<int64_t>(batch), end - first));
    if (warp == 0) {
      for (int node = 0; node < num_nodes; ++node) {
        const uint32_t held =
            __ballot_sync(0xffffffffu, lane < batch_tokens && ((shared.node_wants[lane] >> node) & 1u));
        if (held == 0) continue;
        session.signal(common::rdma_peer(context.rank, node, ranks_per_node),
                       rdma_signal(rdma, channel, my_node, RdmaSignal::send_head), __popc(held));
        if (lane == 0) shared.consumed[node] += __popc(held);
      }
    }
    __syncthreads();
  }
  // Each node's forwarder announces its partial count at the end: it must be what the handle says.
  if (warp == 0) {
    for (int node = 0; node < num_nodes; ++node) {
      const int peer = common::rdma_peer(context.rank, node, ranks_per_node);
      const WaitSite site{common::WaitRole::internode_combine_rdma_receiver, common::WaitTarget::ring_data,
                          channel, peer};
      const uint32_t recv_total = rdma_signal(rdma, channel, node, RdmaSignal::recv_total);
      if (!session.wait_signal(context, recv_total, 1, site)) return;
      const uint64_t announced = session.read_signal(recv_total) - 1;
      if (lane == 0 && announced != shared.consumed[node]) {
        const WaitSite mismatch{common::WaitRole::internode_combine_rdma_receiver,
                                common::WaitTarget::call_signature, channel, peer};
        record_wait_failure(context, mismatch, static_cast<int64_t>(shared.consumed[node]),
                            static_cast<int64_t>(announced), 0);
      }
    }
  }
}

template <typename Transport>
__global__ void __launch_bounds__(kInternodeWarps * 32, 2)
    internode_combine_kernel(const __grid_constant__ KernelContext context,
                             const __grid_constant__ InternodeTransports<Transport> transports,
                             const __grid_constant__ InternodeCombineLaunch launch) {
  ptx::wait_for_previous_grid();  // launched by launch_dependent: before any global access
  __shared__ InternodeCombineShared shared;
  const int channel = static_cast<int>(blockIdx.x) / kInternodeBlocksPerChannel;
  const int role = static_cast<int>(blockIdx.x) % kInternodeBlocksPerChannel;
  // The opening found the ranks' calls mismatched (or a wait failed): write nothing (found on the GPU,
  // session 31: rows a peer's other call sent, or a token's bias alone, reached combined_x).
  if (call_stopped(context)) return;
  if (role == 2) {
    rdma_receiver(context, transports, launch, shared, channel);
    return;
  }
  const int groups = role == 0 ? context.num_ranks : launch.shape.num_nodes;
  const WarpGroup group = warp_group_of_this_warp(kInternodeWarps / groups);
  if (group.index >= groups) return;
  if (role == 0) nvl_sender(context, launch, shared, channel, group);
  if (role == 1) combine_forwarder(context, transports, launch, shared.forwarder, channel, group);
}

}  // namespace

void prepare_internode_combine_kernel(int* blocks_per_sm) {
  preload_kernel(internode_combine_kernel<transport::LoopbackDevice>);
  SY_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
      blocks_per_sm, internode_combine_kernel<transport::LoopbackDevice>, kInternodeWarps * 32, 0));
}

template <typename Transport>
void launch_internode_combine(const KernelContext& context, const InternodeTransports<Transport>& transports,
                              const InternodeCombineLaunch& launch, cudaStream_t stream) {
  launch_dependent(internode_combine_kernel<Transport>, kInternodeBlocksPerChannel * context.num_channels,
                   kInternodeWarps * 32, 0, stream, context, transports, launch);
}

template void launch_internode_combine<transport::LoopbackDevice>(
    const KernelContext&, const InternodeTransports<transport::LoopbackDevice>&,
    const InternodeCombineLaunch&, cudaStream_t);

// nccl_gin: the same kernels over NCCL's GIN device session (transport/nccl_gin.cuh), compiled wherever the
// build has NCCL's device API so that the kernels keep to the transport's interface; the host does not
// launch them yet (cuda/backend/nccl_gin_choice.cpp refuses the transport: docs/ARCHITECTURE.md, "Not yet").
#if SWITCHYARD_WITH_NCCL_GIN
template void launch_internode_combine<transport::NcclGinDevice>(
    const KernelContext&, const InternodeTransports<transport::NcclGinDevice>&, const InternodeCombineLaunch&,
    cudaStream_t);
#endif

}  // namespace switchyard::cuda
