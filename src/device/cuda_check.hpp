#pragma once
// Every CUDA runtime call is checked; a failure becomes a SystemError naming the call and the site.
#include <cuda_runtime.h>

#include <string>

#include "switchyard/errors.hpp"

namespace switchyard::cuda {

[[noreturn]] inline void throw_cuda_error(cudaError_t status, const char* call, const char* file, int line) {
  throw SystemError(std::string(call) + " failed: " + cudaGetErrorName(status) + " (" +
                    cudaGetErrorString(status) + ") at " + file + ":" + std::to_string(line));
}

}  // namespace switchyard::cuda

#define SY_CUDA_CHECK(call)                                                        \
  do {                                                                             \
    cudaError_t sy_status_ = (call);                                               \
    if (sy_status_ != cudaSuccess) {                                               \
      ::switchyard::cuda::throw_cuda_error(sy_status_, #call, __FILE__, __LINE__); \
    }                                                                              \
  } while (0)

// After a kernel launch: launch-configuration errors surface here, not at the next sync.
#define SY_CUDA_CHECK_LAUNCH() SY_CUDA_CHECK(cudaGetLastError())
