#include "case_runner.hpp"

#include <unistd.h>

#include <exception>
#include <mutex>

#include "cpu_rank.hpp"
#include "process_ranks.hpp"
#include "rounds.hpp"
#include "support/loopback_delays.hpp"
#include "switchyard/group.hpp"
#ifdef SWITCHYARD_WITH_CUDA
#include "cuda_rank.hpp"
#endif

namespace switchyard::soak {

namespace {

RankReport run_rank(const SoakCase& c, const std::vector<Round>& rounds, Group& group, HeapSharing sharing,
                    bool corrupt) {
#ifdef SWITCHYARD_WITH_CUDA
  if (c.backend == Backend::cuda) return run_cuda_rank(c, rounds, group, corrupt);
#endif
  return run_cpu_rank(c, rounds, group, sharing, corrupt);
}

void gather(const std::vector<RankReport>& reports, CaseOutcome& outcome) {
  for (const RankReport& report : reports) {
    outcome.mismatches.insert(outcome.mismatches.end(), report.mismatches.begin(), report.mismatches.end());
    outcome.corrupted = outcome.corrupted || report.corrupted;
  }
}

void run_as_threads(const SoakCase& c, const std::vector<Round>& rounds, bool corrupt, CaseOutcome& outcome) {
  std::vector<RankReport> reports(c.topology.num_ranks);
  run_ranks(c.topology.num_ranks, [&](Group& group) {
    reports[group.rank()] = run_rank(c, rounds, group, HeapSharing::threads, corrupt);
  });
  gather(reports, outcome);
}

void run_as_processes(const SoakCase& c, const std::vector<Round>& rounds, bool corrupt,
                      CaseOutcome& outcome) {
  const ProcessRanksOutcome ran = run_rank_processes(c.topology.num_ranks, [&](Group& group) {
    return run_rank(c, rounds, group, HeapSharing::processes, corrupt);
  });
  outcome.errors = ran.errors;
  if (ran.errors.empty()) gather(ran.reports, outcome);
  // Every segment is unlinked once its peers have mapped it, and a rank's own at its Buffer's end.
  for (int pid : ran.pids) {
    for (const std::string& segment : shm_segments_of(pid)) {
      outcome.errors.push_back("rank process " + std::to_string(pid) + " left /dev/shm/" + segment);
      unlink(("/dev/shm/" + segment).c_str());
    }
  }
}

}  // namespace

CaseOutcome run_case(const SoakCase& c, bool corrupt) {
  CaseOutcome outcome;
  try {
    const std::vector<Round> rounds = prepare_rounds(c);
    // The loopback transport reads its delays when a buffer makes it: forked ranks inherit them.
    const testing::LoopbackDelays delays(c.loopback_delays, c.seed);
    if (c.ranks_as == RankModel::processes) {
      run_as_processes(c, rounds, corrupt, outcome);
    } else {
      run_as_threads(c, rounds, corrupt, outcome);
    }
  } catch (const std::exception& error) {
    outcome.errors.push_back(error.what());
  }
  for (const std::string& segment : shm_segments_of(static_cast<int>(getpid()))) {
    outcome.errors.push_back("this process left /dev/shm/" + segment);
  }
  if (outcome.errors.empty()) outcome.round_trips = round_trips_of(c);
  return outcome;
}

}  // namespace switchyard::soak
