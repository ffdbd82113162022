#pragma once
// One rank of a case on the CUDA backend, as a thread of this process on GPU 0 with a non-blocking
// stream of its own (cuda/expert_major_round_trip.hpp's GpuRank). The round trips are the GPU
// suites' own (cuda/cuda_round_trip.hpp, cuda/expert_major_round_trip.hpp, and
// cuda/captured_round_trip.hpp for CUDA graph replays with new routing), compared bit for bit with
// the reference.
#include <vector>

#include "rank_report.hpp"
#include "rounds.hpp"
#include "soak_case.hpp"
#include "switchyard/group.hpp"

namespace switchyard::soak {

RankReport run_cuda_rank(const SoakCase& c, const std::vector<Round>& rounds, Group& group, bool corrupt);

// Free device memory of GPU 0 after returning the stream-ordered pool's unused memory to the device
// (the library keeps its pool's memory between calls).
size_t cuda_free_bytes();

}  // namespace switchyard::soak
