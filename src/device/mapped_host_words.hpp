#pragma once
// A few words of page-locked host memory that the device reads and writes through its mapping: how a
// kernel tells the host something while it still runs (posted counts, an error record, a clock reading),
// without a copy that would queue behind it on a stream.
//
// One owner for the allocation: cudaHostAlloc(cudaHostAllocMapped), the device's address of the same words,
// zero fill, and cudaFreeHost. Allocating page-locked memory can wait for the device, so owners allocate
// before a call launches anything (or once, when they are made) and keep the words.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstring>
#include <utility>

#include "device/cuda_check.hpp"

namespace switchyard::cuda {

template <typename Word>
class MappedHostWords {
 public:
  MappedHostWords() = default;
  // `count` words, zeroed. Throws SystemError naming the failed call; nothing is left allocated then.
  explicit MappedHostWords(size_t count) { allocate(count); }
  ~MappedHostWords() { release(); }
  MappedHostWords(const MappedHostWords&) = delete;
  MappedHostWords& operator=(const MappedHostWords&) = delete;
  MappedHostWords(MappedHostWords&& other) noexcept { *this = std::move(other); }
  MappedHostWords& operator=(MappedHostWords&& other) noexcept {
    if (this != &other) {
      release();
      host_ = std::exchange(other.host_, nullptr);
      device_ = std::exchange(other.device_, nullptr);
      count_ = std::exchange(other.count_, 0);
    }
    return *this;
  }

  // Replaces the words with `count` new zeroed ones (the old ones are freed first).
  void allocate(size_t count) {
    release();
    Word* host = nullptr;
    SY_CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&host), sizeof(Word) * count, cudaHostAllocMapped));
    Word* device = nullptr;
    const cudaError_t mapped = cudaHostGetDevicePointer(reinterpret_cast<void**>(&device), host, 0);
    if (mapped != cudaSuccess) {
      cudaFreeHost(host);
      SY_CUDA_CHECK(mapped);
    }
    std::memset(static_cast<void*>(host), 0, sizeof(Word) * count);
    host_ = host;
    device_ = device;
    count_ = count;
  }

  // Zeroes every word; only while no kernel that writes them is in flight.
  void clear() { std::memset(static_cast<void*>(host_), 0, sizeof(Word) * count_); }

  // The host's address; read words a running kernel writes through a volatile or atomic access.
  Word* host() const { return host_; }
  // The same words as the device addresses them.
  Word* device() const { return device_; }
  size_t size() const { return count_; }

 private:
  void release() noexcept {
    if (host_ != nullptr) cudaFreeHost(host_);
    host_ = nullptr;
    device_ = nullptr;
    count_ = 0;
  }

  Word* host_ = nullptr;
  Word* device_ = nullptr;
  size_t count_ = 0;
};

}  // namespace switchyard::cuda
