#pragma once
// Which CUDA device a test rank runs on. The GPU tests run ranks as threads (or child processes) of
// one machine; SWITCHYARD_TEST_DEVICES picks how they spread over its GPUs:
//   unset or "0": every rank on device 0 (the one-GPU machine's ranks-as-threads model);
//   "spread":     rank r on device r % (visible devices), so 8 ranks on 8 GPUs get one each, and on
//                 one GPU they all land on device 0 as before.
// Every per-rank placement (BufferOptions::device, cudaSetDevice on the rank's thread before its
// stream is made, device tensors) goes through this one rule, so a rank's pieces never disagree.
#include "switchyard/buffer.hpp"

namespace switchyard::testing {

// The environment variable read by device_for_rank.
inline constexpr const char* kTestDevicesVariable = "SWITCHYARD_TEST_DEVICES";

// The CUDA device of `rank` among `num_ranks`. Throws std::invalid_argument naming the variable for a
// value other than unset, "0" or "spread", or for a rank outside [0, num_ranks); std::runtime_error
// when "spread" finds no CUDA device.
int device_for_rank(int rank, int num_ranks);

// The device of `buffer`'s rank, by the same rule (its rank among its topology's ranks).
int device_of(const Buffer& buffer);

}  // namespace switchyard::testing
