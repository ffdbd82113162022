#pragma once
// The wait-statistics checks shared by the CPU and CUDA low_latency tests (ExpertMajorDispatchArgs::
// wait_recv_cost_stats): one rank enters a call late, and every other rank's entry for it must show
// most of that delay while every other entry stays below it.
#include <chrono>
#include <cstdint>
#include <string>

#include "support/expert_major_cases.hpp"
#include "switchyard/tensor.hpp"

namespace switchyard::testing::expert_major {

// How late the late rank enters its call, and the least of it that a peer's entry must show; prompt
// entries stay below that (with room for the sanitizer builds' slow calls).
constexpr auto kLateBy = std::chrono::milliseconds(500);
constexpr int64_t kLateWaitNs = 350'000'000;
constexpr int64_t kStatsStart = 1000;  // every entry starts here: a call adds to it

// i64 [num_ranks] on the host, every entry kStatsStart.
inline Tensor wait_stats_for(int num_ranks) {
  Tensor stats = Tensor::empty(DType::i64, {num_ranks});
  for (int r = 0; r < num_ranks; ++r) stats.as<int64_t>()[r] = kStatsStart;
  return stats;
}

// What `rank`'s host copy of its statistics says about `late`, as failures.
inline void check_wait_stats(const TensorView& stats, int rank, int late, const char* phase,
                             Failures& failures) {
  for (int source = 0; source < stats.shape[0]; ++source) {
    const int64_t added = stats.as<const int64_t>()[source] - kStatsStart;
    const std::string what = std::string(phase) + " wait_recv_cost_stats[" + std::to_string(source) +
                             "] added " + std::to_string(added) + " ns";
    if (added < 0) failures.add(rank, what + ": expected an addition, not less");
    const bool awaited_late = source == late && rank != late;
    if (awaited_late && added < kLateWaitNs) failures.add(rank, what + ": expected the late rank's wait");
    if (!awaited_late && added >= kLateWaitNs)
      failures.add(rank, what + ": expected a prompt rank's short wait");
  }
}

}  // namespace switchyard::testing::expert_major
