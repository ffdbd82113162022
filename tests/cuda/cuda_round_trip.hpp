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
// `dispatch_tuning` and `combine_tuning`: the calls' CallTuning (all 0: the Buffer's).
// `scales_column_major`: fp8 scales go up as their transpose (transpose_scales), column-major as DeepEP's
// users pass them (DispatchArgs::x_scales_column_major).
// `heap_inputs`: x (with row-major scales) and the expert outputs (with the weights) are copied into the
// Buffer's heap-resident inputs (Buffer::normal_input, normal_combine_input; the Buffer sized for them), and
// the calls take those views: the peers read the rows in place (docs/normal-in-place.md).
// `with_topk` false (only with `cached`): DeepEP's cached dispatch, without topk_idx and weights, and a
// combine without weights (compare with `with_topk` false); in place, it pulls its rows without rings.
// `staged_inputs` (with `heap_inputs`): the calls take the rank's own tensors instead, which the Buffer
// copies into its heap inputs first (core/staged_heap_input.hpp).
DeviceRun run_on_device(Buffer& buffer, const workload::Shape& shape, const workload::RankData& data,
                        const Expected& expected, int expert_alignment, cudaStream_t stream,
                        const DispatchHandle* cached = nullptr, DispatchHandle* handle_out = nullptr,
                        const CallTuning& dispatch_tuning = {}, const CallTuning& combine_tuning = {},
                        bool scales_column_major = false, bool heap_inputs = false, bool with_topk = true,
                        bool staged_inputs = false);

// A dispatch without top-k (DeepEP's topk_idx=None) routed by get_dispatch_layout's layout on the
// device, then a combine without weights; `expected` from compute_expected_without_topk.
DeviceRun run_on_device_without_topk(Buffer& buffer, const workload::Shape& shape,
                                     const workload::RankData& data, const Expected& expected,
                                     int expert_alignment, cudaStream_t stream);

// With `with_topk` false: recv_topk_idx, recv_topk_weights and combined_topk_weights must be undefined.
void compare_with_reference(const DeviceRun& run, const workload::Shape& shape, const Expected& expected,
                            int rank, std::vector<std::string>* failures, bool with_topk = true);

}  // namespace switchyard::testing
