// The cached dispatch in place (docs/normal-in-place.md, "The cached dispatch"): the handle already
// holds the receive order, so the whole grid pulls rows from the sources' heaps, a warp per row, with no
// sender and no ring. The same SMs as the ring dispatch (two blocks per channel), all of them pulling.
#include "cuda/backend/kernel_preload.hpp"
#include "cuda/normal/kernels.hpp"
#include "device/bounded_wait.cuh"
#include "device/cuda_check.hpp"
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

// The source of receive row `row`: ranges of (source, channel) lie source by source in the receive
// order, so it is the last source whose first range starts at or before it.
__device__ __forceinline__ int source_of_row(const int32_t* recv_channel_start, int num_ranks,
                                             int num_channels, int64_t row) {
  int low = 0, high = num_ranks - 1;
  while (low < high) {
    const int middle = (low + high + 1) / 2;
    if (recv_channel_start[middle * num_channels] <= row) {
      low = middle;
    } else {
      high = middle - 1;
    }
  }
  return low;
}

// Gather role: every warp of the grid takes rows warp_index, warp_index + warps, ... of the receive
// order and copies each from its source's heap.
__device__ void gather_rows(const KernelContext& context, const CachedGatherLaunch& launch, int64_t received,
                            StagedRowCopy& row_copy) {
  const int lane = lane_id();
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x / 32);
  const int64_t warp_index = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  // The sources wrote their x with generic-proxy stores before the opening barrier; the bulk loads below
  // read it through the async proxy.
  ptx::fence_proxy_async_global();
  for (int64_t row = warp_index; row < received; row += warps) {
    const int source = source_of_row(launch.recv_channel_start, context.num_ranks, context.num_channels, row);
    const int64_t token = launch.cached_recv_src_token[row];
    // The handle is this Buffer's own, but a read outside the source's input would copy whatever the
    // heap holds there: recorded as the receiver's failure, and not read.
    if (token < 0 || token >= launch.input.max_tokens) {
      if (lane == 0) {
        const WaitSite site{common::WaitRole::dispatch_receiver, common::WaitTarget::source_row, -1, source};
        record_wait_failure(context, site, launch.input.max_tokens, token, 0, /*abort_rank=*/false);
      }
      continue;
    }
    const uint8_t* heap = context.heap.peer_base(source);
    row_copy.copy(launch.recv_x + row * launch.row_bytes,
                  heap + launch.input.x_offset() + token * launch.row_bytes, launch.row_bytes);
    const float* scales =
        reinterpret_cast<const float*>(heap + launch.input.scales_offset()) + token * launch.num_scales;
    for (uint32_t i = lane; launch.recv_x_scales != nullptr && i < launch.num_scales; i += 32) {
      launch.recv_x_scales[row * launch.num_scales + i] = scales[i];
    }
    if (lane == 0) launch.recv_src_token[row] = static_cast<int32_t>(token);
  }
  if (lane == 0) ptx::tma_store_wait_all();
}

__global__ void cached_gather_kernel(KernelContext context, CachedGatherLaunch launch) {
  extern __shared__ __align__(128) uint8_t dynamic_shared[];
  __shared__ uint64_t tma_barrier[kGatherWarps];
  // The opening found the ranks' calls mismatched (or a peer failed): nothing to pull that anyone expects.
  if (rank_aborted(context)) return;
  const int64_t received = launch.recv_channel_start[context.num_ranks * context.num_channels];
  if (received > launch.num_output_rows) {
    // Worst-case outputs too small: write nothing (the ring dispatch refuses the same way).
    if (threadIdx.x == 0 && blockIdx.x == 0) {
      const WaitSite site{common::WaitRole::dispatch_receiver, common::WaitTarget::capacity, -1, -1};
      record_wait_failure(context, site, launch.num_output_rows, received, 0);
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
  // Worst-case mode: rows past the received ones come from nowhere.
  for (int64_t row = received + static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       row < launch.num_output_rows; row += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    launch.recv_src_token[row] = -1;
  }
}

}  // namespace

void prepare_cached_gather_kernel() {
  preload_kernel(cached_gather_kernel);
  SY_CUDA_CHECK(cudaFuncSetAttribute(cached_gather_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(kStagingBudgetBytes)));
}

void launch_cached_gather(const KernelContext& context, const CachedGatherLaunch& launch,
                          cudaStream_t stream) {
  // The ring dispatch's grid (two blocks per channel), so the tuning's SM count holds for both.
  const size_t shared_bytes =
      static_cast<size_t>(kGatherWarps) * gather_staging_bytes(launch.row_bytes, kGatherWarps);
  cached_gather_kernel<<<2 * context.num_channels, kGatherWarps * 32, shared_bytes, stream>>>(context,
                                                                                              launch);
  SY_CUDA_CHECK_LAUNCH();
}

}  // namespace switchyard::cuda
