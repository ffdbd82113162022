#pragma once
// fp8 x that the caller cast itself (ExpertMajorDispatchArgs::x_scales, MoeArgs::x_scales): inputs for
// the symmetric dispatch and the MoE layer, and the check that a dispatch carried them bit for bit.
// Host only and free of GoogleTest, for the CPU and CUDA suites alike.
#include <vector>

#include "support/expert_major_cases.hpp"
#include "workload/workload.hpp"

namespace switchyard::testing::expert_major {

// c's inputs with x as arbitrary e4m3 rows and arbitrary f32 scales (the workload's fp8 draw): no cast
// of anything gives these scales, so only a dispatch that carries them as given returns them.
std::vector<workload::RankData> precast_inputs(const Case& c, uint64_t seed);

// `data` (bf16 x) with every rank's x replaced by its cast per 128 channels (common::cast_row_to_fp8,
// the dispatch's own use_fp8 cast, no rounding of the scales): fp8_e4m3 x and f32 x_scales.
std::vector<workload::RankData> cast_inputs(std::vector<workload::RankData> data);

// c with use_fp8 set (and nothing else): how fp8 x is dispatched.
Case with_precast_x(Case c);

// The symmetric dispatch args of c for one rank's fp8 `data` (x and x_scales).
LowLatencyDispatchArgs precast_dispatch_args(const Case& c, const workload::RankData& data);

// Every row that `got` (rank `rank`'s dispatch, on the host) received, within the capacity, is the
// caller's: its recv_x bytes and recv_x_scales bits equal row src_info of the source rank that
// layout_range assigns it to, in data[source].x and x_scales. An oracle of its own, beside the reference.
void check_rows_are_the_callers(const DispatchView& got, const std::vector<workload::RankData>& data,
                                int rank, Failures& failures);

}  // namespace switchyard::testing::expert_major
