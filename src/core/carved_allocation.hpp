#pragma once
// Several tensors carved from one allocation (Tensor::part_of): a call that needs many small tensors pays
// for one allocation, and later one free, instead of one of each per tensor. On CUDA a stream-ordered
// allocation costs several runtime calls (the device scope, a capture query, cudaMallocAsync) and a
// cudaFreeAsync when it dies: a fresh `normal` dispatch made 12 of them, 4 of them while the stream waited
// for the host (bench/NOTES.md, session 32). The parts share the storage, which lives while any part does.
#include <cstddef>
#include <cstdint>

#include "switchyard/tensor.hpp"

namespace switchyard::detail {

class CarvedAllocation {
 public:
  // NOTES: cudaMalloc's own alignment, so that each part is as aligned as a tensor of its own would be
  // (16-byte vector loads, TMA).
  static constexpr size_t kPartAlignment = 256;

  // Reserves `elements` of `dtype`; returns the part's byte offset, for Tensor::part_of on the storage.
  size_t reserve(DType dtype, int64_t elements);
  size_t bytes() const { return bytes_; }
  // One allocation holding every part reserved (as Tensor::empty makes it: stream-ordered on `stream` where
  // that is not null), as an i64 tensor to carve the parts from; never empty.
  Tensor allocate(Device device, int device_index, void* stream) const;

 private:
  size_t bytes_ = 0;
};

}  // namespace switchyard::detail
