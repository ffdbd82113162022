#pragma once
// The CUDA backend's rank mask (common/rank_mask.hpp): i32 words in device memory that the rank's
// kernels read when they run. Updates are kernels on the caller's stream, so they order with the calls
// around them and a captured graph reads whatever the mask holds when it is replayed.
#include <cuda_runtime.h>

#include <cstdint>

#include "common/rank_mask.hpp"
#include "switchyard/tensor.hpp"

namespace switchyard::cuda {

class DeviceRankMask {
 public:
  // Zeroed, and complete before this returns (no rank's stream can read it earlier).
  DeviceRankMask(int num_ranks, int device);
  ~DeviceRankMask();
  DeviceRankMask(const DeviceRankMask&) = delete;
  DeviceRankMask& operator=(const DeviceRankMask&) = delete;

  common::RankMaskView view() const { return {words_, num_ranks_}; }

  void set(int rank, bool masked, cudaStream_t stream);
  void clear(cudaStream_t stream);
  // i32 [R] on the device, 1 where masked, filled on `stream` (allocated on `allocation_stream`).
  Tensor snapshot(cudaStream_t stream, cudaStream_t allocation_stream) const;

 private:
  int32_t* words_ = nullptr;
  int num_ranks_ = 0;
  int device_ = 0;
};

}  // namespace switchyard::cuda
