#pragma once
// A `normal` round trip whose caller lets go of its routing right after the dispatch, as Python
// callers do with the arrays they passed: the layout lives in caller memory (borrowed by dispatch),
// which is overwritten with other routing and then freed before the combine and before a cached
// re-dispatch with the handle. Both must still give the reference's outputs: the handle owns what it
// routes by. Host memory (CPU backend); the CUDA suites do the same with device memory.
#include "support/normal_round_trip.hpp"

namespace switchyard::testing {

// The first round trip (dispatch given the caller's layout, then combine after the layout was
// overwritten and freed) and a cached round trip replaying its handle.
struct ReleasedLayoutRuns {
  RankRun first;
  RankRun cached;
};

// With `with_topk` false the dispatch is routed by the layout alone (compute_expected_without_topk).
ReleasedLayoutRuns run_round_trip_releasing_layout(Buffer& buffer, const workload::Shape& shape,
                                                   const workload::RankData& data, const Expected& expected,
                                                   const RoundTripOptions& options, bool with_topk);

}  // namespace switchyard::testing
