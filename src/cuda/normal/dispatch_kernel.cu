// The CUDA `normal` dispatch: per channel a sender block and a receiver block. In the sender, a
// group of warps per destination pushes that destination's tokens into its ring in the
// destination's heap; in the receiver, a group per source copies tokens out of our ring with TMA.
#include "cuda/backend/dependent_launch.hpp"
#include "cuda/backend/kernel_preload.hpp"
#include "cuda/normal/dispatch_stamps.cuh"
#include "cuda/normal/kernels.hpp"
#include "device/bounded_wait.cuh"
#include "device/cuda_check.hpp"
#include "device/staged_row_copy.cuh"
#include "device/warp_copy.cuh"
#include "device/warp_group.cuh"

namespace switchyard::cuda {

namespace {

// NOTES: 16 warps keep enough 16-byte accesses in flight per SM to saturate HBM; with R <= 8
// ranks, 16/R warps share each peer.
constexpr int kTargetWarps = 16;
constexpr int kMaxWarps = 32;
// Shared memory for the receivers' TMA staging, split evenly between warps.
constexpr uint32_t kStagingBudgetBytes = 192 * 1024;

struct DispatchShared {
  int group_abort[kMaxWarps];
  uint64_t tma_barrier[kMaxWarps];
};

__device__ __forceinline__ uint32_t staging_bytes_per_warp(uint32_t row_bytes, int warps) {
  uint32_t budget = kStagingBudgetBytes / warps / 16 * 16;
  uint32_t row = (row_bytes + 15) / 16 * 16;
  return row < budget ? row : budget;
}

// Writes token `token`'s message into `slot` as `destination` must see it: its local expert ids, or
// -1 with weight 0 for slots of other ranks.
__device__ __forceinline__ void write_message(const KernelContext& context, const DispatchLaunch& launch,
                                              int destination, int32_t token, uint8_t* slot) {
  const common::DispatchMessage& message = launch.message;
  // NOTES: through L1: a token goes to ~5 of 8 ranks, and the sender block's group for each of them reads
  // the same row at about the same time. Around L1 (CopyLoad::read_only) each group fetched it again:
  // the dispatch at 4096 tokens took 5-7 % longer (bench/NOTES.md, session 28, call 7).
  warp_copy<CopyLoad::read_only_shared_by_warps, 8>(
      message.row(slot), launch.x + static_cast<int64_t>(token) * message.row_bytes, message.row_bytes);
  const int lane = lane_id();
  for (uint32_t i = lane; i < message.num_scales; i += 32) {
    message.scales(slot)[i] = __ldg(launch.x_scales + launch.x_scales_layout.index(token, i));
  }
  const int topk = static_cast<int>(message.topk);
  for (int k = lane; k < topk; k += 32) {
    const int64_t local = common::local_expert_id(
        __ldg(launch.topk_idx + static_cast<int64_t>(token) * topk + k), destination, launch.local_experts);
    message.topk_idx(slot)[k] = static_cast<int32_t>(local);
    if (message.has_weights) {
      message.topk_weights(slot)[k] =
          local >= 0 ? __ldg(launch.topk_weights + static_cast<int64_t>(token) * topk + k) : 0.0f;
    }
  }
  if (lane == 0) *message.src_token(slot) = token;
}

// Sender role: a group of warps pushes this channel's tokens for one destination, a chunk per round:
// wait for room for the whole chunk, write it (slot i by warp i % G), then publish the tail.
__device__ void dispatch_sender(const KernelContext& context, const DispatchLaunch& launch,
                                DispatchShared& shared, int channel, const WarpGroup& group) {
  const int destination = group.index;
  const int num_channels = context.num_channels;
  const int32_t* prefix = launch.send_channel_prefix + destination * (num_channels + 1);
  const int32_t* tokens = launch.send_list + destination * launch.num_tokens + prefix[channel];
  const uint64_t total = static_cast<uint64_t>(prefix[channel + 1] - prefix[channel]);
  const common::Ring ring = context.layout.ring(context.heap.peer_base(destination), channel, context.rank);
  const uint64_t num_slots = ring.num_slots;
  const WaitSite site{common::WaitRole::dispatch_sender, common::WaitTarget::ring_space, channel,
                      destination};

  for (uint64_t round_begin = 0; round_begin < total; round_begin += context.chunk_tokens) {
    const uint64_t round_end = min(total, round_begin + context.chunk_tokens);
    if (group.leader()) {
      bool room = round_end <= num_slots || wait_at_least(context, ring.head(), round_end - num_slots, site);
      shared.group_abort[destination] = room ? 0 : 1;
    }
    group.sync();
    if (shared.group_abort[destination]) return;
    for (uint64_t i = round_begin + group.warp_in_group; i < round_end; i += group.size) {
      write_message(context, launch, destination, tokens[i], ring.slot(i));
    }
    group.sync();
    if (group.leader()) {
      fence_before_peer_signal(context);
      st_release_peer(context, ring.tail(), round_end);
    }
  }
}

// Copies one message out of `slot` into receive row `row`: the row by TMA through this warp's
// staging buffer (load, then store), the small fields by the lanes.
__device__ __forceinline__ void copy_out(const DispatchLaunch& launch, uint8_t* slot, int64_t row,
                                         StagedRowCopy& row_copy) {
  const common::DispatchMessage& message = launch.message;
  const int lane = lane_id();
  row_copy.copy(launch.received.recv_x + row * launch.row_bytes, message.row(slot), launch.row_bytes);
  for (uint32_t i = lane; i < launch.num_scales; i += 32) {
    launch.received.recv_x_scales[row * launch.num_scales + i] = message.scales(slot)[i];
  }
  const int topk = static_cast<int>(message.topk);
  for (int k = lane; k < topk; k += 32) {
    if (launch.received.recv_topk_idx)
      launch.received.recv_topk_idx[row * topk + k] = message.topk_idx(slot)[k];
    if (launch.received.recv_topk_weights)
      launch.received.recv_topk_weights[row * topk + k] = message.topk_weights(slot)[k];
  }
  if (lane == 0) launch.received.recv_src_token[row] = *message.src_token(slot);
  // The slot's small fields were read by the lanes; the row by the TMA load that lane 0 waited for.
  __syncwarp();
}

// Receiver role: a group of warps drains one source's ring on this channel, a chunk per round.
__device__ void dispatch_receiver(const KernelContext& context, const DispatchLaunch& launch,
                                  DispatchShared& shared, int channel, const WarpGroup& group,
                                  StagedRowCopy row_copy) {
  const int source = group.index;
  const int index = source * context.num_channels + channel;
  const int64_t first_row = launch.received.recv_channel_start[index];
  const uint64_t total = static_cast<uint64_t>(launch.received.recv_channel_start[index + 1] - first_row);
  const common::Ring ring = context.layout.ring(context.heap.base, channel, source);
  const WaitSite site{common::WaitRole::dispatch_receiver, common::WaitTarget::ring_data, channel, source};

  for (uint64_t round_begin = 0; round_begin < total; round_begin += context.chunk_tokens) {
    const uint64_t round_end = min(total, round_begin + context.chunk_tokens);
    if (group.leader())
      shared.group_abort[source] = wait_at_least(context, ring.tail(), round_end, site) ? 0 : 1;
    group.sync();
    if (shared.group_abort[source]) break;
    // The peer's generic-proxy stores, acquired through the tail, are read below by TMA (async proxy).
    ptx::fence_proxy_async_global();
    for (uint64_t i = round_begin + group.warp_in_group; i < round_end; i += group.size) {
      copy_out(launch, ring.slot(i), first_row + static_cast<int64_t>(i), row_copy);
    }
    group.sync();
    if (group.leader()) st_release_peer(context, ring.head(), round_end);
  }
  if (lane_id() == 0) ptx::tma_store_wait_all();
}

// Worst-case mode: rows past the received ones route nowhere.
__device__ void pad_worst_case_rows(const KernelContext& context, const DispatchLaunch& launch, int channel) {
  const int64_t received = launch.received.recv_channel_start[context.num_ranks * context.num_channels];
  const int topk = static_cast<int>(launch.message.topk);
  for (int64_t row = received + channel * static_cast<int64_t>(blockDim.x) + threadIdx.x;
       row < launch.received.num_output_rows;
       row += static_cast<int64_t>(blockDim.x) * context.num_channels) {
    launch.received.recv_src_token[row] = -1;
    for (int k = 0; k < topk; ++k) {
      if (launch.received.recv_topk_idx) launch.received.recv_topk_idx[row * topk + k] = -1;
      if (launch.received.recv_topk_weights) launch.received.recv_topk_weights[row * topk + k] = 0.0f;
    }
  }
}

__global__ void dispatch_kernel(KernelContext context, DispatchLaunch launch, int warps_per_group) {
  ptx::wait_for_previous_grid();  // launched by launch_dependent: before any global access
  extern __shared__ __align__(128) uint8_t dynamic_shared[];
  __shared__ DispatchShared shared;
  const int channel = blockIdx.x / 2;
  const bool is_sender = (blockIdx.x % 2) == 0;
  const WarpGroup group = warp_group_of_this_warp(warps_per_group);
  if (blockIdx.x == 0) stamp_dispatch(launch.stamps, kStampRowsStarted);
  // The opening found the ranks' calls mismatched (or a peer failed): a ring whose tail a peer's other call
  // advanced would otherwise be copied into recv_x before any wait noticed (found on the GPU, session 30).
  if (call_stopped(context)) return;
  const int64_t received = launch.received.recv_channel_start[context.num_ranks * context.num_channels];
  if (received > launch.received.num_output_rows) {
    // Worst-case outputs too small: write nothing; peers waiting on us time out and say so.
    if (threadIdx.x == 0 && blockIdx.x == 1) {
      WaitSite site{common::WaitRole::dispatch_receiver, common::WaitTarget::capacity, -1, -1};
      record_wait_failure(context, site, launch.received.num_output_rows, received, 0);
    }
    return;
  }
  if (is_sender) {
    dispatch_sender(context, launch, shared, channel, group);
    return;
  }
  const int warps = blockDim.x / 32;
  const uint32_t staging_bytes = staging_bytes_per_warp(launch.row_bytes, warps);
  if (lane_id() == 0) {
    ptx::mbarrier_init(&shared.tma_barrier[threadIdx.x / 32], 1);
    ptx::fence_mbarrier_init();
  }
  __syncwarp();
  const StagedRowCopy row_copy{dynamic_shared + static_cast<size_t>(threadIdx.x / 32) * staging_bytes,
                               staging_bytes, &shared.tma_barrier[threadIdx.x / 32], 0};
  dispatch_receiver(context, launch, shared, channel, group, row_copy);
  pad_worst_case_rows(context, launch, channel);
}

}  // namespace

int normal_warps_per_block(int num_ranks) {
  if (num_ranks >= kTargetWarps) return num_ranks;  // one warp per peer (at most kMaxWarps)
  return num_ranks * (kTargetWarps / num_ranks);
}

int normal_blocks_per_sm(int num_ranks, int row_bytes) {
  (void)num_ranks;
  (void)row_bytes;
  // NOTES: the receiver's staging takes most of an SM's shared memory, so one block per SM.
  return 1;
}

void prepare_dispatch_kernel() {
  preload_kernel(dispatch_kernel);
  SY_CUDA_CHECK(cudaFuncSetAttribute(dispatch_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(kStagingBudgetBytes)));
}

void launch_dispatch(const KernelContext& context, const DispatchLaunch& launch, cudaStream_t stream) {
  const int warps = normal_warps_per_block(context.num_ranks);
  const int warps_per_group = warps / context.num_ranks;
  uint32_t row = (launch.message.row_bytes + 15) / 16 * 16;
  uint32_t per_warp = kStagingBudgetBytes / warps / 16 * 16;
  const size_t shared_bytes = static_cast<size_t>(warps) * (row < per_warp ? row : per_warp);
  launch_dependent(dispatch_kernel, 2 * context.num_channels, warps * 32, shared_bytes, stream, context,
                   launch, warps_per_group);
}

}  // namespace switchyard::cuda
