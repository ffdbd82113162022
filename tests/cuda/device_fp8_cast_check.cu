// The device toolkit's hardware fp8 cast against the shared software cast (common::float_to_fp8_e4m3,
// which the CPU engines and the reference use), on every float.
#include "common/numeric.hpp"
#include "cuda/device_fp8_cast_check.hpp"
#include "device/fp8_cast.cuh"

namespace switchyard::testing {

namespace {

// Each thread casts pairs (bits, bits + 1): the first in the low byte, so a swapped pair shows.
__global__ void compare_casts(unsigned long long* mismatches, unsigned int* first_mismatch) {
  const uint64_t pairs = uint64_t{1} << 31;
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  for (uint64_t pair = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; pair < pairs;
       pair += stride) {
    const uint32_t bits = static_cast<uint32_t>(pair * 2);
    const float low = common::bits_to_float(bits);
    const float high = common::bits_to_float(bits + 1);
    const uint32_t hardware = cuda::fp8x2_e4m3(low, high);
    const uint32_t software = static_cast<uint32_t>(common::float_to_fp8_e4m3(low)) |
                              (static_cast<uint32_t>(common::float_to_fp8_e4m3(high)) << 8);
    if (hardware != software) {
      atomicAdd(mismatches, 1ull);
      const uint32_t wrong = (hardware & 0xffu) != (software & 0xffu) ? bits : bits + 1;
      atomicMin(first_mismatch, wrong);
    }
  }
}

}  // namespace

Fp8CastMismatches count_device_fp8_cast_mismatches() {
  unsigned long long* mismatches = nullptr;
  unsigned int* first_mismatch = nullptr;
  auto check = [](cudaError_t status, const char* what) {
    if (status != cudaSuccess)
      throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(status));
  };
  check(cudaMalloc(&mismatches, sizeof(*mismatches)), "cudaMalloc");
  check(cudaMalloc(&first_mismatch, sizeof(*first_mismatch)), "cudaMalloc");
  Fp8CastMismatches result{0, 0xffffffffu};
  unsigned long long count = 0;
  unsigned int first = result.first_bits;
  check(cudaMemcpy(mismatches, &count, sizeof(count), cudaMemcpyHostToDevice), "cudaMemcpy");
  check(cudaMemcpy(first_mismatch, &first, sizeof(first), cudaMemcpyHostToDevice), "cudaMemcpy");
  compare_casts<<<1024, 256>>>(mismatches, first_mismatch);
  check(cudaGetLastError(), "compare_casts launch");
  check(cudaMemcpy(&count, mismatches, sizeof(count), cudaMemcpyDeviceToHost), "cudaMemcpy");
  check(cudaMemcpy(&first, first_mismatch, sizeof(first), cudaMemcpyDeviceToHost), "cudaMemcpy");
  result.count = count;
  result.first_bits = first;
  cudaFree(mismatches);
  cudaFree(first_mismatch);
  return result;
}

}  // namespace switchyard::testing
