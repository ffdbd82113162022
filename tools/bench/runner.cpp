#include "runner.hpp"

#include <algorithm>
#include <memory>
#include <utility>
#include <vector>

#include "cache_flush.hpp"
#include "design_roofline.hpp"
#include "engines.hpp"
#include "fault_injection.hpp"
#include "graph_replay.hpp"
#include "hook_split.hpp"
#include "minimal_bound.hpp"
#include "phase_clock.hpp"
#include "rank_agreement.hpp"
#include "rank_stream.hpp"
#include "stats.hpp"
#include "switchyard/errors.hpp"
#include "switchyard/group.hpp"
#include "timer.hpp"
#include "transfer.hpp"

namespace switchyard::bench {
namespace {

// low_latency's Buffers are sized for its calls only (the normal region for --ll-tokens too).
BufferOptions buffer_options(const BenchOptions& options, BenchEngine engine, int rank) {
  BufferOptions buffer;
  buffer.topology = options.topology;
  buffer.rank = rank;
  buffer.backend = options.backend;
  buffer.device = options.devices.device(rank);  // --devices: one GPU per rank, or shared as threads
  buffer.sharing = HeapSharing::threads;
  buffer.config = options.config;
  // The library sizes for at least one token; 0 tokens on every rank is still a valid step.
  buffer.sizing.max_tokens_per_rank = std::max<int64_t>(1, engine_tokens_per_rank(engine, options));
  if (engine == BenchEngine::low_latency)
    buffer.sizing.low_latency_max_tokens_per_rank = std::max<int64_t>(1, options.ll_tokens_per_rank);
  if (engine == BenchEngine::symmetric)
    buffer.sizing.symmetric_max_tokens_per_rank = std::max<int64_t>(1, options.symmetric_tokens_per_rank);
  buffer.sizing.hidden = options.hidden;
  buffer.sizing.topk = options.topk;
  buffer.sizing.num_experts = options.num_experts;
  buffer.sizing.dtype = options.dtype;
  return buffer;
}

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

// "check iteration (input set 2 of 3)": iteration `set` of the check, counting from 0.
std::string check_label(int set, int sets) {
  std::string label = "check iteration";
  if (sets > 1) label += " (input set " + std::to_string(set + 1) + " of " + std::to_string(sets) + ")";
  return label;
}

// The first rank on each device evicts its cache: the ranks on one device share it (on cpu, every
// rank is on "device" 0).
bool evicts_cache(const BenchOptions& options, int rank) {
  for (int earlier = 0; earlier < rank; ++earlier) {
    if (options.devices.same_device(earlier, rank)) return false;
  }
  return true;
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

EngineResult run_engine(BenchEngine engine, const BenchOptions& options, const Problem& problem,
                        Progress& progress, DumpDirectory* dump) {
  const std::string name = bench_engine_name(engine);
  const int num_ranks = options.topology.num_ranks;
  const int warmup = options.warmup;
  const int iters = options.iters;

  EngineResult result;
  result.engine = engine;
  result.iters = iters;
  result.warmup = warmup;
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
  if (!is_rank_major(engine)) {
    result.rows_per_expert =
        (engine == BenchEngine::symmetric ? problem.symmetric : problem.low_latency).rows_per_expert;
  }
  result.node_bytes = traffic.node_bytes();
  // The design bytes follow the paths the engine took: the symmetric combine's and dispatch's are known once
  // its Buffers connected (rank 0's; every rank resolves it alike).
  std::optional<SymmetricCombine> symmetric_combine;
  std::optional<SymmetricDispatch> symmetric_dispatch;
  auto count_design = [&] {
    const DesignTraffic design = design_traffic(engine, traffic, options.topology.is_single_node(),
                                                symmetric_combine, symmetric_dispatch);
    result.design_dispatch_bytes = design.dispatch_bytes;
    result.design_combine_bytes = design.combine_bytes;
    result.design_passes = design.passes;
    result.design_note = design.why_not;
  };
  count_design();
  // The expert-major engines' extra rows: the send/receive split and CUDA graph replay.
  const bool extra_rows = !is_rank_major(engine);

  RowSeconds dispatch_seconds(num_ranks, std::vector<double>(iters));
  RowSeconds combine_seconds(num_ranks, std::vector<double>(iters));
  // Per rank, the first difference from the reference, labelled with the iteration it came from.
  std::vector<Difference> differences(num_ranks);
  int checked_iterations = 0, input_sets = 1;  // rank 0's: the same on every rank
  int64_t cache_flush_bytes = 0;
  const int forgotten_iteration = forgotten_timed_iteration();
  std::vector<HookSplitSeconds> split_seconds(num_ranks);
  std::vector<GraphReplaySeconds> graph_seconds(num_ranks);
  std::string hook_split_status, graph_status;  // rank 0's: the same on every rank

  // NOTES: the Buffers outlive every rank's thread. A rank that fails (a timeout, say) must not unmap
  // its heap while peers still inside dispatch or combine write into it.
  std::vector<std::unique_ptr<Buffer>> buffers(num_ranks);
  std::string note;                                             // rank 0's session's
  if (engine == BenchEngine::nccl) prepare_nccl_environment();  // before any rank thread reads it

  try {
    run_ranks(num_ranks, [&](Group& group) {
      const int rank = group.rank();
      const bool reports_progress = rank == 0;
      const int device = options.devices.device(rank);
      // First: on cuda it makes the rank's device current on this thread. Destroyed last, after the
      // session and the timer that use it.
      const RankStream rank_stream(options.backend, device);
      const Stream stream = rank_stream.get();
      Buffer* buffer = nullptr;
      if (uses_switchyard_buffer(engine)) {
        buffers[rank] = std::make_unique<Buffer>(buffer_options(options, engine, rank));
        buffer = buffers[rank].get();
        buffer->connect(group.allgather(buffer->local_handle()));
        if (engine == BenchEngine::symmetric && rank == 0) {
          symmetric_combine = buffer->symmetric_combine_path();
          symmetric_dispatch = buffer->symmetric_dispatch_path();
        }
      }
      const SessionContext context{&options, &problem, buffer, rank, stream, &group, device};
      std::unique_ptr<EngineSession> session = make_engine_session(engine, context);
      if (rank == 0) note = session->note();
      std::unique_ptr<PhaseTimer> timer = make_phase_timer(options.backend, stream);
      // Waits for this rank's stream and raises any error its work recorded (on cpu it only returns).
      auto synchronize = [&] {
        if (buffer) {
          buffer->synchronize(stream);
        } else {
          session->synchronize();
        }
      };
      // Every rank starts each phase together, from an idle stream (on cuda the layout or the expert's
      // copies are done first) and an evicted cache, so the slowest rank's time is the phase's time
      // (phase_clock.hpp).
      CacheFlush cache_flush(options.backend, stream, evicts_cache(options, rank));
      if (rank == 0) cache_flush_bytes = static_cast<int64_t>(cache_flush.bytes());
      PhaseClock clock(group, *timer, synchronize, [&] { cache_flush.run(); });

      // After every round of calls, outside the timed window: the outputs against the reference.
      const RoundCheck check = [&](const std::string& round) {
        if (rank == 0) ++checked_iterations;
        if (differences[rank].found()) return;
        Difference difference = session->first_difference();
        if (difference.found()) difference.what = round + ": " + difference.what;
        differences[rank] = difference;
      };
      // One iteration into outputs poisoned just before it, checked just after it.
      auto run_iteration = [&](int iteration, const std::string& label, double* dispatch_time,
                               double* combine_time) {
        session->poison_outputs();
        session->prepare(iteration);
        *dispatch_time = clock.time([&] { session->dispatch(iteration); });
        session->expert(iteration);
        *combine_time = clock.time([&] { session->combine(iteration); });
        synchronize();
        check(label);
      };
      // The bar's steps: every iteration, of the plain calls and of the extra rows.
      const int total_steps = session->num_input_sets() + (warmup + iters) * (extra_rows ? 3 : 1);
      int steps_done = 0;
      auto report = [&](const std::string& what) {
        if (reports_progress) progress.update(name + ": " + what, steps_done++, total_steps);
      };

      // One check iteration per input set: every set must pass. The dump is the first set's.
      const int sets = session->num_input_sets();
      if (rank == 0) input_sets = sets;
      double untimed_dispatch = 0, untimed_combine = 0;
      int iteration = 0;
      for (int set = 0; set < sets; ++set) {
        const std::string label = check_label(set, sets);
        report(label);
        run_iteration(iteration++, label, &untimed_dispatch, &untimed_combine);
        if (dump && set == 0) {
          if (reports_progress) progress.update(name + ": writing --dump files");
          session->dump(*dump);
        }
      }
      for (int done = 0; done < warmup; ++done) {
        const std::string label =
            "warmup iteration " + std::to_string(done + 1) + "/" + std::to_string(warmup);
        report(label);
        run_iteration(iteration++, label, &untimed_dispatch, &untimed_combine);
      }
      for (int done = 0; done < iters; ++done) {
        const std::string label = "timed iteration " + std::to_string(done + 1) + "/" + std::to_string(iters);
        report(label);
        session->poison_outputs();
        session->prepare(iteration);
        dispatch_seconds[rank][done] = clock.time([&] { session->dispatch(iteration); });
        session->expert(iteration);
        combine_seconds[rank][done] = clock.time([&] { session->combine(iteration); });
        synchronize();
        if (rank == 0 && done + 1 == forgotten_iteration) session->poison_outputs();
        check(label);
        ++iteration;
      }
      if (!extra_rows) return;

      // The send and receive halves apart, then checked again. The library may refuse the hook for
      // these options (Unsupported, raised by its host-side checks on every rank alike): then the rows
      // say so rather than the engine being skipped.
      std::string split_unsupported = session->hook_split_unsupported();
      if (split_unsupported.empty()) {
        std::string refused;
        try {
          iteration =
              run_hook_split(*session, clock, iteration, warmup, iters, split_seconds[rank], report, check);
        } catch (const Unsupported& error) {
          refused = error.what();
        }
        split_unsupported = agree_on_failure(group, "refused by the library", refused);
      }
      if (rank == 0) hook_split_status = split_unsupported.empty() ? kMeasured : split_unsupported;

      // CUDA graph replay last: the captured handle stays with the session until it is destroyed.
      std::string graph_unsupported =
          options.backend == Backend::cpu ? std::string(kNoGraphOnCpu) : session->graph_capture_unsupported();
      if (graph_unsupported.empty()) {
        graph_unsupported = run_graph_replays(*session, clock, group, stream, iteration, warmup, iters,
                                              graph_seconds[rank], report, check);
      }
      if (rank == 0) graph_status = graph_unsupported.empty() ? kMeasured : graph_unsupported;
    });
  } catch (const InvalidArgument&) {
    throw;
  } catch (const Unsupported& error) {
    if (!options.engine_was_all) throw;
    return skipped_result(engine, error.what());
  } catch (const Error& error) {
    result.status = CheckStatus::error;
    result.detail = error.what();
    return result;
  }

  count_design();
  if (symmetric_combine) result.symmetric_combine = symmetric_combine_name(*symmetric_combine);
  if (symmetric_dispatch) result.symmetric_dispatch = symmetric_dispatch_name(*symmetric_dispatch);
  result.timed = true;
  result.note = note;
  const PhaseTiming dispatch = timing_of(dispatch_seconds);
  const PhaseTiming combine = timing_of(combine_seconds);
  result.dispatch_seconds = dispatch.median_seconds;
  result.combine_seconds = combine.median_seconds;
  result.dispatch_p99_seconds = dispatch.p99_seconds;
  result.combine_p99_seconds = combine.p99_seconds;
  for (int rank = 0; rank < num_ranks; ++rank) {
    result.dispatch_rank_seconds.push_back(median(dispatch_seconds[rank]));
    result.combine_rank_seconds.push_back(median(combine_seconds[rank]));
  }
  result.checked_iterations = checked_iterations;
  result.cache_flush_bytes = cache_flush_bytes;
  result.input_sets = input_sets;
  if (extra_rows) {
    result.hook_split = hook_split_status;
    if (hook_split_status == kMeasured) {
      auto row = [&](std::vector<double> HookSplitSeconds::*half) {
        RowSeconds seconds;
        for (const HookSplitSeconds& rank_seconds : split_seconds) seconds.push_back(rank_seconds.*half);
        return timing_of(seconds);
      };
      result.dispatch_send = row(&HookSplitSeconds::dispatch_send);
      result.dispatch_recv = row(&HookSplitSeconds::dispatch_recv);
      result.combine_send = row(&HookSplitSeconds::combine_send);
      result.combine_recv = row(&HookSplitSeconds::combine_recv);
    }
    result.graph_replay = graph_status;
    if (graph_status == kMeasured) {
      RowSeconds graph_dispatch, graph_combine;
      for (const GraphReplaySeconds& rank_seconds : graph_seconds) {
        graph_dispatch.push_back(rank_seconds.dispatch);
        graph_combine.push_back(rank_seconds.combine);
      }
      result.graph_dispatch = timing_of(graph_dispatch);
      result.graph_combine = timing_of(graph_combine);
    }
  }
  const std::string failure = describe_failure(differences);
  result.status = failure.empty() ? CheckStatus::passed : CheckStatus::failed;
  result.detail = failure;
  return result;
}

}  // namespace switchyard::bench
