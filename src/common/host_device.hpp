#pragma once
// Headers under src/common are read by both g++ and nvcc: layouts and arithmetic that the CPU and
// CUDA engines must agree on live here, once.
#if defined(__CUDACC__)
#define SY_HD __host__ __device__ __forceinline__
#define SY_DEVICE __device__ __forceinline__
#else
#define SY_HD inline
#endif

#include <cstddef>
#include <cstdint>

namespace switchyard::common {

SY_HD constexpr size_t align_up(size_t value, size_t alignment) {
  return (value + alignment - 1) / alignment * alignment;
}

SY_HD constexpr int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

}  // namespace switchyard::common
