#pragma once
// A `normal` round trip on the GPU whose caller lets go of its layout right after the dispatch: the
// layout is the caller's own device copy of get_dispatch_layout's, overwritten with other routing and
// freed (stream-ordered, so the pool hands the memory to the next allocations, which are filled with
// that other routing too) before the combine and before a cached re-dispatch with the handle. Both
// must still give the reference's outputs: the handle owns what it routes by.
#include <cuda_runtime.h>

#include "cuda/cuda_round_trip.hpp"

namespace switchyard::testing {

struct ReleasedLayoutDeviceRuns {
  DeviceRun first;   // dispatch given the caller's layout; combine after the layout was freed
  DeviceRun cached;  // a dispatch replaying first's handle, then its combine
};

// With `with_topk` false the dispatch is routed by the layout alone (`expected` from
// compute_expected_without_topk). On the rank's device, ordered on `stream`.
ReleasedLayoutDeviceRuns run_on_device_releasing_layout(Buffer& buffer, const workload::Shape& shape,
                                                        const workload::RankData& data,
                                                        const Expected& expected, int expert_alignment,
                                                        cudaStream_t stream, bool with_topk);

}  // namespace switchyard::testing
