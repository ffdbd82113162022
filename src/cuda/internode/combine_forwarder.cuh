#pragma once
// The hierarchical combine's forwarders (block 1 of each channel in internode_combine.cu): per home
// node a warp group merges its node's NVLink streams by source token, reduces each token's rows
// (ascending local rank, fp32 from +0, rounded to bf16 once: DESIGN.md, Combine) into one partial in
// the RDMA send buffer, and puts the partials to the home rank through the transport.
//
// Two schedules of the same work:
//  - pipelined (the usual one): warp 0 is the coordinator and never reduces. It merges round r + 1
//    and puts round r - 1 while the other warps, the reducers, reduce round r. The round tables are
//    double-buffered. NOTES: when one warp both coordinated and reduced, the merge, the reduction and
//    the put ran as one serial chain per round, and the transport's and merge's state stayed live
//    across the reduction (spills); that combine reached 0.36 of its design roofline.
//  - serial: every warp reduces, then the coordinator puts: for rings too small to hold two rounds
//    and for groups of one warp (more than 8 nodes).
#include "cuda/internode/kernels.hpp"
#include "device/bf16_row_reduce.cuh"
#include "device/bounded_wait.cuh"
#include "device/warp_group.cuh"
#include "transport/device_transport.cuh"

namespace switchyard::cuda {

// Rows a forwarder reduces per token: the ranks of its node (a node has at most half the ranks).
constexpr int kMaxForwarderRows = kMaxInternodeRanks / 2;

struct ForwarderShared {
  // Per round buffer (round & 1) and home node (the group).
  int abort[2][kInternodeWarps];
  int done[2][kInternodeWarps];
  int count[2][kInternodeWarps];
  uint64_t stream_start[2][kMaxInternodeRanks];              // [home node * P + local rank]
  uint32_t masks[2][kInternodeWarps][kMaxForwardRound];      // the local ranks holding each token
  uint32_t token_slots[kInternodeWarps][kMaxForwarderRows];  // per warp: its token's ring slots
};

constexpr uint32_t kForwarderStreamEnd = 0xffffffffu;  // min() of an exhausted stream

// Tokens per forwarder round, and whether the group pipelines its rounds. The senders publish in
// chunks of chunk_tokens, so a round may hold at most `slack` rows of a stream without freeing them
// (see internode_dispatch.cu); the pipelined schedule holds two rounds, in the NVLink rings and in the
// RDMA send buffer alike, so each gets half.
struct CombineRounds {
  uint32_t tokens;
  bool pipelined;

  // RDMA send slots a forwarder may hold staged but not yet put while it waits for space.
  __device__ __forceinline__ uint32_t held_slots() const { return pipelined ? 2 * tokens : tokens; }
};

__device__ __forceinline__ CombineRounds combine_rounds(const KernelContext& context,
                                                        const InternodeShape& shape) {
  const uint32_t slack = context.layout.ring_slots - context.chunk_tokens + 1;
  const uint32_t slots = shape.rdma.rdma_slots;
  const int group_size = kInternodeWarps / shape.num_nodes;
  if (group_size >= 2 && slack >= 2 && slots >= 2) {
    return {min(static_cast<uint32_t>(kMaxForwardRound), min(slack / 2, slots / 2)), true};
  }
  return {min(static_cast<uint32_t>(kMaxForwardRound), min(slack, slots)), false};
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
    uint32_t head_token = kForwarderStreamEnd;
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
    if (token == kForwarderStreamEnd) break;
    const uint32_t mask = __ballot_sync(0xffffffffu, head_token == token);
    if (lane == 0) masks[count] = mask;
    if (head_token == token) ++cursor;
    ++count;
  }
  __syncwarp();
  return count;
}

// The ring slots of token `j` of a round, one per local rank in its mask (ascending), into `slots` in
// 16-byte units from the heap's base: each stream's start plus the round's earlier tokens it held.
// Returns how many.
__device__ __forceinline__ int token_slots(const KernelContext& context, int channel, int home_node,
                                           int num_nodes, const uint32_t* masks, const uint64_t* stream_start,
                                           int j, uint32_t* slots) {
  const int lane = lane_id();
  const uint32_t mask = masks[j];
  const uint32_t earlier_mask = lane < j ? masks[lane] : 0u;
  for (uint32_t pending = mask; pending != 0; pending &= pending - 1u) {
    const int local = __ffs(pending) - 1;
    const uint32_t earlier = __ballot_sync(0xffffffffu, (earlier_mask >> local) & 1u);
    if (lane == 0) {
      const common::Ring ring = context.layout.ring(context.heap.base, channel,
                                                    common::combine_ring_index(local, home_node, num_nodes));
      const uint64_t position = stream_start[local] + __popc(earlier);
      slots[__popc(mask & ((1u << local) - 1u))] =
          static_cast<uint32_t>((ring.slot(position) - context.heap.base) / 16);
    }
  }
  __syncwarp();
  return __popc(mask);
}

