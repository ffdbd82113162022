// The CUDA hierarchical `normal` dispatch. Per channel three blocks:
//   0: RDMA senders, a warp group per destination node: stage each token once per node in our send
//      buffer; the group's first warp is that node's coordinator (puts the chunk, adds recv_tail).
//   1: forwarders, a warp group per source node: from our RDMA receive ring into the intranode ring
//      (index: source rank) of every rank of our node in the token's mask; free RDMA slots by signal.
//   2: NVLink receivers, a warp group per source rank: copy tokens out in rank-major order.
// Flow control everywhere is head/tail in chunks; a send slot is rewritten only after the peer freed
// it and the put that read it was flushed.
#include "cuda/backend/dependent_launch.hpp"
#include "cuda/backend/kernel_preload.hpp"
#include "cuda/internode/device.cuh"
#include "device/cuda_check.hpp"
#include "device/warp_copy.cuh"
#include "transport/loopback_device.cuh"
#include "transport/nccl_gin.cuh"

namespace switchyard::cuda {

namespace {

struct InternodeDispatchShared {
  int group_abort[kInternodeWarps];
  uint64_t total[kInternodeWarps];                          // forwarder: messages per source node
  uint64_t target_tail[kMaxInternodeRanks];                 // forwarder: [source node * P + local rank]
  uint32_t round_masks[kInternodeWarps][kMaxForwardRound];  // forwarder: the round's rank masks
};

// Tokens a forwarder takes per round. NOTES: a round waits for up to this many messages while
// holding the slots before them, and the sender publishes in chunks: it must not need the round's
// slots freed to publish the round (the same bound as combine's batches).
__device__ __forceinline__ uint64_t forward_round(const KernelContext& context, const InternodeShape& shape) {
  const uint32_t slots = min(context.layout.ring_slots, shape.rdma.rdma_slots);
  const uint32_t slack = slots - context.chunk_tokens + 1;
  return min(static_cast<uint32_t>(kMaxForwardRound), slack);
}

// The mask of `node`'s ranks that want `token` (lane l reads local rank l; P <= 16).
__device__ __forceinline__ uint32_t node_mask(const InternodeDispatchLaunch& launch, int num_ranks,
                                              int32_t token, int node) {
  const int ranks_per_node = launch.shape.ranks_per_node;
  const int lane = lane_id();
  const bool wants =
      lane < ranks_per_node &&
      launch.is_token_in_rank[static_cast<int64_t>(token) * num_ranks + node * ranks_per_node + lane];
  return __ballot_sync(0xffffffffu, wants);
}

// Stages token `token` for `node` in a send slot: row, scales, global routing, source index, mask.
__device__ void write_rdma_message(const KernelContext& context, const InternodeDispatchLaunch& launch,
                                   int32_t token, int node, uint8_t* slot) {
  const common::InternodeDispatchMessage& message = launch.rdma_message;
  const int lane = lane_id();
  warp_copy<CopyLoad::read_only, 8>(
      message.row(slot), launch.x + static_cast<int64_t>(token) * message.row_bytes, message.row_bytes);
  for (uint32_t i = lane; i < message.num_scales; i += 32) {
    message.scales(slot)[i] = __ldg(launch.x_scales + launch.x_scales_layout.index(token, i));
  }
  const int topk = static_cast<int>(message.topk);
  for (int k = lane; k < topk; k += 32) {
    message.topk_idx(slot)[k] =
        static_cast<int32_t>(__ldg(launch.topk_idx + static_cast<int64_t>(token) * topk + k));
    if (message.has_weights) {
      message.topk_weights(slot)[k] = __ldg(launch.topk_weights + static_cast<int64_t>(token) * topk + k);
    }
  }
  const uint32_t mask = node_mask(launch, context.num_ranks, token, node);
  if (lane == 0) {
    *message.src_token(slot) = token;
    common::RankMask* rank_mask = message.rank_mask(slot);
    rank_mask->clear();
    rank_mask->words[0] = mask;
  }
}

// Role 0: the senders and coordinator for one destination node.
template <typename Transport>
__device__ void rdma_sender(const KernelContext& context, const InternodeTransports<Transport>& transports,
                            const InternodeDispatchLaunch& launch, InternodeDispatchShared& shared,
                            int channel, const WarpGroup& group) {
  const InternodeShape& shape = launch.shape;
  const common::InternodeHeapLayout& rdma = shape.rdma;
  const int node = group.index;
  const int my_node = context.rank / shape.ranks_per_node;
  const int peer = common::rdma_peer(context.rank, node, shape.ranks_per_node);
  const int num_channels = context.num_channels;
  const int32_t* prefix = launch.node_send_channel_prefix + node * (num_channels + 1);
  const int32_t* tokens = launch.node_send_list + node * launch.num_tokens + prefix[channel];
  const uint64_t total = static_cast<uint64_t>(prefix[channel + 1] - prefix[channel]);
  const uint64_t slots = rdma.rdma_slots;
  const bool coordinator = group.warp_in_group == 0;
  const WaitSite site{common::WaitRole::internode_dispatch_coordinator, common::WaitTarget::ring_space,
                      channel, peer};
  const uint32_t send_head = rdma_signal(rdma, channel, node, RdmaSignal::send_head);
  transport::WarpSession<Transport> session(transports.rdma, context.heap,
                                            static_cast<uint32_t>(channel * shape.num_nodes + node));
  if (coordinator)
    session.signal(peer, rdma_signal(rdma, channel, my_node, RdmaSignal::recv_total), total + 1);

  for (uint64_t round_begin = 0; round_begin < total; round_begin += context.chunk_tokens) {
    const uint64_t round_end = min(total, round_begin + context.chunk_tokens);
    if (coordinator) {
      const bool room =
          round_end <= slots || session.wait_signal(context, send_head, round_end - slots, site);
      if (lane_id() == 0) shared.group_abort[node] = room ? 0 : 1;
    }
    group.sync();
    if (shared.group_abort[node]) return;
    for (uint64_t i = round_begin + group.warp_in_group; i < round_end; i += group.size) {
      write_rdma_message(context, launch, tokens[i], node,
                         context.heap.base + rdma.send_slot_offset(channel, node, i));
    }
    group.sync();
    if (coordinator) {
      // The chunk as at most two contiguous puts (the ring may wrap); the last adds to recv_tail.
      for (uint64_t sequence = round_begin; sequence < round_end;) {
        const uint64_t count = min(round_end - sequence, slots - rdma.slot_index(sequence));
        const size_t destination = rdma.recv_slot_offset(channel, my_node, sequence);
        const size_t source = rdma.send_slot_offset(channel, node, sequence);
        const size_t bytes = count * rdma.rdma_slot_bytes;
        if (sequence + count == round_end) {
          session.put_signal(peer, destination, source, bytes,
                             rdma_signal(rdma, channel, my_node, RdmaSignal::recv_tail),
                             round_end - round_begin);
        } else {
          session.put(peer, destination, source, bytes);
        }
        sequence += count;
      }
      session.flush();  // the slots may be restaged once the peer frees them
    }
  }
  // Every slot freed: no free of this call may land after the next call's reset.
  if (coordinator && total > 0) session.wait_signal(context, send_head, total, site);
}

// Writes RDMA message `rdma_slot` into `slot` as rank `destination` must see it (its local expert
// ids, -1 and weight 0 elsewhere): the intranode sender's format exactly.
__device__ void write_nvl_message(const InternodeDispatchLaunch& launch, const uint8_t* rdma_slot_const,
                                  int destination, uint8_t* slot) {
  uint8_t* rdma_slot = const_cast<uint8_t*>(rdma_slot_const);
  const common::InternodeDispatchMessage& in = launch.rdma_message;
  const common::DispatchMessage& out = launch.message;
  const int lane = lane_id();
  warp_copy<CopyLoad::plain, 8>(out.row(slot), in.row(rdma_slot), out.row_bytes);
  for (uint32_t i = lane; i < out.num_scales; i += 32) out.scales(slot)[i] = in.scales(rdma_slot)[i];
  const int topk = static_cast<int>(out.topk);
  const int64_t first_expert = static_cast<int64_t>(destination) * launch.local_experts;
  for (int k = lane; k < topk; k += 32) {
    const int64_t expert = in.topk_idx(rdma_slot)[k];
    const bool local = expert >= first_expert && expert < first_expert + launch.local_experts;
    out.topk_idx(slot)[k] = local ? static_cast<int32_t>(expert - first_expert) : -1;
    if (out.has_weights) out.topk_weights(slot)[k] = local ? in.topk_weights(rdma_slot)[k] : 0.0f;
  }
  if (lane == 0) *out.src_token(slot) = *in.src_token(rdma_slot);
}

// Role 1: the forwarder for one source node (it serves that node's rank with our local index).
template <typename Transport>
__device__ void dispatch_forwarder(const KernelContext& context,
                                   const InternodeTransports<Transport>& transports,
                                   const InternodeDispatchLaunch& launch, InternodeDispatchShared& shared,
                                   int channel, const WarpGroup& group) {
  const InternodeShape& shape = launch.shape;
  const common::InternodeHeapLayout& rdma = shape.rdma;
  const int ranks_per_node = shape.ranks_per_node;
  const int node = group.index;
  const int my_node = context.rank / ranks_per_node;
  const int source = common::rdma_peer(context.rank, node, ranks_per_node);
  const bool coordinator = group.warp_in_group == 0;
  const int lane = lane_id();
  const uint32_t ring_slots = context.layout.ring_slots;
  uint32_t* masks = shared.round_masks[node];
  uint64_t* target_tail = shared.target_tail + node * ranks_per_node;
  const WaitSite data_site{common::WaitRole::internode_dispatch_forwarder, common::WaitTarget::ring_data,
                           channel, source};
  transport::WarpSession<Transport> session(
      transports.rdma, context.heap,
      static_cast<uint32_t>((context.num_channels + channel) * shape.num_nodes + node));

  if (coordinator) {
    const uint32_t recv_total = rdma_signal(rdma, channel, node, RdmaSignal::recv_total);
    const bool announced = session.wait_signal(context, recv_total, 1, data_site);
    if (lane == 0) {
      shared.group_abort[node] = announced ? 0 : 1;
      shared.total[node] = announced ? session.read_signal(recv_total) - 1 : 0;
    }
    if (lane < ranks_per_node) target_tail[lane] = 0;
  }
  group.sync();
  if (shared.group_abort[node]) return;
  const uint64_t total = shared.total[node];
  const uint64_t round_tokens = forward_round(context, shape);

  for (uint64_t round_begin = 0; round_begin < total; round_begin += round_tokens) {
    const uint64_t round_end = min(total, round_begin + round_tokens);
    const int count = static_cast<int>(round_end - round_begin);
    if (coordinator) {
      bool ready = session.wait_signal(context, rdma_signal(rdma, channel, node, RdmaSignal::recv_tail),
                                       round_end, data_site);
      if (ready && lane < count) {
        uint8_t* slot = context.heap.base + rdma.recv_slot_offset(channel, node, round_begin + lane);
        masks[lane] = static_cast<uint32_t>(launch.rdma_message.rank_mask(slot)->words[0]);
      }
      __syncwarp();
      // Room in the ring of every rank that gets tokens of this round (lane l: local rank l).
      bool room = true;
      if (ready && lane < ranks_per_node) {
        uint32_t wanted = 0;
        for (int j = 0; j < count; ++j) wanted += (masks[j] >> lane) & 1u;
        const uint64_t needed = target_tail[lane] + wanted;
        if (wanted > 0 && needed > ring_slots) {
          const int destination = my_node * ranks_per_node + lane;
          const common::Ring ring = context.layout.ring(context.heap.peer_base(destination), channel, source);
          const WaitSite space_site{common::WaitRole::internode_dispatch_forwarder,
                                    common::WaitTarget::ring_space, channel, destination};
          room = wait_at_least(context, ring.head(), needed - ring_slots, space_site);
        }
      }
      ready = __all_sync(0xffffffffu, ready && room);
      if (lane == 0) shared.group_abort[node] = ready ? 0 : 1;
    }
    group.sync();
    if (shared.group_abort[node]) return;
    for (int j = group.warp_in_group; j < count; j += group.size) {
      const uint8_t* rdma_slot = context.heap.base + rdma.recv_slot_offset(channel, node, round_begin + j);
      const uint32_t mask = masks[j];
      for (uint32_t pending = mask; pending != 0; pending &= pending - 1u) {
        const int local = __ffs(pending) - 1;
        // Position in that ring: its tail at the round's start plus the round's earlier tokens for it.
        const uint32_t earlier = __ballot_sync(0xffffffffu, lane < j && ((masks[lane] >> local) & 1u));
        const int destination = my_node * ranks_per_node + local;
        const common::Ring ring = context.layout.ring(context.heap.peer_base(destination), channel, source);
        write_nvl_message(launch, rdma_slot, destination, ring.slot(target_tail[local] + __popc(earlier)));
      }
    }
    group.sync();
    if (coordinator) {
      if (lane < ranks_per_node) {
        uint32_t wanted = 0;
        for (int j = 0; j < count; ++j) wanted += (masks[j] >> lane) & 1u;
        if (wanted > 0) {
          target_tail[lane] += wanted;
          const common::Ring ring =
              context.layout.ring(context.heap.peer_base(my_node * ranks_per_node + lane), channel, source);
          ptx::fence_acq_rel_sys();
          common::st_release_sys(ring.tail(), target_tail[lane]);
        }
      }
      __syncwarp();
      // The round's RDMA slots were copied (group.sync above): hand them back to the source.
      session.signal(source, rdma_signal(rdma, channel, my_node, RdmaSignal::send_head),
                     round_end - round_begin);
    }
  }
  if (coordinator) session.flush();
}

// Copies one message out of our ring into receive row `row`.
__device__ __forceinline__ void copy_out(const InternodeDispatchLaunch& launch, uint8_t* slot, int64_t row) {
  const common::DispatchMessage& message = launch.message;
  const int lane = lane_id();
  warp_copy<CopyLoad::plain, 8>(launch.recv_x + row * message.row_bytes, message.row(slot),
                                message.row_bytes);
  for (uint32_t i = lane; i < message.num_scales; i += 32) {
    launch.recv_x_scales[row * message.num_scales + i] = message.scales(slot)[i];
  }
  const int topk = static_cast<int>(message.topk);
  for (int k = lane; k < topk; k += 32) {
    if (launch.recv_topk_idx) launch.recv_topk_idx[row * topk + k] = message.topk_idx(slot)[k];
    if (launch.recv_topk_weights) launch.recv_topk_weights[row * topk + k] = message.topk_weights(slot)[k];
  }
  if (lane == 0) launch.recv_src_token[row] = *message.src_token(slot);
  __syncwarp();
}

// Role 2: the NVLink receiver for one source rank (fed by the forwarder of our node that serves it).
__device__ void nvl_receiver(const KernelContext& context, const InternodeDispatchLaunch& launch,
                             InternodeDispatchShared& shared, int channel, const WarpGroup& group) {
  const int source = group.index;
  const int ranks_per_node = launch.shape.ranks_per_node;
  const int forwarder = (context.rank / ranks_per_node) * ranks_per_node + source % ranks_per_node;
  const int index = source * context.num_channels + channel;
  const int64_t first_row = launch.recv_channel_start[index];
  const uint64_t total = static_cast<uint64_t>(launch.recv_channel_start[index + 1] - first_row);
  const common::Ring ring = context.layout.ring(context.heap.base, channel, source);
  const WaitSite site{common::WaitRole::internode_dispatch_nvl_receiver, common::WaitTarget::ring_data,
                      channel, forwarder};
  for (uint64_t round_begin = 0; round_begin < total; round_begin += context.chunk_tokens) {
    const uint64_t round_end = min(total, round_begin + context.chunk_tokens);
    if (group.leader())
      shared.group_abort[source] = wait_at_least(context, ring.tail(), round_end, site) ? 0 : 1;
    group.sync();
    if (shared.group_abort[source]) return;
    for (uint64_t i = round_begin + group.warp_in_group; i < round_end; i += group.size) {
      copy_out(launch, ring.slot(i), first_row + static_cast<int64_t>(i));
    }
    group.sync();
    if (group.leader()) common::st_release_sys(ring.head(), round_end);
  }
}

// Worst-case mode: rows past the received ones route nowhere.
__device__ void pad_worst_case_rows(const KernelContext& context, const InternodeDispatchLaunch& launch,
                                    int channel) {
  const int64_t received = launch.recv_channel_start[context.num_ranks * context.num_channels];
  const int topk = static_cast<int>(launch.message.topk);
  for (int64_t row = received + channel * static_cast<int64_t>(blockDim.x) + threadIdx.x;
       row < launch.num_output_rows; row += static_cast<int64_t>(blockDim.x) * context.num_channels) {
    launch.recv_src_token[row] = -1;
    for (int k = 0; k < topk; ++k) {
      if (launch.recv_topk_idx) launch.recv_topk_idx[row * topk + k] = -1;
      if (launch.recv_topk_weights) launch.recv_topk_weights[row * topk + k] = 0.0f;
    }
  }
}

template <typename Transport>
__global__ void __launch_bounds__(kInternodeWarps * 32, 2)
    internode_dispatch_kernel(const __grid_constant__ KernelContext context,
                              const __grid_constant__ InternodeTransports<Transport> transports,
                              const __grid_constant__ InternodeDispatchLaunch launch) {
  ptx::wait_for_previous_grid();  // launched by launch_dependent: before any global access
  __shared__ InternodeDispatchShared shared;
  const int channel = static_cast<int>(blockIdx.x) / kInternodeBlocksPerChannel;
  const int role = static_cast<int>(blockIdx.x) % kInternodeBlocksPerChannel;
  // The opening found the ranks' calls mismatched (or a wait failed): write nothing. A wait whose data is
  // already there never looks at the abort flag, so the roles would otherwise copy what a peer's other
  // call left.
  if (call_stopped(context)) return;
  const int64_t received = launch.recv_channel_start[context.num_ranks * context.num_channels];
  if (received > launch.num_output_rows) {
    // Worst-case outputs too small: write nothing; peers waiting on us time out and say so.
    if (threadIdx.x == 0 && blockIdx.x == 2) {
      WaitSite site{common::WaitRole::internode_dispatch_nvl_receiver, common::WaitTarget::capacity, -1, -1};
      record_wait_failure(context, site, launch.num_output_rows, received, 0);
    }
    return;
  }
  const int groups = role == 2 ? context.num_ranks : launch.shape.num_nodes;
  const WarpGroup group = warp_group_of_this_warp(kInternodeWarps / groups);
  if (group.index < groups) {
    if (role == 0) rdma_sender(context, transports, launch, shared, channel, group);
    if (role == 1) dispatch_forwarder(context, transports, launch, shared, channel, group);
    if (role == 2) nvl_receiver(context, launch, shared, channel, group);
  }
  if (role == 2) pad_worst_case_rows(context, launch, channel);
}

}  // namespace

void prepare_internode_dispatch_kernel(int* blocks_per_sm) {
  preload_kernel(internode_dispatch_kernel<transport::LoopbackDevice>);
  SY_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
      blocks_per_sm, internode_dispatch_kernel<transport::LoopbackDevice>, kInternodeWarps * 32, 0));
}

template <typename Transport>
void launch_internode_dispatch(const KernelContext& context, const InternodeTransports<Transport>& transports,
                               const InternodeDispatchLaunch& launch, cudaStream_t stream) {
  launch_dependent(internode_dispatch_kernel<Transport>, kInternodeBlocksPerChannel * context.num_channels,
                   kInternodeWarps * 32, 0, stream, context, transports, launch);
}

template void launch_internode_dispatch<transport::LoopbackDevice>(
    const KernelContext&, const InternodeTransports<transport::LoopbackDevice>&,
    const InternodeDispatchLaunch&, cudaStream_t);

// nccl_gin: the same kernels over NCCL's GIN device session (transport/nccl_gin.cuh), compiled wherever the
// build has NCCL's device API so that the kernels keep to the transport's interface; the host does not
// launch them yet (cuda/backend/nccl_gin_choice.cpp refuses the transport: docs/ARCHITECTURE.md, "Not yet").
#if SWITCHYARD_WITH_NCCL_GIN
template void launch_internode_dispatch<transport::NcclGinDevice>(
    const KernelContext&, const InternodeTransports<transport::NcclGinDevice>&,
    const InternodeDispatchLaunch&, cudaStream_t);
#endif

}  // namespace switchyard::cuda
