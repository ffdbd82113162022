#pragma once
// Ranks as processes on the CPU backend: R children forked before any of their Buffers exists, each
// running one rank with HeapSharing::processes. The children's collectives (the handle allgather and
// the final barrier) go through this process over pipes; it relays them, and gathers each rank's
// report. Needs a parent with no other threads at the fork (the soak runs cases one at a time).
#include <functional>
#include <string>
#include <vector>

#include "rank_report.hpp"
#include "switchyard/group.hpp"

namespace switchyard::soak {

struct ProcessRanksOutcome {
  std::vector<RankReport> reports;  // [R], when every rank finished
  std::vector<std::string> errors;  // a rank that threw, crashed or broke the protocol
  std::vector<int> pids;            // the children's process ids (their /dev/shm names carry them)
};

// Runs rank_body(group) in `num_ranks` forked children and waits for all of them.
ProcessRanksOutcome run_rank_processes(int num_ranks, const std::function<RankReport(Group&)>& rank_body);

// The /dev/shm entries the library made for process `pid` (named "switchyard-<pid>-...").
std::vector<std::string> shm_segments_of(int pid);

}  // namespace switchyard::soak
