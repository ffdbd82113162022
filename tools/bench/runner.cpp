#include "runner.hpp"

#include <algorithm>
#include <memory>
#include <utility>
#include <vector>

#include "design_roofline.hpp"
#include "engines.hpp"
#include "forked_ranks.hpp"
#include "graph_replay.hpp"
#include "hook_split.hpp"
#include "minimal_bound.hpp"
#include "rank_outcome_json.hpp"
#include "rank_run.hpp"
#include "stats.hpp"
#include "switchyard/errors.hpp"
#include "switchyard/group.hpp"

namespace switchyard::bench {
namespace {

// Per timed iteration, the slowest rank; the median and the p99 are taken over these.
std::vector<double> slowest_per_iteration(const std::vector<std::vector<double>>& seconds_per_rank) {
  std::vector<double> slowest(seconds_per_rank.front().size(), 0.0);
  for (const std::vector<double>& rank_seconds : seconds_per_rank) {
    for (size_t iteration = 0; iteration < slowest.size(); ++iteration) {
      slowest[iteration] = std::max(slowest[iteration], rank_seconds[iteration]);
    }
  }
  return slowest;
}

// The median and the p99 of the slowest rank per iteration.
PhaseTiming timing_of(const std::vector<std::vector<double>>& seconds_per_rank) {
  const std::vector<double> slowest = slowest_per_iteration(seconds_per_rank);
  return {median(slowest), percentile(slowest, 99)};
}

// One row's seconds: [rank][timed iteration].
using RowSeconds = std::vector<std::vector<double>>;

// The earliest stage's difference, on the lowest rank that has it, and how many ranks differ.
std::string describe_failure(const std::vector<Difference>& differences) {
  const Difference* first = nullptr;
  int first_rank = -1, ranks_differing = 0;
  for (int rank = 0; rank < static_cast<int>(differences.size()); ++rank) {
    const Difference& difference = differences[rank];
    if (!difference.found()) continue;
    ++ranks_differing;
    if (!first || difference.stage < first->stage) {
      first = &difference;
      first_rank = rank;
    }
  }
  if (!first) return "";
  return "rank " + std::to_string(first_rank) + " " + first->what + "; " + std::to_string(ranks_differing) +
         " of " + std::to_string(differences.size()) + " ranks differ";
}

}  // namespace

int64_t engine_tokens_per_rank(BenchEngine engine, const BenchOptions& options) {
  if (is_rank_major(engine)) return options.tokens_per_rank;
  return engine == BenchEngine::symmetric ? options.symmetric_tokens_per_rank : options.ll_tokens_per_rank;
}

const Traffic& engine_traffic(BenchEngine engine, const Problem& problem) {
  if (is_rank_major(engine)) return problem.traffic;
  return engine == BenchEngine::symmetric ? problem.symmetric.traffic : problem.low_latency.traffic;
}

const char* check_status_name(CheckStatus status) {
  switch (status) {
    case CheckStatus::passed:
      return "pass";
    case CheckStatus::failed:
      return "fail";
    case CheckStatus::skipped:
      return "skipped";
    case CheckStatus::error:
      return "error";
  }
  return "?";
}

EngineResult skipped_result(BenchEngine engine, const std::string& why) {
  EngineResult result;
  result.engine = engine;
  result.status = CheckStatus::skipped;
  result.detail = why;
  return result;
}

namespace {

// Seconds any rank waits for its peers at a barrier of ranks as processes before the run fails: past
// the library's own bound on its waits, with room for the host's work between the calls.
double process_wait_seconds(const BenchOptions& options) {
  return std::max(120.0, 4 * options.config.timeout_seconds);
}

// Every rank's outcome, ranks as threads of this process.
std::vector<RankOutcome> run_ranks_as_threads(const RankRun& run, int num_ranks) {
  std::vector<RankOutcome> outcomes(num_ranks);
  // NOTES: the Buffers outlive every rank's thread. A rank that fails (a timeout, say) must not unmap
  // its heap while peers still inside dispatch or combine write into it.
  std::vector<std::unique_ptr<Buffer>> buffers(num_ranks);
  run_ranks(num_ranks,
            [&](Group& group) { outcomes[group.rank()] = run_rank(run, group, buffers[group.rank()]); });
  return outcomes;
}

// Every rank's outcome, one forked process per rank. A failure on any rank is rethrown here as its
// kind, the lowest rank's first.
std::vector<RankOutcome> run_ranks_as_processes(const RankRun& run, int num_ranks) {
  const std::vector<std::string> answers = run_forked_ranks(
      num_ranks, process_wait_seconds(*run.options),
      [&](Group& group) {
        std::unique_ptr<Buffer> buffer;
        const RankOutcome outcome = run_rank(run, group, buffer);
        // No rank unmaps its heap while a peer may still read or write it.
        group.barrier();
        // The parent's copy of the progress bar does not know how far rank 0's drew.
        if (group.rank() == 0 && run.progress) run.progress->clear();
        return encode_outcome(outcome);
      },
      encode_failure);
  std::vector<RankOutcome> outcomes;
  for (const std::string& answer : answers) outcomes.push_back(decode_outcome(answer));
  return outcomes;
}

// Per rank, one vector of `outcome.*seconds`.
RowSeconds rows_of(const std::vector<RankOutcome>& outcomes, std::vector<double> RankOutcome::*seconds) {
  RowSeconds rows;
  for (const RankOutcome& outcome : outcomes) rows.push_back(outcome.*seconds);
  return rows;
}

}  // namespace

bool dispatch_host_waits_behind_hold(BenchEngine engine, StartMode start) {
  // The rank-major engines' dispatch waits on the host for the counts (a fresh dispatch; the bench never
  // passes num_worst_tokens); the expert-major engines' calls never wait on the host.
  return start == StartMode::timer && is_rank_major(engine);
}

EngineResult run_engine(BenchEngine engine, const BenchOptions& options, const Problem& problem,
                        Progress& progress, DumpDirectory* dump) {
  const int num_ranks = options.topology.num_ranks;
  EngineResult result;
  result.engine = engine;
  result.iters = options.iters;
  result.warmup = options.warmup;
  const Traffic& traffic = engine_traffic(engine, problem);
  result.dispatch_bytes = traffic.dispatch_bytes();
  result.combine_bytes = traffic.combine_bytes();
  result.remote_dispatch_bytes = traffic.remote_dispatch_bytes();
  result.remote_combine_bytes = traffic.remote_combine_bytes();
  const MinimalBytes minimal = minimal_bytes(traffic);
  result.minimal_dispatch_bytes = minimal.dispatch;
  result.minimal_combine_bytes = minimal.combine;
  result.received_rows_by_rank = traffic.received_rows_by_rank;
  result.dispatch_row_bytes = traffic.dispatch_row_bytes;
  result.combine_row_bytes = traffic.combine_row_bytes;
  result.tokens_per_rank = engine_tokens_per_rank(engine, options);
  result.delivered_rows = traffic.delivered_rows;
  result.ranks_as = ranks_as_name(options.ranks_as);
  if (!is_rank_major(engine)) {
    result.rows_per_expert =
        (engine == BenchEngine::symmetric ? problem.symmetric : problem.low_latency).rows_per_expert;
  }
  result.node_bytes = traffic.node_bytes();
  // The design bytes follow the paths the engine took: the symmetric combine's and dispatch's are known once
  // its Buffers connected (rank 0's; every rank resolves it alike).
  auto count_design = [&](std::optional<SymmetricCombine> combine_path,
                          std::optional<SymmetricDispatch> dispatch_path) {
    // Both backends read the normal engine's heap-resident inputs in place (docs/normal-in-place.md).
    const bool normal_in_place = options.normal_heap;
    const DesignTraffic design =
        design_traffic(engine, traffic, options.topology.is_single_node(), combine_path, dispatch_path,
                       normal_in_place, options.normal_heap_staged);
    result.design_dispatch_bytes = design.dispatch_bytes;
    result.design_combine_bytes = design.combine_bytes;
    result.design_passes = design.passes;
    result.design_note = design.why_not;
  };
  count_design(std::nullopt, std::nullopt);
  if (engine == BenchEngine::nccl) prepare_nccl_environment();  // before any rank reads it

  const RankRun run{engine, &options, &problem, &progress, dump};
  std::vector<RankOutcome> outcomes;
  try {
    outcomes = options.ranks_as == RanksAs::processes ? run_ranks_as_processes(run, num_ranks)
                                                      : run_ranks_as_threads(run, num_ranks);
  } catch (const InvalidArgument&) {
    throw;
  } catch (const UsageError&) {
    throw;
  } catch (const Unsupported& error) {
    if (!options.engine_was_all) throw;
    return skipped_result(engine, error.what());
  } catch (const Error& error) {
    result.status = CheckStatus::error;
    result.detail = error.what();
    return result;
  }

  const RankOutcome& first = outcomes.front();
  count_design(first.symmetric_combine, first.symmetric_dispatch);
  if (first.symmetric_combine) result.symmetric_combine = symmetric_combine_name(*first.symmetric_combine);
  if (first.symmetric_dispatch)
    result.symmetric_dispatch = symmetric_dispatch_name(*first.symmetric_dispatch);
  result.timed = true;
  result.note = first.note;
  result.checked_iterations = first.checked_iterations;
  result.cache_flush_bytes = first.cache_flush_bytes;
  result.input_sets = first.input_sets;
  const PhaseTiming dispatch = timing_of(rows_of(outcomes, &RankOutcome::dispatch_seconds));
  const PhaseTiming combine = timing_of(rows_of(outcomes, &RankOutcome::combine_seconds));
  result.dispatch_seconds = dispatch.median_seconds;
  result.combine_seconds = combine.median_seconds;
  result.dispatch_p99_seconds = dispatch.p99_seconds;
  result.combine_p99_seconds = combine.p99_seconds;
  result.dispatch_host_seconds =
      timing_of(rows_of(outcomes, &RankOutcome::dispatch_host_seconds)).median_seconds;
  result.combine_host_seconds =
      timing_of(rows_of(outcomes, &RankOutcome::combine_host_seconds)).median_seconds;
  result.dispatch_host_behind_hold = dispatch_host_waits_behind_hold(engine, options.start);
  for (const RankOutcome& outcome : outcomes) {
    result.dispatch_rank_seconds.push_back(median(outcome.dispatch_seconds));
    result.combine_rank_seconds.push_back(median(outcome.combine_seconds));
    result.start_holds += outcome.start_holds;
    result.start_holds_missed += outcome.start_holds_missed;
  }
  if (!is_rank_major(engine)) {
    result.hook_split = first.hook_split_status;
    if (first.hook_split_status == kMeasured) {
      auto row = [&](std::vector<double> HookSplitSeconds::*half) {
        RowSeconds seconds;
        for (const RankOutcome& outcome : outcomes) seconds.push_back(outcome.split_seconds.*half);
        return timing_of(seconds);
      };
      result.dispatch_send = row(&HookSplitSeconds::dispatch_send);
      result.dispatch_recv = row(&HookSplitSeconds::dispatch_recv);
      result.combine_send = row(&HookSplitSeconds::combine_send);
      result.combine_recv = row(&HookSplitSeconds::combine_recv);
    }
    result.graph_replay = first.graph_status;
    if (first.graph_status == kMeasured) {
      RowSeconds graph_dispatch, graph_combine;
      for (const RankOutcome& outcome : outcomes) {
        graph_dispatch.push_back(outcome.graph_seconds.dispatch);
        graph_combine.push_back(outcome.graph_seconds.combine);
      }
      result.graph_dispatch = timing_of(graph_dispatch);
      result.graph_combine = timing_of(graph_combine);
    }
  }
  std::vector<Difference> differences;
  for (const RankOutcome& outcome : outcomes) differences.push_back(outcome.difference);
  const std::string failure = describe_failure(differences);
  result.status = failure.empty() ? CheckStatus::passed : CheckStatus::failed;
  result.detail = failure;
  return result;
}

}  // namespace switchyard::bench
