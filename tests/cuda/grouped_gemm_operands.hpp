#pragma once
// Operands of the grouped GEMM tests (cuda/moe/grouped_gemm.hpp): device buffers, and random fp8 A and B
// with their block scales for `groups` groups of `capacity` rows of A.
#include <cuda_runtime.h>

#include <cstdint>
#include <random>
#include <vector>

#include "device/cuda_check.hpp"

namespace switchyard::testing {

// cudaMalloc'd bytes, every one set to `fill`.
struct DeviceBuffer {
  void* pointer = nullptr;
  explicit DeviceBuffer(size_t bytes, uint8_t fill = 0) {
    SY_CUDA_CHECK(cudaMalloc(&pointer, bytes));
    SY_CUDA_CHECK(cudaMemset(pointer, fill, bytes));
  }
  ~DeviceBuffer() { cudaFree(pointer); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

template <class T>
void upload(const DeviceBuffer& to, const std::vector<T>& from) {
  SY_CUDA_CHECK(cudaMemcpy(to.pointer, from.data(), from.size() * sizeof(T), cudaMemcpyHostToDevice));
}
template <class T>
std::vector<T> download(const DeviceBuffer& from, size_t count) {
  std::vector<T> values(count);
  SY_CUDA_CHECK(cudaMemcpy(values.data(), from.pointer, count * sizeof(T), cudaMemcpyDeviceToHost));
  return values;
}

// Random finite e4m3 bytes (never 0x7f or 0xff, the NaNs) and positive scales around 1: A [groups,
// capacity, k] with scales [groups, capacity, k / 128], B [groups, n, k] with [groups, n / 128, k / 128].
struct Fp8Operands {
  std::vector<uint8_t> a, b;
  std::vector<float> a_scales, b_scales;
  Fp8Operands(uint64_t seed, int groups, int capacity, int n, int k) {
    std::mt19937_64 random(seed);
    const auto fp8 = [&] {
      uint8_t bits;
      do bits = static_cast<uint8_t>(random());
      while ((bits & 0x7f) == 0x7f);
      return bits;
    };
    std::uniform_real_distribution<float> scale(0.25f, 2.0f);
    a.resize(static_cast<size_t>(groups) * capacity * k);
    b.resize(static_cast<size_t>(groups) * n * k);
    a_scales.resize(static_cast<size_t>(groups) * capacity * (k / 128));
    b_scales.resize(static_cast<size_t>(groups) * (n / 128) * (k / 128));
    for (uint8_t& v : a) v = fp8();
    for (uint8_t& v : b) v = fp8();
    for (float& v : a_scales) v = scale(random);
    for (float& v : b_scales) v = scale(random);
  }
};

}  // namespace switchyard::testing
