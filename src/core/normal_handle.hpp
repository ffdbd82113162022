#pragma once
// The routing a `normal` dispatch leaves behind for combine and for cached dispatch.
#include <cstdint>
#include <memory>
#include <vector>

#include "common/internode_protocol.hpp"
#include "core/buffer_identity.hpp"
#include "switchyard/buffer.hpp"

namespace switchyard::detail {

struct NormalHandleData {
  BufferId owner = kNoBuffer;  // the Buffer that made it; every other Buffer refuses the handle
  int rank = 0;
  Topology topology;
  int num_channels = 0;
  int num_experts = 0;
  int expert_alignment = 1;
  int topk = 0;  // K of the dispatch (0 when dispatched without topk_idx)

  // Send side (this rank's tokens).
  int64_t num_tokens = 0;
  // bool [N, R], on the backend's device. The handle's own (computed here, or copied from the caller's
  // layout), never caller memory: combine and cached dispatches read it after the caller let go.
  Tensor is_token_in_rank;
  // A layout dispatch computed itself, kept whole: freeing device memory inside a CUDA graph
  // capture would invalidate the capture.
  DispatchLayout own_layout;

  // Receive side.
  int64_t num_recv_tokens = -1;  // host copy; -1 when the host never synchronised (worst case)
  int64_t num_worst_tokens = 0;  // > 0: outputs were padded to this many rows
  // Row range of (source rank s, channel c) in the receive order: rows
  // [recv_channel_start[s * C + c], recv_channel_start[s * C + c + 1]). i32 [R * C + 1].
  Tensor recv_channel_start;
  Tensor recv_src_token;                        // i32 [M]: the source token index of each received row
  std::vector<int> num_recv_tokens_per_expert;  // host copy, aligned; empty in worst case
  Tensor recv_expert_counts;                    // i32 [local_experts], aligned
  Tensor recv_token_count;                      // i32 [1]
  // i64 [1], on the backend's device: the number of the barrier that opened the dispatch that made this
  // routing, the same on every rank of that dispatch (one node; the hierarchical engines leave it 0). A
  // cached dispatch's handle shares its cached handle's. Mixed into the opening stamps of the cached
  // dispatches and combines that use the handle (common::routed_signature), so that ranks holding handles
  // of different dispatches are refused rather than combined.
  Tensor routing_epoch;

  // Send side, CUDA only (the CPU engine scans is_token_in_rank instead).
  Tensor send_list;            // i32 [R, N]: per destination, the tokens it gets, in order
  Tensor send_channel_prefix;  // i32 [R, C + 1]: where each channel starts in a destination's list
  Tensor send_slot;            // i32 [N, R]: ring index of token t within (its channel, destination), or -1
  // Send side, CUDA across nodes: per destination node, its tokens in order and where each channel
  // starts. Rewritten by every dispatch (cached ones too), never shared with the cached handle. Kept
  // here, not as call temporaries: a temporary freed when dispatch returns is freed at once during a
  // graph capture (plain cudaFree) while the captured kernels keep its address.
  Tensor node_send_list;            // i32 [nodes, N]
  Tensor node_send_channel_prefix;  // i32 [nodes, C + 1]

  // Across nodes, CPU: what this rank forwarded as the RDMA peer, per (channel c, source node n) at
  // [c * num_nodes + n]: the mask of its node's ranks that got each token, in order. Combine's
  // forwarder reduces the same tokens in the same order. Filled by every dispatch, cached or not.
  std::vector<std::vector<common::RankMask>> forwarded;
};

// A handle for `plan` with everything but the routing tensors filled in; a cached dispatch also
// gets its receive side (and the CUDA send-side lists) from the handle it replays.
std::shared_ptr<NormalHandleData> new_normal_handle(const struct DispatchPlan& plan, detail::BufferId owner);

}  // namespace switchyard::detail
