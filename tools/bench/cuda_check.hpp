#pragma once
// The bench's CUDA calls go through check_cuda: a failure becomes one SystemError naming the call and
// what it was for (main and the runner turn it into a one-line error and exit status 1). Compiled only
// when the library has the CUDA backend.
#if defined(SWITCHYARD_WITH_CUDA)
#include <cuda_runtime.h>

#include <string>

#include "switchyard/buffer.hpp"
#include "switchyard/errors.hpp"

namespace switchyard::bench {

inline void check_cuda(cudaError_t status, const std::string& what) {
  if (status == cudaSuccess) return;
  throw SystemError("switchyard-bench: " + what + " failed: " + cudaGetErrorName(status) + " (" +
                    cudaGetErrorString(status) + ")");
}

// The library's Stream is a cudaStream_t on the CUDA backend.
inline cudaStream_t cuda_stream(Stream stream) {
  return static_cast<cudaStream_t>(stream);
}

}  // namespace switchyard::bench
#endif
