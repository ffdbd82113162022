#pragma once
// One rank's `normal` round trip on the GPU (inputs up, dispatch, synthetic expert, combine, outputs
// down) and its bitwise comparison with the reference. Shared by the thread-per-rank gtest suite and
// the process-per-rank test.
#include <cuda_runtime.h>

#include <string>
#include <vector>

#include "support/normal_round_trip.hpp"
#include "switchyard/buffer.hpp"

namespace switchyard::testing {

struct DeviceRun {
  Tensor recv_x, recv_x_scales, recv_topk_idx, recv_topk_weights, combined_x, combined_topk_weights;
  std::vector<int> num_recv_tokens_per_expert;
  int64_t num_recv_tokens = -1;
};

// On the rank's device (device_of(buffer)), ordered on `stream`, which must belong to that device.
// With `cached`, the dispatch replays that handle's routing; `handle_out` receives the new handle.
DeviceRun run_on_device(Buffer& buffer, const workload::Shape& shape, const workload::RankData& data,
                        const Expected& expected, int expert_alignment, cudaStream_t stream,
                        const DispatchHandle* cached = nullptr, DispatchHandle* handle_out = nullptr);

void compare_with_reference(const DeviceRun& run, const workload::Shape& shape, const Expected& expected,
                            int rank, std::vector<std::string>* failures);

}  // namespace switchyard::testing
