// Staged inputs (core/staged_heap_input.hpp): DeepEP's column-major fp8 scales transposed into the heap
// input's row-major view before a dispatch that reads them in place.
#include "cuda/backend/dependent_launch.hpp"
#include "cuda/backend/kernel_preload.hpp"
#include "cuda/normal/kernels.hpp"
#include "device/cuda_check.hpp"
#include "device/ptx.cuh"

namespace switchyard::cuda {

namespace {

constexpr int kStageThreads = 256;
// NOTES: a few MB at most (N x H / 128 floats): one pass, each thread a row-major destination word, so the
// stores are coalesced and the strided loads come from L2.
constexpr int kMaxStageBlocks = 1024;

__global__ void transpose_scales_kernel(float* rows, const float* columns, common::ScalesLayout layout) {
  ptx::wait_for_previous_grid();  // launched by launch_dependent: before any global access
  const int64_t total = layout.num_tokens * static_cast<int64_t>(layout.num_scales);
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t token = i / layout.num_scales;
    const uint32_t block = static_cast<uint32_t>(i % layout.num_scales);
    rows[i] = columns[layout.index(token, block)];
  }
}

}  // namespace

void prepare_stage_kernel() {
  preload_kernel(transpose_scales_kernel);
}

void launch_transpose_scales(float* rows, const float* columns, const common::ScalesLayout& layout,
                             cudaStream_t stream) {
  const int64_t total = layout.num_tokens * static_cast<int64_t>(layout.num_scales);
  if (total == 0) return;
  const int64_t wanted = (total + kStageThreads - 1) / kStageThreads;
  const int blocks = static_cast<int>(wanted < kMaxStageBlocks ? wanted : kMaxStageBlocks);
  launch_dependent(transpose_scales_kernel, blocks, kStageThreads, 0, stream, rows, columns, layout);
}

}  // namespace switchyard::cuda
