#pragma once
// What an engine's call borrows from the CUDA backend besides the kernel context: the streams, how
// many ranks share the GPU, and the backend's report of errors that earlier kernels recorded.
#include <cuda_runtime.h>

#include <functional>

namespace switchyard::cuda {

struct CallEnv {
  cudaStream_t stream;
  cudaStream_t allocation_stream;  // stream-ordered allocations (nullptr: plain ones)
  int sharing_ranks;               // ranks whose blocks share this GPU
  std::function<void()> throw_pending_device_error;
};

}  // namespace switchyard::cuda
