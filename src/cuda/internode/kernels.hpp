#pragma once
// The CUDA hierarchical (across nodes) `normal` engine: its message types, the launch arguments of
// its kernels and their host-side launchers. Protocol and roles follow common/internode_protocol.hpp
// and the CPU engine (cpu/internode_*_roles, cpu/rdma_coordinator); DESIGN.md, Nodes.
//
// Per channel, three blocks:
//   dispatch: [RDMA senders + coordinators] [forwarders] [NVLink receivers]
//   combine:  [NVLink senders] [forwarders + coordinators] [RDMA receivers]
// Across nodes only the device transport is used (put, put_signal, signal, wait on our own
// signals); within a node, loads and stores through the SymHeap.
//
// Combine needs no state from dispatch beyond the ordinary handle: every row an NVLink sender
// pushes to a forwarder carries its source token, the streams are sorted by it, and each ends in a
// sentinel, so the forwarder merges its node's streams token by token (the ranks holding the
// smallest pending token are exactly the ones that received it).
#include <cuda_runtime.h>

#include "common/internode_protocol.hpp"
#include "common/normal_protocol.hpp"
#include "common/scales_layout.hpp"
#include "device/kernel_context.hpp"

namespace switchyard::cuda {

// NOTES: one warp per source rank in the NVLink roles, at most 16 warps per block so that two blocks
// fit per SM (registers): more ranks than this are refused across nodes.
constexpr int kMaxInternodeRanks = 16;
constexpr int kInternodeWarps = 16;
// Tokens a forwarder handles per round (its shared-memory tables are this long).
constexpr int kMaxForwardRound = 32;

// A row on its way from an expert rank to its node's forwarder during combine: the intranode
// CombineMessage plus the row's source token (-1: the stream's end).
struct NvlCombineMessage {
  uint32_t row_bytes;  // hidden * 2 (bf16)
  uint32_t topk;
  uint32_t has_weights;

