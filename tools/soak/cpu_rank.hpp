#pragma once
// One rank of a case on the CPU backend, the same for ranks as threads and as processes: it makes
// its Buffer, connects over `group`, runs every round through the public API, compares every output
// with the reference bit for bit, and waits for every peer before its Buffer goes.
#include <vector>

#include "rank_report.hpp"
#include "rounds.hpp"
#include "soak_case.hpp"
#include "switchyard/buffer.hpp"
#include "switchyard/group.hpp"

namespace switchyard::soak {

// `corrupt`: rank 0 flips a bit of its first non-empty combined output (--self-test-corrupt).
RankReport run_cpu_rank(const SoakCase& c, const std::vector<Round>& rounds, Group& group,
                        HeapSharing sharing, bool corrupt);

// The buffer of rank `rank` of `c` on `backend` (device 0 for cuda: one GPU, ranks as threads).
BufferOptions soak_buffer_options(const SoakCase& c, int rank, HeapSharing sharing);

}  // namespace switchyard::soak
