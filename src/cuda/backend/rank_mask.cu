// Device-side updates of the CUDA rank mask (cuda/backend/rank_mask.hpp).
#include "cuda/backend/rank_mask.hpp"
#include "device/cuda_check.hpp"

namespace switchyard::cuda {

namespace {

// value < 0: every word to 0; else word `rank` to `value`.
__global__ void write_rank_mask_kernel(int32_t* words, int num_ranks, int rank, int32_t value) {
  for (int i = threadIdx.x; i < num_ranks; i += blockDim.x) {
    if (value < 0) {
      words[i] = 0;
    } else if (i == rank) {
      words[i] = value;
    }
  }
}

// One word per rank, 1 where masked (a timed-out wait also stores 1).
__global__ void copy_rank_mask_kernel(const int32_t* words, int num_ranks, int32_t* out) {
  for (int i = threadIdx.x; i < num_ranks; i += blockDim.x) out[i] = words[i] != 0 ? 1 : 0;
}

}  // namespace

DeviceRankMask::DeviceRankMask(int num_ranks, int device) : num_ranks_(num_ranks), device_(device) {
  SY_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&words_), sizeof(int32_t) * num_ranks));
  SY_CUDA_CHECK(cudaMemset(words_, 0, sizeof(int32_t) * num_ranks));
  // The memset ran on the legacy stream, which the ranks' non-blocking streams do not wait for.
  SY_CUDA_CHECK(cudaDeviceSynchronize());
}

DeviceRankMask::~DeviceRankMask() {
  cudaSetDevice(device_);
  cudaFree(words_);
}

void DeviceRankMask::set(int rank, bool masked, cudaStream_t stream) {
  write_rank_mask_kernel<<<1, 32, 0, stream>>>(words_, num_ranks_, rank, masked ? 1 : 0);
  SY_CUDA_CHECK_LAUNCH();
}

void DeviceRankMask::clear(cudaStream_t stream) {
  write_rank_mask_kernel<<<1, 32, 0, stream>>>(words_, num_ranks_, /*rank=*/0, /*value=*/-1);
  SY_CUDA_CHECK_LAUNCH();
}

Tensor DeviceRankMask::snapshot(cudaStream_t stream, cudaStream_t allocation_stream) const {
  Tensor out = Tensor::empty(DType::i32, {num_ranks_}, Device::cuda, device_, allocation_stream);
  copy_rank_mask_kernel<<<1, 32, 0, stream>>>(words_, num_ranks_, out.as<int32_t>());
  SY_CUDA_CHECK_LAUNCH();
  return out;
}

}  // namespace switchyard::cuda
