#include "row_copy.hpp"

namespace switchyard::peer_probe {
namespace {

// The engine's pull depth (cuda/symmetric/dispatch_kernel.cu, pull_copier): 8 vectors per lane.
constexpr int kDepth = 8;

// Plain (coherent) loads: the engine's rows are written during its kernel, so it cannot use the
// non-coherent path, and neither does the probe that stands for it.
__global__ void copy_rows(RowCopyJob job) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x / 32);
  const int64_t first = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  const int vectors = static_cast<int>(job.row_bytes / 16);
  for (int64_t row = first; row < job.rows; row += warps) {
    const uint8_t* source = nullptr;
    if (job.from != nullptr) {
      source = job.from[row];
    } else {
      const int2 route = job.routes[row];
      source = job.owners[route.x] + static_cast<int64_t>(route.y) * job.row_bytes;
    }
    const int4* in = reinterpret_cast<const int4*>(source);
    int4* out = reinterpret_cast<int4*>(job.to[row]);
    for (int at = lane; at < vectors; at += 32 * kDepth) {
      int4 values[kDepth];
#pragma unroll
      for (int u = 0; u < kDepth; ++u) {
        if (at + 32 * u < vectors) values[u] = in[at + 32 * u];
      }
#pragma unroll
      for (int u = 0; u < kDepth; ++u) {
        if (at + 32 * u < vectors) out[at + 32 * u] = values[u];
      }
    }
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
