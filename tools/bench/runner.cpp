#include "runner.hpp"

#include <algorithm>
#include <memory>
#include <utility>
#include <vector>

#include "design_roofline.hpp"
#include "engines.hpp"
#include "graph_replay.hpp"
#include "hook_split.hpp"
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
  buffer.sizing.max_tokens_per_rank = engine_tokens_per_rank(engine, options);
  if (engine == BenchEngine::low_latency)
    buffer.sizing.low_latency_max_tokens_per_rank = options.ll_tokens_per_rank;
  if (engine == BenchEngine::symmetric)
    buffer.sizing.symmetric_max_tokens_per_rank = options.symmetric_tokens_per_rank;
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

// "input set 2 of 3" for set 1 (counting from 0); empty when there is only one.
std::string input_set_text(int set, int sets) {
  return sets > 1 ? "input set " + std::to_string(set + 1) + " of " + std::to_string(sets) : "";
}

// Marks a check failure with the input set it came from, when there are several.
Difference from_input_set(Difference difference, int set, int sets) {
  if (difference.found() && sets > 1) difference.what = input_set_text(set, sets) + ": " + difference.what;
  return difference;
}

std::string progress_text(const std::string& name, int warmup_done, int warmup, int iters_done, int iters) {
  return name + ": warmup " + std::to_string(warmup_done) + "/" + std::to_string(warmup) + ", iter " +
         std::to_string(iters_done) + "/" + std::to_string(iters);
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
  result.tokens_per_rank = engine_tokens_per_rank(engine, options);
  result.delivered_rows = traffic.delivered_rows;
  if (!is_rank_major(engine)) {
    result.rows_per_expert =
        (engine == BenchEngine::symmetric ? problem.symmetric : problem.low_latency).rows_per_expert;
  }
  result.node_bytes = traffic.node_bytes();
  // The design bytes follow the paths the engine took: the symmetric combine's and dispatch's are known once its
  // Buffers connected (rank 0's; every rank resolves it alike).
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
  std::vector<Difference> check_differences(num_ranks), final_differences(num_ranks);
  std::vector<Difference> split_differences(num_ranks), graph_differences(num_ranks);
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
      // copies are done first), so the slowest rank's time is the phase's time (phase_clock.hpp).
      PhaseClock clock(group, *timer, synchronize);

      auto run_iteration = [&](int iteration, double* dispatch_time, double* combine_time) {
        session->prepare(iteration);
        *dispatch_time = clock.time([&] { session->dispatch(iteration); });
        session->expert(iteration);
        *combine_time = clock.time([&] { session->combine(iteration); });
      };
      auto reporter = [&](const std::string& row) {
        return [&, row](const std::string& what) {
          if (reports_progress) progress.update(name + ": " + row, name + ": " + row + " " + what);
        };
      };

      // One check iteration per input set, each into poisoned outputs: every set must pass. The dump
      // is the first set's.
      const int input_sets = session->num_input_sets();
      double untimed_dispatch = 0, untimed_combine = 0;
      int iteration = 0;
      for (int set = 0; set < input_sets; ++set) {
        if (reports_progress) {
          std::string what = name + ": check iteration";
          if (input_sets > 1) what += " (" + input_set_text(set, input_sets) + ")";
          progress.update(name + ": check", what);
        }
        session->poison_outputs();
        run_iteration(iteration++, &untimed_dispatch, &untimed_combine);
        synchronize();
        if (!check_differences[rank].found())
          check_differences[rank] = from_input_set(session->first_difference(), set, input_sets);
        if (dump && set == 0) {
          if (reports_progress) progress.update(name + ": dump", name + ": writing --dump files");
          session->dump(*dump);
        }
      }

      for (int done = 0; done < warmup; ++done) {
        if (reports_progress) progress.update(name + ": warmup", progress_text(name, done, warmup, 0, iters));
        run_iteration(iteration++, &untimed_dispatch, &untimed_combine);
      }
      for (int done = 0; done < iters; ++done) {
        if (reports_progress)
          progress.update(name + ": timing", progress_text(name, warmup, warmup, done, iters));
        run_iteration(iteration++, &dispatch_seconds[rank][done], &combine_seconds[rank][done]);
      }
      if (reports_progress) progress.update(name + ": final check", name + ": checking the last iteration");
      synchronize();
      final_differences[rank] =
          from_input_set(session->first_difference(), (iteration - 1) % input_sets, input_sets);
      if (!extra_rows) return;

      // The send and receive halves apart, then checked again. The library may refuse the hook for
      // these options (Unsupported, raised by its host-side checks on every rank alike): then the rows
      // say so rather than the engine being skipped.
      std::string split_unsupported = session->hook_split_unsupported();
      if (split_unsupported.empty()) {
        std::string refused;
        try {
          iteration = run_hook_split(*session, clock, iteration, warmup, iters, split_seconds[rank],
                                     reporter("hook split"));
        } catch (const Unsupported& error) {
          refused = error.what();
        }
        split_unsupported = agree_on_failure(group, "refused by the library", refused);
        if (split_unsupported.empty()) split_differences[rank] = session->first_difference();
      }
      if (rank == 0) hook_split_status = split_unsupported.empty() ? kMeasured : split_unsupported;

      // CUDA graph replay last: the captured handle stays with the session until it is destroyed.
      std::string graph_unsupported =
          options.backend == Backend::cpu ? std::string(kNoGraphOnCpu) : session->graph_capture_unsupported();
      if (graph_unsupported.empty()) {
        graph_unsupported = run_graph_replays(*session, clock, group, stream, iteration, warmup, iters,
                                              graph_seconds[rank], reporter("graph replay"));
        if (graph_unsupported.empty()) graph_differences[rank] = session->first_difference();
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
  // The first check that failed, in the order they ran.
  std::string failure = describe_failure(check_differences);
  const std::pair<const std::vector<Difference>*, const char*> later_checks[] = {
      {&final_differences, "after the timed iterations: "},
      {&split_differences, "after the hook split iterations: "},
      {&graph_differences, "after the graph replays: "}};
  for (const auto& [differences, when] : later_checks) {
    if (!failure.empty()) break;
    failure = describe_failure(*differences);
    if (!failure.empty()) failure = when + failure;
  }
  result.status = failure.empty() ? CheckStatus::passed : CheckStatus::failed;
  result.detail = failure;
  return result;
}

}  // namespace switchyard::bench