// One warp reduces `count` rows (at heap base + slots[i] x 16 + row_offset, slots in shared memory, in
// the order the sum must take) into `out`: per channel fp32 from +0, rounded to bf16 once.
__device__ void reduce_node_partial(const KernelContext& context, const InternodeCombineLaunch& launch,
                                    const uint32_t* slots, int count, uint8_t* partial_slot) {
  const NvlCombineMessage& in = launch.nvl_message;
  const common::CombineMessage& out = launch.rdma_message;
  uint8_t* const base = context.heap.base;
  reduce_bf16_rows(base, slots, count, in.row_offset(), in.row_bytes / 16,
                   reinterpret_cast<int4*>(out.row(partial_slot)));
  if (out.has_weights) {
    const int topk = static_cast<int>(out.topk);
    for (int k = lane_id(); k < topk; k += 32) {
      float sum = 0.0f;
      for (int i = 0; i < count; ++i) sum += in.topk_weights(base + size_t{slots[i]} * 16)[k];
      out.topk_weights(partial_slot)[k] = sum;
    }
  }
}

// Token `j` of the round in `buffer`: its rows reduced into RDMA send slot `sequence`.
__device__ __forceinline__ void reduce_round_token(const KernelContext& context,
                                                   const InternodeCombineLaunch& launch,
                                                   ForwarderShared& shared, int channel, int home_node,
                                                   int buffer, int j, uint64_t sequence) {
  const InternodeShape& shape = launch.shape;
  uint32_t* slots = shared.token_slots[threadIdx.x / 32];
  const int count = token_slots(context, channel, home_node, shape.num_nodes, shared.masks[buffer][home_node],
                                shared.stream_start[buffer] + home_node * shape.ranks_per_node, j, slots);
  reduce_node_partial(context, launch, slots, count,
                      context.heap.base + shape.rdma.send_slot_offset(channel, home_node, sequence));
}

// The coordinator's puts of one round's partials (RDMA send slots [first, first + count)) to the
// home rank, the last with the recv_tail add, then a flush: the slots may be rewritten after it.
template <typename Transport>
__device__ void put_round(transport::WarpSession<Transport>& session, const InternodeShape& shape,
                          int channel, int home, int home_node, int my_node, uint64_t first, uint64_t count) {
  const common::InternodeHeapLayout& rdma = shape.rdma;
  const uint64_t end = first + count;
  for (uint64_t sequence = first; sequence < end;) {
    const uint64_t run =
        min(end - sequence, static_cast<uint64_t>(rdma.rdma_slots) - rdma.slot_index(sequence));
    const size_t destination = rdma.recv_slot_offset(channel, my_node, sequence);
    const size_t source = rdma.send_slot_offset(channel, home_node, sequence);
    const size_t bytes = run * rdma.rdma_slot_bytes;
    if (sequence + run == end) {
      session.put_signal(home, destination, source, bytes,
                         rdma_signal(rdma, channel, my_node, RdmaSignal::recv_tail), count);
    } else {
      session.put(home, destination, source, bytes);
    }
    sequence += run;
  }
  session.flush();
}

// Lane l < P frees the rows of the stream from local rank l before `cursor`: the senders may reuse them.
__device__ __forceinline__ void free_stream_rows(const KernelContext& context, const InternodeShape& shape,
                                                 int channel, int home_node, uint64_t cursor) {
  const int lane = lane_id();
  if (lane < shape.ranks_per_node) {
    const common::Ring ring = context.layout.ring(
        context.heap.base, channel, common::combine_ring_index(lane, home_node, shape.num_nodes));
    common::st_release_sys(ring.head(), cursor);
  }
  __syncwarp();
}

// The control state of a forwarder group: the transport session (puts, and the space waits) and the
// merge's cursors (lane l: the stream from local rank l).
template <typename Transport>
struct ForwarderControl {
  transport::WarpSession<Transport> session;
  int home;  // the home rank of the group's node with our local index
  int my_node;
  int home_node;
  uint64_t cursor = 0;
  uint64_t known_tail = 0;
  bool exhausted = false;

  __device__ __forceinline__ ForwarderControl(const KernelContext& context,
                                              const InternodeTransports<Transport>& transports,
                                              const InternodeShape& shape, int channel, int home_node_,
                                              uint32_t session_kind)
      : session(transports.rdma, context.heap,
                static_cast<uint32_t>((session_kind * context.num_channels + channel) * shape.num_nodes +
                                      home_node_)),
        home(common::rdma_peer(context.rank, home_node_, shape.ranks_per_node)),
        my_node(context.rank / shape.ranks_per_node),
        home_node(home_node_) {}

