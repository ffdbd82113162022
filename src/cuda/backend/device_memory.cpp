// Device allocations for Tensor::empty, and whether a CUDA device is usable at all.
#include "core/device_memory.hpp"

#include <cuda_runtime.h>

#include "device/cuda_check.hpp"

namespace switchyard::detail {

namespace {

// While a stream is being captured in CUDA's global or thread-local mode (torch.cuda.graph's default is
// global), cudaMalloc and cudaFree are "unsafe" calls that CUDA refuses, and the refusal invalidates
// the capture. A captured call allocates its outputs with cudaMalloc (the graph then reuses them on
// every replay), so the allocation switches this thread to the relaxed mode for its duration, as
// cudaThreadExchangeStreamCaptureMode exists for.
class RelaxedCaptureMode {
 public:
  RelaxedCaptureMode() { ok_ = cudaThreadExchangeStreamCaptureMode(&mode_) == cudaSuccess; }
  ~RelaxedCaptureMode() {
    if (ok_) cudaThreadExchangeStreamCaptureMode(&mode_);
  }
  RelaxedCaptureMode(const RelaxedCaptureMode&) = delete;
  RelaxedCaptureMode& operator=(const RelaxedCaptureMode&) = delete;

 private:
  cudaStreamCaptureMode mode_ = cudaStreamCaptureModeRelaxed;  // the caller's, while swapped out
  bool ok_ = false;
};

}  // namespace

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
  cudaError_t status = cudaSuccess;
  if (stream_ordered) {
    status = cudaMallocAsync(&pointer, size, stream);
  } else {
    const RelaxedCaptureMode relaxed;
    status = cudaMalloc(&pointer, size);
  }
  cudaSetDevice(previous);
  SY_CUDA_CHECK(status);
  if (stream_ordered) {
    // cudaFree would synchronise the whole device: with ranks as threads spinning on each other,
    // that waits for a peer that waits for us.
    return std::shared_ptr<void>(pointer, [stream](void* p) { cudaFreeAsync(p, stream); });
  }
  return std::shared_ptr<void>(pointer, [](void* p) {
    const RelaxedCaptureMode relaxed;  // the tensor may die while some stream is being captured
    cudaFree(p);
  });
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
