#include <map>
#include <mutex>

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
  // Once per device and process, kept for the process's life: a stream of its own and a host-mapped word the
  // kernel writes (no allocation per read: cudaFree would wait for the whole device).
  struct Reader {
    cudaStream_t stream = nullptr;
    uint64_t* host_word = nullptr;
    uint64_t* device_word = nullptr;
  };
  static std::mutex mutex;
  static std::map<int, Reader> readers;
  int device = 0;
  SY_CUDA_CHECK(cudaGetDevice(&device));
  const std::lock_guard<std::mutex> lock(mutex);
  Reader& reader = readers[device];
  if (reader.stream == nullptr) {
    SY_CUDA_CHECK(cudaStreamCreateWithFlags(&reader.stream, cudaStreamNonBlocking));
    SY_CUDA_CHECK(
        cudaHostAlloc(reinterpret_cast<void**>(&reader.host_word), sizeof(uint64_t), cudaHostAllocMapped));
    SY_CUDA_CHECK(
        cudaHostGetDevicePointer(reinterpret_cast<void**>(&reader.device_word), reader.host_word, 0));
  }
  read_timer_kernel<<<1, 1, 0, reader.stream>>>(reader.device_word);
  SY_CUDA_CHECK_LAUNCH();
  SY_CUDA_CHECK(cudaStreamSynchronize(reader.stream));
  return *reinterpret_cast<volatile uint64_t*>(reader.host_word);
}

void enqueue_gpu_timer_wait(cudaStream_t stream, uint64_t until_ns, uint64_t limit_ns) {
  timer_wait_kernel<<<1, 1, 0, stream>>>(until_ns, limit_ns);
  SY_CUDA_CHECK_LAUNCH();
}

}  // namespace switchyard::cuda
