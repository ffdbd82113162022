// Device allocations for Tensor::empty, and whether a CUDA device is usable at all.
#include "core/device_memory.hpp"

#include <cuda_runtime.h>

#include "device/cuda_check.hpp"

namespace switchyard::detail {

std::shared_ptr<void> allocate_cuda_bytes(size_t bytes, int device_index, void* stream_pointer) {
  int previous = 0;
  SY_CUDA_CHECK(cudaGetDevice(&previous));
  SY_CUDA_CHECK(cudaSetDevice(device_index));
  cudaStream_t stream = static_cast<cudaStream_t>(stream_pointer);
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  if (stream) {
    cudaError_t status = cudaStreamIsCapturing(stream, &capture);
    if (status != cudaSuccess) {
      cudaSetDevice(previous);
      SY_CUDA_CHECK(status);
    }
  }
  // NOTES: zero-byte tensors still get a distinct, valid pointer.
  const size_t size = bytes == 0 ? 256 : bytes;
  void* pointer = nullptr;
  const bool stream_ordered = stream && capture == cudaStreamCaptureStatusNone;
  cudaError_t status = stream_ordered ? cudaMallocAsync(&pointer, size, stream) : cudaMalloc(&pointer, size);
  cudaSetDevice(previous);
  SY_CUDA_CHECK(status);
  if (stream_ordered) {
    // cudaFree would synchronise the whole device: with ranks as threads spinning on each other,
    // that waits for a peer that waits for us.
    return std::shared_ptr<void>(pointer, [stream](void* p) { cudaFreeAsync(p, stream); });
  }
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