  // Waits for `round_max` free RDMA send slots after `staged`, then merges a round into `buffer`'s
  // tables and publishes it to the group (read after the group's next sync). Returns false in every
  // lane when a wait failed (the round's abort flag is set).
  __device__ bool merge(const KernelContext& context, const InternodeCombineLaunch& launch,
                        ForwarderShared& shared, int channel, uint32_t round_max, int buffer,
                        uint64_t staged) {
    const InternodeShape& shape = launch.shape;
    const uint64_t slots = shape.rdma.rdma_slots;
    const WaitSite space_site{common::WaitRole::internode_combine_coordinator, common::WaitTarget::ring_space,
                              channel, home};
    const bool ok =
        staged + round_max <= slots ||
        session.wait_signal(context, rdma_signal(shape.rdma, channel, home_node, RdmaSignal::send_head),
                            staged + round_max - slots, space_site);
    const int lane = lane_id();
    publish_cursor(shared, shape, buffer);
    const int count = ok ? merge_round(context, launch, channel, home_node, round_max, cursor, known_tail,
                                       exhausted, shared.masks[buffer][home_node])
                         : -1;
    const bool all_exhausted = __all_sync(0xffffffffu, exhausted || lane >= shape.ranks_per_node);
    if (lane == 0) {
      shared.abort[buffer][home_node] = count < 0 ? 1 : 0;
      shared.count[buffer][home_node] = count;
      shared.done[buffer][home_node] = all_exhausted ? 1 : 0;
    }
    return count >= 0;
  }

  // Lane l: where stream l stands, for the round in `buffer` (its first row) or for freeing rows.
  __device__ __forceinline__ void publish_cursor(ForwarderShared& shared, const InternodeShape& shape,
                                                 int buffer) {
    const int lane = lane_id();
    if (lane < shape.ranks_per_node)
      shared.stream_start[buffer][home_node * shape.ranks_per_node + lane] = cursor;
  }

  // Frees the rows of every stream before its start in `buffer` (lane l reads stream l's).
  __device__ __forceinline__ void free_rows_before(const KernelContext& context,
                                                   const ForwarderShared& shared, const InternodeShape& shape,
                                                   int channel, int buffer) {
    const int lane = lane_id();
    const uint64_t before = lane < shape.ranks_per_node
                                ? shared.stream_start[buffer][home_node * shape.ranks_per_node + lane]
                                : 0;
    free_stream_rows(context, shape, channel, home_node, before);
  }

  __device__ __forceinline__ void put(const InternodeShape& shape, int channel, uint64_t first,
                                      uint64_t count) {
    if (count > 0) put_round(session, shape, channel, home, home_node, my_node, first, count);
  }

  // After the last put: the partial count for the home's check, then every slot freed (no free of
  // this call may land after the next call's reset).
  __device__ void finish(const KernelContext& context, const InternodeShape& shape, int channel,
                         uint64_t staged) {
    const common::InternodeHeapLayout& rdma = shape.rdma;
    session.signal(home, rdma_signal(rdma, channel, my_node, RdmaSignal::recv_total), staged + 1);
    const WaitSite space_site{common::WaitRole::internode_combine_coordinator, common::WaitTarget::ring_space,
                              channel, home};
    if (staged > 0)
      session.wait_signal(context, rdma_signal(rdma, channel, home_node, RdmaSignal::send_head), staged,
                          space_site);
  }
};

// Which warps of a pipelined group do what: warp 0 merges; with three warps or more warp 1 puts (so
// that neither single-warp chain waits for the other), else warp 0 puts too; the rest reduce.
struct PipelinedRoles {
  bool merges;
  bool puts;
  int reducer;   // index among the reducers, or -1
  int reducers;  // how many

  __device__ __forceinline__ static PipelinedRoles of(const WarpGroup& group) {
    const int controllers = group.size >= 3 ? 2 : 1;
    const int w = group.warp_in_group;
    return PipelinedRoles{w == 0, controllers == 2 ? w == 1 : w == 0, w >= controllers ? w - controllers : -1,
                          group.size - controllers};
  }
};

