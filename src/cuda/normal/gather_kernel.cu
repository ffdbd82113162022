// The `normal` dispatch in place (docs/normal-in-place.md): no sender and no ring. The whole grid pulls
// the received rows from the sources' heaps, a warp per row: the row and its scales by TMA through the
// warp's staging buffer, its routing (the source's topk_idx and weights, as this rank sees them) by the
// lanes. The same SMs as the ring dispatch (two blocks per channel), all of them pulling; the last block to
// finish holds the call's closing barrier.
#include "cuda/backend/dependent_launch.hpp"
#include "cuda/backend/kernel_preload.hpp"
#include "cuda/normal/dispatch_stamps.cuh"
#include "cuda/normal/kernels.hpp"
#include "device/bounded_wait.cuh"
#include "device/cuda_check.hpp"
#include "device/device_barrier.cuh"
#include "device/staged_row_copy.cuh"
#include "device/warp_group.cuh"

namespace switchyard::cuda {

namespace {

// NOTES: the ring dispatch's receiver staging budget (dispatch_kernel.cu): one block per SM, each warp
// staging a whole 14 KB row of DeepSeek-V3's hidden when 16 warps share it (two pieces of 12 KB).
constexpr uint32_t kStagingBudgetBytes = 192 * 1024;
// NOTES: 16 warps per SM keep enough bulk copies in flight to saturate HBM (the ring dispatch's figure);
// unlike the ring dispatch's, the gather's warps are not split by source, so their number does not
// depend on the ranks.
constexpr int kGatherWarps = 16;

__host__ __device__ __forceinline__ uint32_t gather_staging_bytes(uint32_t row_bytes, int warps) {
  const uint32_t budget = kStagingBudgetBytes / warps / 16 * 16;
  const uint32_t row = (row_bytes + 15) / 16 * 16;
  return row < budget ? row : budget;
}

// An index from a peer (or, by the handle, from this Buffer's own handle) that would send a read outside
// that peer's heap input: recorded as the receiver's failure, and nothing is read.
__device__ __forceinline__ bool index_in_input(const KernelContext& context, const GatherLaunch& launch,
                                               int64_t index, int source) {
  if (index >= 0 && index < launch.input.max_tokens) return true;
  if (lane_id() == 0) {
    const WaitSite site{common::WaitRole::dispatch_receiver, common::WaitTarget::source_row, -1, source};
    record_wait_failure(context, site, launch.input.max_tokens, index, 0);
  }
  return false;
}

// Row `row`'s routing as this rank sees it: its local expert ids, or -1 (weight 0) for other ranks' slots.
__device__ __forceinline__ void gather_routing(const KernelContext& context, const GatherLaunch& launch,
                                               const uint8_t* heap, int64_t token, int64_t row) {
  const int topk = launch.topk;
  const auto* topk_idx =
      reinterpret_cast<const int64_t*>(heap + launch.input.topk_idx_offset()) + token * topk;
  const auto* weights =
      reinterpret_cast<const float*>(heap + launch.input.topk_weights_offset()) + token * topk;
  for (int k = lane_id(); k < topk; k += 32) {
    const int64_t local = common::local_expert_id(topk_idx[k], context.rank, launch.local_experts);
    launch.received.recv_topk_idx[row * topk + k] = local;
    if (launch.received.recv_topk_weights)
      launch.received.recv_topk_weights[row * topk + k] = local >= 0 ? weights[k] : 0.0f;
  }
}

// Gather role: every warp of the grid takes rows warp_index, warp_index + warps, ... of the receive
// order and copies each, and its routing, from its source's heap.
__device__ void gather_rows(const KernelContext& context, const GatherLaunch& launch, int64_t received,
                            StagedRowCopy& row_copy) {
  const int lane = lane_id();
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x / 32);
  const int64_t warp_index = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  // The sources wrote their x (and routing) with generic-proxy stores before the barrier this call passed;
  // the bulk loads below read them through the async proxy.
  ptx::fence_proxy_async_global();
  for (int64_t row = warp_index; row < received; row += warps) {
    const int source = common::source_of_row(launch.received.recv_channel_start, context.num_ranks,
                                             context.num_channels, row);
    const uint8_t* heap = context.heap.peer_base(source);
    int64_t token;
    if (launch.cached_recv_src_token) {
      token = launch.cached_recv_src_token[row];
    } else {
      // Entry i of the source's send list for this rank is its i-th row here.
      const int64_t entry = row - launch.received.recv_channel_start[source * context.num_channels];
      if (!index_in_input(context, launch, entry, source)) continue;
      token = launch.input.send_list(heap, context.rank)[entry];
    }
    if (!index_in_input(context, launch, token, source)) continue;
    row_copy.copy(launch.received.recv_x + row * launch.row_bytes,
                  heap + launch.input.x_offset() + token * launch.row_bytes, launch.row_bytes);
    const float* scales =
        reinterpret_cast<const float*>(heap + launch.input.scales_offset()) + token * launch.num_scales;
    for (uint32_t i = lane; launch.received.recv_x_scales != nullptr && i < launch.num_scales; i += 32) {
      launch.received.recv_x_scales[row * launch.num_scales + i] = scales[i];
    }
    if (launch.topk > 0) gather_routing(context, launch, heap, token, row);
    if (lane == 0) launch.received.recv_src_token[row] = static_cast<int32_t>(token);
  }
  if (lane == 0) ptx::tma_store_wait_all();
}

// Worst-case mode: rows past the received ones come from nowhere and route nowhere.
__device__ void pad_worst_case_rows(const GatherLaunch& launch, int64_t received) {
  const int64_t threads = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t row = received + static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       row < launch.received.num_output_rows; row += threads) {
    launch.received.recv_src_token[row] = -1;
    for (int k = 0; k < launch.topk; ++k) {
      if (launch.received.recv_topk_idx) launch.received.recv_topk_idx[row * launch.topk + k] = -1;
      if (launch.received.recv_topk_weights) launch.received.recv_topk_weights[row * launch.topk + k] = 0.0f;
    }
  }
}

