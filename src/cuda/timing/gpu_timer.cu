#include "cuda/timing/gpu_timer.hpp"
#include "device/cuda_check.hpp"
#include "device/ptx.cuh"

namespace switchyard::cuda {

namespace {

__global__ void read_timer_kernel(uint64_t* now) {
  *now = ptx::globaltimer_ns();
}

__global__ void timer_wait_kernel(uint64_t until_ns, uint64_t limit_ns) {
  const uint64_t begin = ptx::globaltimer_ns();
  for (uint64_t now = begin; now < until_ns && now - begin < limit_ns;) {
    __nanosleep(200);
    now = ptx::globaltimer_ns();
  }
}

}  // namespace

uint64_t gpu_timer_now_ns() {
  cudaStream_t stream = nullptr;
  uint64_t* word = nullptr;
  SY_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  uint64_t now = 0;
  cudaError_t status = cudaMalloc(reinterpret_cast<void**>(&word), sizeof(uint64_t));
  if (status == cudaSuccess) {
    read_timer_kernel<<<1, 1, 0, stream>>>(word);
    status = cudaGetLastError();
    if (status == cudaSuccess)
      status = cudaMemcpyAsync(&now, word, sizeof(uint64_t), cudaMemcpyDeviceToHost, stream);
    if (status == cudaSuccess) status = cudaStreamSynchronize(stream);
    cudaFree(word);
  }
  cudaStreamDestroy(stream);
  SY_CUDA_CHECK(status);
  return now;
}

void enqueue_gpu_timer_wait(cudaStream_t stream, uint64_t until_ns, uint64_t limit_ns) {
  timer_wait_kernel<<<1, 1, 0, stream>>>(until_ns, limit_ns);
  SY_CUDA_CHECK_LAUNCH();
}

}  // namespace switchyard::cuda