// Pipelined, the merging and putting warps. Round r: the merger merges it; at the group's meeting
// the reducers (done with round r - 1) take it, and the putter puts round r - 1 and frees its rows.
template <typename Transport>
__device__ void pipelined_control(const KernelContext& context,
                                  const InternodeTransports<Transport>& transports,
                                  const InternodeCombineLaunch& launch, ForwarderShared& shared, int channel,
                                  const WarpGroup& group, uint32_t round_max, PipelinedRoles roles) {
  const InternodeShape& shape = launch.shape;
  const int home_node = group.index;
  // Distinct sessions for the two warps: a session belongs to one warp (device_transport.cuh).
  ForwarderControl<Transport> control(context, transports, shape, channel, home_node, roles.puts ? 0u : 2u);
  uint64_t staged = 0;  // RDMA sequence of the next round's first partial
  uint64_t unput_first = 0;
  uint64_t unput_count = 0;  // the previous round's partials: reduced by the next meeting, not put yet
  int buffer = 0;
  for (int round = 0;; ++round) {
    buffer = round & 1;
    if (roles.merges) control.merge(context, launch, shared, channel, round_max, buffer, staged);
    group.sync();
    if (shared.abort[buffer][home_node]) return;
    const uint64_t count = static_cast<uint64_t>(shared.count[buffer][home_node]);
    const bool done = shared.done[buffer][home_node] != 0;
    if (roles.puts) {
      // The rows of the rounds before this one are reduced: free them first, for the merger's next round.
      control.free_rows_before(context, shared, shape, channel, buffer);
      control.put(shape, channel, unput_first, unput_count);
    }
    unput_first = staged;
    unput_count = count;
    staged += count;
    if (done) break;
  }
  // The other buffer was last read before this round's meeting: it takes the final cursors.
  if (roles.merges) control.publish_cursor(shared, shape, buffer ^ 1);
  group.sync();  // the reducers finished the last round
  if (roles.puts) {
    control.free_rows_before(context, shared, shape, channel, buffer ^ 1);
    control.put(shape, channel, unput_first, unput_count);
    control.finish(context, shape, channel, staged);
  }
}

// Pipelined, the reducing warps: each round's tokens j = reducer, reducer + reducers, ...
__device__ void pipelined_reducer(const KernelContext& context, const InternodeCombineLaunch& launch,
                                  ForwarderShared& shared, int channel, const WarpGroup& group,
                                  PipelinedRoles roles) {
  const int home_node = group.index;
  uint64_t staged = 0;
  for (int round = 0;; ++round) {
    group.sync();
    const int buffer = round & 1;
    if (shared.abort[buffer][home_node]) return;
    const int count = shared.count[buffer][home_node];
    const bool done = shared.done[buffer][home_node] != 0;
    for (int j = roles.reducer; j < count; j += roles.reducers) {
      reduce_round_token(context, launch, shared, channel, home_node, buffer, j, staged + j);
    }
    staged += static_cast<uint64_t>(count);
    if (done) {
      group.sync();  // tells the putter the last round is reduced
      return;
    }
  }
}

// Serial: the coordinator merges, every warp of the group reduces, then the coordinator puts.
template <typename Transport>
__device__ void serial_forwarder(const KernelContext& context,
                                 const InternodeTransports<Transport>& transports,
                                 const InternodeCombineLaunch& launch, ForwarderShared& shared, int channel,
                                 const WarpGroup& group, uint32_t round_max) {
  const InternodeShape& shape = launch.shape;
  const int home_node = group.index;
  const bool is_coordinator = group.warp_in_group == 0;
  ForwarderControl<Transport> control(context, transports, shape, channel, home_node, 0u);
  uint64_t staged = 0;
  for (;;) {
    if (is_coordinator) control.merge(context, launch, shared, channel, round_max, 0, staged);
    group.sync();
    if (shared.abort[0][home_node]) return;
    // Read now: the coordinator rewrites these in the next round, after the group.sync below.
    const int count = shared.count[0][home_node];
    const bool done = shared.done[0][home_node] != 0;
    for (int j = group.warp_in_group; j < count; j += group.size) {
      reduce_round_token(context, launch, shared, channel, home_node, 0, j, staged + j);
    }
    group.sync();
    if (is_coordinator) {
      control.put(shape, channel, staged, static_cast<uint64_t>(count));
      free_stream_rows(context, shape, channel, home_node, control.cursor);
    }
    staged += static_cast<uint64_t>(count);  // every warp tracks it: the next round's slots
    if (done) break;
  }
  if (is_coordinator) control.finish(context, shape, channel, staged);
}

// Role 1: the forwarder group of one home node (its rank with our local index).
template <typename Transport>
__device__ void combine_forwarder(const KernelContext& context,
                                  const InternodeTransports<Transport>& transports,
                                  const InternodeCombineLaunch& launch, ForwarderShared& shared, int channel,
                                  const WarpGroup& group) {
  const CombineRounds rounds = combine_rounds(context, launch.shape);
  if (!rounds.pipelined) {
    serial_forwarder(context, transports, launch, shared, channel, group, rounds.tokens);
    return;
  }
  const PipelinedRoles roles = PipelinedRoles::of(group);
  if (roles.reducer >= 0) {
    pipelined_reducer(context, launch, shared, channel, group, roles);
  } else {
    pipelined_control(context, transports, launch, shared, channel, group, rounds.tokens, roles);
  }
}

}  // namespace switchyard::cuda