  SY_HD size_t row_offset() const { return 0; }
  SY_HD size_t topk_weights_offset() const { return common::align_up(row_bytes, common::kFieldAlignment); }
  SY_HD size_t src_token_offset() const {
    return topk_weights_offset() + (has_weights ? common::align_up(topk * 4u, common::kFieldAlignment) : 0);
  }
  SY_HD size_t bytes() const { return src_token_offset() + common::kFieldAlignment; }
  SY_HD uint8_t* row(uint8_t* slot) const { return slot + row_offset(); }
  SY_HD float* topk_weights(uint8_t* slot) const {
    return reinterpret_cast<float*>(slot + topk_weights_offset());
  }
  SY_HD int32_t* src_token(uint8_t* slot) const {
    return reinterpret_cast<int32_t*>(slot + src_token_offset());
  }
};

// Signal ids of one (channel, peer node) pair: RdmaCounters' three words, numbered in place (the
// loopback transport reads signal i at counters_offset() + i * kCounterStride).
enum class RdmaSignal : uint32_t { recv_tail = 0, recv_total = 1, send_head = 2 };
SY_HD uint32_t rdma_signal(const common::InternodeHeapLayout& layout, int channel, int node,
                           RdmaSignal which) {
  return 3u * static_cast<uint32_t>(layout.pair_index(channel, node)) + static_cast<uint32_t>(which);
}

// The transports of one call: `rdma` numbers the RDMA counters, `barrier` the barrier words (signal
// i is source rank i's word, NormalHeapLayout::barrier_word).
template <typename Transport>
struct InternodeTransports {
  Transport rdma;
  Transport barrier;
};

// What every hierarchical kernel reads about the topology and the RDMA region.
struct InternodeShape {
  common::InternodeHeapLayout rdma;
  int ranks_per_node;
  int num_nodes;
};

struct InternodeNotifyLaunch {
  InternodeShape shape;
  const bool* is_token_in_rank;  // [N, R]
  int64_t num_tokens;
  // Per destination node, its tokens in order, and where each channel starts in that list.
  int32_t* node_send_list;            // [nodes, N]
  int32_t* node_send_channel_prefix;  // [nodes, C + 1]
  // A fresh dispatch also exchanges counts (`fresh` = 1); a cached one or combine only opens the call.
  int fresh;
  const int64_t* topk_idx;  // [N, K]
  // [E]: without topk_idx (topk 0), the caller's per-expert counts (its layout), sent instead.
  const int32_t* num_tokens_per_expert;
  int topk, local_experts, expert_alignment;
  // Every call: the plan's signature, which the opening barrier compares across ranks; a cached dispatch or
  // a combine mixes in its handle's routing epoch (`routing_epoch`, on the device; null for none).
  uint64_t signature;
  const int64_t* routing_epoch;
  // A fresh dispatch: where its handle's routing epoch goes (the opening barrier's number).
  int64_t* new_routing_epoch;
  int32_t* recv_channel_start;  // [R * C + 1]
  int32_t* recv_expert_counts;  // [local_experts], aligned
  int32_t* recv_token_count;    // [1]
};

struct InternodeDispatchLaunch {
  InternodeShape shape;
  common::InternodeDispatchMessage rdma_message;
  common::DispatchMessage message;
  int local_experts;
  // Send side.
  const uint8_t* x;
  const float* x_scales;  // laid out as x_scales_layout says (row- or column-major), or null
  common::ScalesLayout x_scales_layout;
  const int64_t* topk_idx;
  const float* topk_weights;
  const bool* is_token_in_rank;
  int64_t num_tokens;
  const int32_t* node_send_list;
  const int32_t* node_send_channel_prefix;
  // Receive side.
  const int32_t* recv_channel_start;
  uint8_t* recv_x;
  float* recv_x_scales;
  int64_t* recv_topk_idx;
  float* recv_topk_weights;
  int32_t* recv_src_token;
  int64_t num_output_rows;
};

struct InternodeCombineLaunch {
  InternodeShape shape;
  NvlCombineMessage nvl_message;
  common::CombineMessage rdma_message;  // one node partial
  // Send side (expert rank).
  const uint8_t* y;
  const float* y_topk_weights;
  const int32_t* recv_channel_start;
  const int32_t* recv_src_token;
  // Receive side (home rank).
  int64_t num_tokens;
  const bool* is_token_in_rank;
  uint16_t* combined_x;
  float* combined_topk_weights;
  // bf16 [N, H] each, or null: where the home's sum over node partials starts (common/combine_bias.hpp).
  const uint16_t* bias0;
  const uint16_t* bias1;
};

// Resets this rank's rings and RDMA counters, lists each node's tokens per channel (when
// node_send_list is set), exchanges counts for a fresh dispatch, and meets every rank at a barrier
// (two for a fresh dispatch). One block.
template <typename Transport>
void launch_internode_notify(const KernelContext& context, const InternodeTransports<Transport>& transports,
                             const InternodeNotifyLaunch& launch, cudaStream_t stream);
template <typename Transport>
void launch_internode_dispatch(const KernelContext& context, const InternodeTransports<Transport>& transports,
                               const InternodeDispatchLaunch& launch, cudaStream_t stream);
template <typename Transport>
void launch_internode_combine(const KernelContext& context, const InternodeTransports<Transport>& transports,
                              const InternodeCombineLaunch& launch, cudaStream_t stream);

// Loads the engine's kernels into `device`'s context (the current device) and sets their
// attributes: once per device; idempotent, thread-safe. Returns the blocks per SM that the dispatch
// and combine kernels can keep resident (the smaller), for the co-residency check.
int prepare_internode_kernels(int device);
// Blocks per channel of the dispatch and combine kernels.
constexpr int kInternodeBlocksPerChannel = 3;
// Bytes of notify shared memory the call needs, and the most there is.
size_t internode_notify_shared_bytes(int num_ranks, int num_channels, int num_nodes, int num_experts);
size_t internode_notify_max_shared_bytes();

}  // namespace switchyard::cuda
