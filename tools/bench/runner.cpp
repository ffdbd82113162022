#include "runner.hpp"

#include <algorithm>
#include <memory>
#include <vector>

#include "engines.hpp"
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
    buffer.sizing.symmetric_max_tokens_per_rank = options.ll_tokens_per_rank;
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

// The graph replay row of the issue (low_latency on cuda: the launch-free latency). A seam: nothing
// is measured yet, and the row says why rather than showing numbers.
std::string graph_replay_status(BenchEngine engine, Backend backend) {
  if (engine != BenchEngine::low_latency) return "";
  if (backend == Backend::cpu) return "not available (cpu backend)";
  return "not implemented yet";
}

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
  return is_rank_major(engine) ? options.tokens_per_rank : options.ll_tokens_per_rank;
}

const Traffic& engine_traffic(BenchEngine engine, const Problem& problem) {
  return is_rank_major(engine) ? problem.traffic : problem.low_latency.traffic;
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
  result.node_bytes = traffic.node_bytes();
  result.graph_replay = graph_replay_status(engine, options.backend);

  std::vector<std::vector<double>> dispatch_seconds(num_ranks, std::vector<double>(iters));
  std::vector<std::vector<double>> combine_seconds(num_ranks, std::vector<double>(iters));
  std::vector<Difference> check_differences(num_ranks), final_differences(num_ranks);

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

      // Every rank starts each phase together, so the slowest rank's time is the phase's time: each
      // rank first waits for its own stream (on cuda, the layout or the expert's copies; this also
      // raises any error a kernel recorded), so that every stream is idle when the barrier releases
      // the ranks and every start event marks the same moment. After each phase the stream is
      // drained the same way before its events are read (the events are already recorded, so this
      // does not change the time; it bounds the wait for nccl).
      auto run_iteration = [&](int iteration, double* dispatch_time, double* combine_time) {
        session->prepare(iteration);
        synchronize();
        group.barrier();
        timer->start();
        session->dispatch(iteration);
        timer->stop();
        synchronize();
        *dispatch_time = timer->elapsed_seconds();
        session->expert(iteration);
        synchronize();
        group.barrier();
        timer->start();
        session->combine(iteration);
        timer->stop();
        synchronize();
        *combine_time = timer->elapsed_seconds();
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

  result.timed = true;
  result.note = note;
  const std::vector<double> slowest_dispatch = slowest_per_iteration(dispatch_seconds);
  const std::vector<double> slowest_combine = slowest_per_iteration(combine_seconds);
  result.dispatch_seconds = median(slowest_dispatch);
  result.combine_seconds = median(slowest_combine);
  result.dispatch_p99_seconds = percentile(slowest_dispatch, 99);
  result.combine_p99_seconds = percentile(slowest_combine, 99);
  std::string failure = describe_failure(check_differences);
  if (failure.empty()) {
    failure = describe_failure(final_differences);
    if (!failure.empty()) failure = "after the timed iterations: " + failure;
  }
  result.status = failure.empty() ? CheckStatus::passed : CheckStatus::failed;
  result.detail = failure;
  return result;
}

}  // namespace switchyard::bench