// The block's share of the call: its rows, and in worst-case mode its padding rows.
__device__ void gather_block(const KernelContext& context, const GatherLaunch& launch,
                             uint8_t* dynamic_shared, uint64_t* tma_barrier) {
  // The opening found the ranks' calls mismatched (or a peer failed): nothing to pull that anyone expects.
  // Withdrawn: this rank's host failed after the counts; only the closing barrier is wanted of it.
  if (call_stopped(context) || launch.withdrawn) return;
  const int64_t received = launch.received.recv_channel_start[context.num_ranks * context.num_channels];
  if (received > launch.received.num_output_rows) {
    // Worst-case outputs too small: write nothing (the ring dispatch refuses the same way).
    if (threadIdx.x == 0 && blockIdx.x == 0) {
      const WaitSite site{common::WaitRole::dispatch_receiver, common::WaitTarget::capacity, -1, -1};
      record_wait_failure(context, site, launch.received.num_output_rows, received, 0);
    }
    return;
  }
  const int warp = threadIdx.x / 32;
  const uint32_t staging_bytes = gather_staging_bytes(launch.row_bytes, blockDim.x / 32);
  if (lane_id() == 0) {
    ptx::mbarrier_init(&tma_barrier[warp], 1);
    ptx::fence_mbarrier_init();
  }
  __syncwarp();
  StagedRowCopy row_copy{dynamic_shared + static_cast<size_t>(warp) * staging_bytes, staging_bytes,
                         &tma_barrier[warp], 0};
  gather_rows(context, launch, received, row_copy);
  pad_worst_case_rows(launch, received);
}

__global__ void gather_kernel(KernelContext context, GatherLaunch launch) {
  ptx::wait_for_previous_grid();  // launched by launch_dependent: before any global access
  extern __shared__ __align__(128) uint8_t dynamic_shared[];
  __shared__ uint64_t tma_barrier[kGatherWarps];
  if (blockIdx.x == 0) stamp_dispatch(launch.stamps, kStampRowsStarted);
  gather_block(context, launch, dynamic_shared, tma_barrier);
  // Rows read in place: every peer is done reading this rank's input before the caller's next write to it.
  close_call_by_last_block(context, launch.blocks_done);
}

}  // namespace

void prepare_gather_kernel() {
  preload_kernel(gather_kernel);
  SY_CUDA_CHECK(cudaFuncSetAttribute(gather_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(kStagingBudgetBytes)));
}

void launch_gather(const KernelContext& context, const GatherLaunch& launch, cudaStream_t stream) {
  // The ring dispatch's grid (two blocks per channel), so the tuning's SM count holds for both.
  const size_t shared_bytes =
      static_cast<size_t>(kGatherWarps) * gather_staging_bytes(launch.row_bytes, kGatherWarps);
  launch_dependent(gather_kernel, 2 * context.num_channels, kGatherWarps * 32, shared_bytes, stream, context,
                   launch);
}

}  // namespace switchyard::cuda
