#include <stdexcept>
#include <string>

#include "cuda/late_writer.hpp"
#include "device/ptx.cuh"

namespace switchyard::testing {
namespace {

__global__ void late_copy_kernel(uint8_t* destination, const uint8_t* source, size_t bytes,
                                 uint64_t delay_ns) {
  // The dependent grid may start now: only its wait for this grid stands between it and the inputs.
  cuda::ptx::allow_dependents_to_start();
  const uint64_t begin = cuda::ptx::globaltimer_ns();
  while (cuda::ptx::globaltimer_ns() - begin < delay_ns) __nanosleep(1000);
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < bytes;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    destination[i] = source[i];
  }
}

}  // namespace

void enqueue_late_copy(void* destination, const void* source, size_t bytes, uint64_t delay_ns,
                       cudaStream_t stream) {
  late_copy_kernel<<<8, 256, 0, stream>>>(static_cast<uint8_t*>(destination),
                                          static_cast<const uint8_t*>(source), bytes, delay_ns);
  const cudaError_t launched = cudaGetLastError();
  if (launched != cudaSuccess) {
    throw std::runtime_error(std::string("late_copy_kernel: ") + cudaGetErrorString(launched));
  }
}

}  // namespace switchyard::testing
