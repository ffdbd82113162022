// Device allocations for Tensor::empty, and whether a CUDA device is usable at all.
#include "core/device_memory.hpp"

#include <cuda_runtime.h>

#include "cuda/cuda_check.hpp"

namespace switchyard::detail {

std::shared_ptr<void> allocate_cuda_bytes(size_t bytes, int device_index) {
  int previous = 0;
  SY_CUDA_CHECK(cudaGetDevice(&previous));
  SY_CUDA_CHECK(cudaSetDevice(device_index));
  void* pointer = nullptr;
  // NOTES: zero-byte tensors still get a distinct, valid pointer.
  cudaError_t status = cudaMalloc(&pointer, bytes == 0 ? 256 : bytes);
  cudaSetDevice(previous);
  SY_CUDA_CHECK(status);
  return std::shared_ptr<void>(pointer, [](void* p) { cudaFree(p); });
}

bool cuda_backend_available() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return count > 0;
}

}  // namespace switchyard::detail
