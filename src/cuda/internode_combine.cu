// The CUDA hierarchical `normal` combine, the reverse of dispatch. Per channel three blocks:
//   0: NVLink senders, a warp group per home rank: each received row back to the forwarder of our
//      node that serves the home rank, with its source token; a sentinel ends each stream.
//   1: forwarders, a warp group per home node: merge the node's streams by source token, reduce each
//      token's rows (ascending local rank, fp32 from +0, rounded to bf16 once) into one partial;
//      the group's first warp is the coordinator that puts the partials to the home rank.
//   2: RDMA receivers: sum each token's node partials in ascending node order (fp32 from +0,
//      rounded once) and free the RDMA slots by signal. DESIGN.md, Combine.
#include "common/numeric.hpp"
#include "cuda/cuda_check.hpp"
#include "cuda/internode_device.cuh"
#include "cuda/kernel_preload.hpp"
#include "transport/loopback_device.cuh"

namespace switchyard::cuda {

namespace {

constexpr uint32_t kStreamEnd = 0xffffffffu;  // min() of an exhausted stream

struct InternodeCombineShared {
  int group_abort[kInternodeWarps];
  int group_done[kInternodeWarps];
  int round_count[kInternodeWarps];
  uint64_t stream_start[kMaxInternodeRanks];                // forwarder: [home node * P + local rank]
  uint32_t round_masks[kInternodeWarps][kMaxForwardRound];  // forwarder: ranks holding each token
  // RDMA receiver.
  int block_abort;
  uint32_t node_wants[kInternodeWarps];   // per warp's token: the nodes with a partial for it
  uint64_t consumed[kMaxInternodeRanks];  // per node: partials consumed
};

// Tokens per forwarder round; see internode_dispatch.cu (the NVLink senders publish in chunks).
__device__ __forceinline__ uint32_t forward_round(const KernelContext& context, const InternodeShape& shape) {
  const uint32_t slack = context.layout.ring_slots - context.chunk_tokens + 1;
  return min(min(static_cast<uint32_t>(kMaxForwardRound), slack), shape.rdma.rdma_slots);
}

__device__ __forceinline__ void add_bf16x8(float (&sum)[8], int4 packed) {
  const uint32_t words[4] = {static_cast<uint32_t>(packed.x), static_cast<uint32_t>(packed.y),
                             static_cast<uint32_t>(packed.z), static_cast<uint32_t>(packed.w)};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    sum[2 * i] += common::bf16_to_float(static_cast<uint16_t>(words[i] & 0xffffu));
    sum[2 * i + 1] += common::bf16_to_float(static_cast<uint16_t>(words[i] >> 16));
  }
}

__device__ __forceinline__ int4 round_bf16x8(const float (&sum)[8]) {
  uint32_t words[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    words[i] = static_cast<uint32_t>(common::float_to_bf16(sum[2 * i])) |
               (static_cast<uint32_t>(common::float_to_bf16(sum[2 * i + 1])) << 16);
  }
  return make_int4(static_cast<int>(words[0]), static_cast<int>(words[1]), static_cast<int>(words[2]),
                   static_cast<int>(words[3]));
}

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
      warp_copy<true>(message.row(slot), launch.y + row * message.row_bytes, message.row_bytes);
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

// One warp reduces a token's rows held by the ranks in `mask` into the partial at `partial_slot`.
__device__ void reduce_node_partial(const KernelContext& context, const InternodeCombineLaunch& launch,
                                    int channel, int home_node, uint32_t mask, const uint64_t* positions,
                                    uint8_t* partial_slot) {
  const NvlCombineMessage& in = launch.nvl_message;
  const common::CombineMessage& out = launch.rdma_message;
  const int num_nodes = launch.shape.num_nodes;
  const uint32_t chunks = in.row_bytes / 16;
  const int lane = lane_id();
  int4* partial = reinterpret_cast<int4*>(out.row(partial_slot));
  for (uint32_t chunk = lane; chunk < chunks; chunk += 32) {
    float sum[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (uint32_t pending = mask; pending != 0; pending &= pending - 1u) {
      const int local = __ffs(pending) - 1;
      const common::Ring ring = context.layout.ring(context.heap.base, channel,
                                                    common::combine_ring_index(local, home_node, num_nodes));
      add_bf16x8(sum, reinterpret_cast<const int4*>(in.row(ring.slot(positions[local])))[chunk]);
    }
    partial[chunk] = round_bf16x8(sum);
  }
  if (out.has_weights) {
    const int topk = static_cast<int>(out.topk);
    for (int k = lane; k < topk; k += 32) {
      float sum = 0.0f;
      for (uint32_t pending = mask; pending != 0; pending &= pending - 1u) {
        const int local = __ffs(pending) - 1;
        const common::Ring ring = context.layout.ring(
            context.heap.base, channel, common::combine_ring_index(local, home_node, num_nodes));
        sum += in.topk_weights(ring.slot(positions[local]))[k];
      }
      out.topk_weights(partial_slot)[k] = sum;
    }
  }
}

// The coordinator's merge step: up to `round_max` tokens, the smallest pending source token first.
// Lane l follows the stream from local rank l (`cursor`: its next unread row). Returns the round's
// token count, or -1 when a wait failed; `exhausted` once every stream reached its sentinel.
__device__ int merge_round(const KernelContext& context, const InternodeCombineLaunch& launch, int channel,
                           int home_node, uint32_t round_max, uint64_t& cursor, uint64_t& known_tail,
                           bool& exhausted, uint32_t* masks) {
  const int ranks_per_node = launch.shape.ranks_per_node;
  const int lane = lane_id();
  const bool has_stream = lane < ranks_per_node;
  const common::Ring ring = context.layout.ring(
      context.heap.base, channel,
      common::combine_ring_index(has_stream ? lane : 0, home_node, launch.shape.num_nodes));
  const int rank_of_stream = (context.rank / ranks_per_node) * ranks_per_node + lane;
  const WaitSite site{common::WaitRole::internode_combine_forwarder, common::WaitTarget::ring_data, channel,
                      rank_of_stream};
  int count = 0;
  while (count < static_cast<int>(round_max)) {
    bool ok = true;
    uint32_t head_token = kStreamEnd;
    if (has_stream && !exhausted) {
      if (cursor >= known_tail) {
        ok = wait_at_least(context, ring.tail(), cursor + 1, site);
        if (ok) known_tail = common::ld_acquire_sys(ring.tail());
      }
      if (ok) {
        const int32_t token = *launch.nvl_message.src_token(ring.slot(cursor));
        if (token < 0) {
          exhausted = true;
          ++cursor;  // the sentinel is consumed too
        } else {
          head_token = static_cast<uint32_t>(token);
        }
      }
    }
    if (!__all_sync(0xffffffffu, ok)) return -1;
    const uint32_t token = __reduce_min_sync(0xffffffffu, head_token);
    if (token == kStreamEnd) break;
    const uint32_t mask = __ballot_sync(0xffffffffu, head_token == token);
    if (lane == 0) masks[count] = mask;
    if (head_token == token) ++cursor;
    ++count;
  }
  __syncwarp();
  return count;
}

// Role 1: the forwarder and coordinator for one home node (its rank with our local index).
template <typename Transport>
__device__ void combine_forwarder(const KernelContext& context,
                                  const InternodeTransports<Transport>& transports,
                                  const InternodeCombineLaunch& launch, InternodeCombineShared& shared,
                                  int channel, const WarpGroup& group) {
  const InternodeShape& shape = launch.shape;
  const common::InternodeHeapLayout& rdma = shape.rdma;
  const int ranks_per_node = shape.ranks_per_node;
  const int home_node = group.index;
  const int my_node = context.rank / ranks_per_node;
  const int home = common::rdma_peer(context.rank, home_node, ranks_per_node);
  const bool coordinator = group.warp_in_group == 0;
  const int lane = lane_id();
  const uint64_t slots = rdma.rdma_slots;
  const uint32_t round_max = forward_round(context, shape);
  const uint32_t send_head = rdma_signal(rdma, channel, home_node, RdmaSignal::send_head);
  const WaitSite space_site{common::WaitRole::internode_combine_coordinator, common::WaitTarget::ring_space,
                            channel, home};
  uint32_t* masks = shared.round_masks[home_node];
  uint64_t* stream_start = shared.stream_start + home_node * ranks_per_node;
  transport::WarpSession<Transport> session(transports.rdma, context.heap,
                                            static_cast<uint32_t>(channel * shape.num_nodes + home_node));
  // Coordinator state (lane l: the stream from local rank l).
  uint64_t cursor = 0, known_tail = 0, staged = 0;
  bool exhausted = false;

  for (;;) {
    if (coordinator) {
      bool ok = staged + round_max <= slots ||
                session.wait_signal(context, send_head, staged + round_max - slots, space_site);
      if (lane < ranks_per_node) stream_start[lane] = cursor;
      const int count = ok ? merge_round(context, launch, channel, home_node, round_max, cursor, known_tail,
                                         exhausted, masks)
                           : -1;
      const bool all_exhausted = __all_sync(0xffffffffu, exhausted || lane >= ranks_per_node);
      if (lane == 0) {
        shared.group_abort[home_node] = count < 0 ? 1 : 0;
        shared.round_count[home_node] = count;
        shared.group_done[home_node] = all_exhausted ? 1 : 0;
      }
    }
    group.sync();
    if (shared.group_abort[home_node]) return;
    // Read now: the coordinator rewrites these in the next round, after the group.sync below.
    const int count = shared.round_count[home_node];
    const bool done = shared.group_done[home_node] != 0;
    for (int j = group.warp_in_group; j < count; j += group.size) {
      // Row positions: each stream's start plus the round's earlier tokens it held.
      uint64_t positions[kMaxInternodeRanks];
      const uint32_t mask = masks[j];
      for (uint32_t pending = mask; pending != 0; pending &= pending - 1u) {
        const int local = __ffs(pending) - 1;
        const uint32_t earlier = __ballot_sync(0xffffffffu, lane < j && ((masks[lane] >> local) & 1u));
        positions[local] = stream_start[local] + __popc(earlier);
      }
      reduce_node_partial(context, launch, channel, home_node, mask, positions,
                          context.heap.base + rdma.send_slot_offset(channel, home_node, staged + j));
    }
    group.sync();
    if (coordinator) {
      if (count > 0) {
        const uint64_t round_end = staged + count;
        for (uint64_t sequence = staged; sequence < round_end;) {
          const uint64_t run = min(round_end - sequence, slots - rdma.slot_index(sequence));
          const size_t destination = rdma.recv_slot_offset(channel, my_node, sequence);
          const size_t source = rdma.send_slot_offset(channel, home_node, sequence);
          const size_t bytes = run * rdma.rdma_slot_bytes;
          if (sequence + run == round_end) {
            session.put_signal(home, destination, source, bytes,
                               rdma_signal(rdma, channel, my_node, RdmaSignal::recv_tail),
                               static_cast<uint64_t>(count));
          } else {
            session.put(home, destination, source, bytes);
          }
          sequence += run;
        }
        session.flush();
      }
      // The rows were reduced (group.sync above): free them, and the sentinels read.
      if (lane < ranks_per_node) {
        const common::Ring ring = context.layout.ring(
            context.heap.base, channel, common::combine_ring_index(lane, home_node, shape.num_nodes));
        common::st_release_sys(ring.head(), cursor);
      }
      __syncwarp();
    }
    staged += count;  // every warp tracks it: the next round's slots
    if (done) break;
  }
  if (coordinator) {
    session.signal(home, rdma_signal(rdma, channel, my_node, RdmaSignal::recv_total), staged + 1);
    // Every slot freed: no free of this call may land after the next call's reset.
    if (staged > 0) session.wait_signal(context, send_head, staged, space_site);
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
  // NOTES: a batch waits for partials while holding the slots before them; the forwarders stage in
  // rounds of forward_round(), so a batch must not need its own slots freed (as in dispatch).
  const int batch = min(warps, static_cast<int>(rdma.rdma_slots - forward_round(context, shape) + 1));
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
        // DESIGN.md: node partials in ascending node order, fp32 from +0, rounded once.
        int4* out = reinterpret_cast<int4*>(launch.combined_x + token * (message.row_bytes / 2));
        for (uint32_t chunk = lane; chunk < chunks; chunk += 32) {
          float sum[8] = {0, 0, 0, 0, 0, 0, 0, 0};
          for (uint32_t pending = nodes; pending != 0; pending &= pending - 1u) {
            const int node = __ffs(pending) - 1;
            uint8_t* slot = context.heap.base + rdma.recv_slot_offset(channel, node, positions[node]);
            add_bf16x8(sum, reinterpret_cast<const int4*>(message.row(slot))[chunk]);
          }
          out[chunk] = round_bf16x8(sum);
        }
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
  __shared__ InternodeCombineShared shared;
  const int channel = static_cast<int>(blockIdx.x) / kInternodeBlocksPerChannel;
  const int role = static_cast<int>(blockIdx.x) % kInternodeBlocksPerChannel;
  if (role == 2) {
    rdma_receiver(context, transports, launch, shared, channel);
    return;
  }
  const int groups = role == 0 ? context.num_ranks : launch.shape.num_nodes;
  const WarpGroup group = warp_group_of_this_warp(kInternodeWarps / groups);
  if (group.index >= groups) return;
  if (role == 0) nvl_sender(context, launch, shared, channel, group);
  if (role == 1) combine_forwarder(context, transports, launch, shared, channel, group);
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
  internode_combine_kernel<Transport>
      <<<kInternodeBlocksPerChannel * context.num_channels, kInternodeWarps * 32, 0, stream>>>(
          context, transports, launch);
  SY_CUDA_CHECK_LAUNCH();
}

template void launch_internode_combine<transport::LoopbackDevice>(
    const KernelContext&, const InternodeTransports<transport::LoopbackDevice>&,
    const InternodeCombineLaunch&, cudaStream_t);

}  // namespace switchyard::cuda
