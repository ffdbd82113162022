#include "device/warp_copy.cuh"
#include "row_copy.hpp"

namespace switchyard::peer_probe {
namespace {

// The engine's pull copy (cuda/symmetric/dispatch_kernel.cu, pull_copier): device/warp_copy.cuh with plain
// (coherent) loads, since the engine's rows are written during its kernel, and 8 vectors per lane.
constexpr int kDepth = 8;

__global__ void copy_rows(RowCopyJob job) {
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x / 32);
  const int64_t first = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  for (int64_t row = first; row < job.rows; row += warps) {
    const uint8_t* source = nullptr;
    if (job.from != nullptr) {
      source = job.from[row];
    } else {
      const int2 route = job.routes[row];
      source = job.owners[route.x] + static_cast<int64_t>(route.y) * job.row_bytes;
    }
    cuda::warp_copy<cuda::CopyLoad::plain, kDepth>(job.to[row], source, job.row_bytes);
  }
}

}  // namespace

cudaError_t launch_row_copy(const RowCopyJob& job, int blocks, int threads, int shared_bytes,
                            cudaStream_t stream) {
  copy_rows<<<blocks, threads, static_cast<size_t>(shared_bytes), stream>>>(job);
  return cudaGetLastError();
}

cudaError_t set_row_copy_shared_bytes(int shared_bytes) {
  return cudaFuncSetAttribute(copy_rows, cudaFuncAttributeMaxDynamicSharedMemorySize, shared_bytes);
}

}  // namespace switchyard::peer_probe
