#include "rank_run.hpp"

#include <algorithm>
#include <cstdlib>
#include <string>

#include "cache_flush.hpp"
#include "engine_session.hpp"
#include "engines.hpp"
#include "fault_injection.hpp"
#include "phase_clock.hpp"
#include "rank_agreement.hpp"
#include "rank_stream.hpp"
#include "runner.hpp"
#include "start_hold.hpp"
#include "switchyard/errors.hpp"
#include "timer.hpp"

namespace switchyard::bench {
namespace {

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

BufferOptions bench_buffer_options(const BenchOptions& options, BenchEngine engine, int rank,
                                   int64_t symmetric_rows_per_expert) {
  BufferOptions buffer;
  buffer.topology = options.topology;
  buffer.rank = rank;
  buffer.backend = options.backend;
  buffer.device = options.devices.device(rank);  // --devices: one GPU per rank, or shared
  buffer.sharing = options.ranks_as == RanksAs::processes ? HeapSharing::processes : HeapSharing::threads;
  buffer.config = options.config;
  // low_latency's Buffers are sized for its calls only (the normal region for --ll-tokens too). The
  // library sizes for at least one token; 0 tokens on every rank is still a valid step.
  buffer.sizing.max_tokens_per_rank = std::max<int64_t>(1, engine_tokens_per_rank(engine, options));
  if (engine == BenchEngine::low_latency)
    buffer.sizing.low_latency_max_tokens_per_rank = std::max<int64_t>(1, options.ll_tokens_per_rank);
  if (engine == BenchEngine::symmetric) {
    buffer.sizing.symmetric_max_tokens_per_rank = std::max<int64_t>(1, options.symmetric_tokens_per_rank);
    if (options.symmetric_heap) {
      buffer.sizing.symmetric_heap_input = true;
      buffer.sizing.symmetric_heap_output_rows_per_expert = symmetric_rows_per_expert;
      // recv_x too, in the run's dtype: the dispatch's outputs that every source pushes into.
      buffer.sizing.symmetric_heap_receive_rows_per_expert = symmetric_rows_per_expert;
      buffer.sizing.symmetric_heap_receive_dtype =
          options.dtype == DType::bf16 ? DType::bf16 : DType::fp8_e4m3;
    }
  }
  if (engine == BenchEngine::normal && options.normal_heap) {
    // Room for every rank's tokens, and for the most rows one rank can receive.
    buffer.sizing.normal_heap_input_tokens = buffer.sizing.max_tokens_per_rank;
    buffer.sizing.normal_heap_combine_rows = options.topology.num_ranks * buffer.sizing.max_tokens_per_rank;
  }
  buffer.sizing.hidden = options.hidden;
  buffer.sizing.topk = options.topk;
  buffer.sizing.num_experts = options.num_experts;
  buffer.sizing.dtype = options.dtype;
  return buffer;
}

RankOutcome run_rank(const RankRun& run, Group& group, std::unique_ptr<Buffer>& buffer_slot) {
  const BenchOptions& options = *run.options;
  const BenchEngine engine = run.engine;
  const std::string name = bench_engine_name(engine);
  const int rank = group.rank();
  const int warmup = options.warmup;
  const int iters = options.iters;
  const bool reports_progress = rank == 0 && run.progress != nullptr;
  // The expert-major engines' extra rows: the send/receive split and CUDA graph replay.
  const bool extra_rows = !is_rank_major(engine);
  const int device = options.devices.device(rank);

  RankOutcome outcome;
  outcome.dispatch_seconds.assign(static_cast<size_t>(iters), 0.0);
  outcome.combine_seconds.assign(static_cast<size_t>(iters), 0.0);
  outcome.dispatch_host_seconds.assign(static_cast<size_t>(iters), 0.0);
  outcome.combine_host_seconds.assign(static_cast<size_t>(iters), 0.0);

  // First: on cuda it makes the rank's device current on this thread. Destroyed last, after the
  // session and the timer that use it.
  const RankStream rank_stream(options.backend, device);
  const Stream stream = rank_stream.get();
  Buffer* buffer = nullptr;
  if (uses_switchyard_buffer(engine)) {
    buffer_slot = std::make_unique<Buffer>(
        bench_buffer_options(options, engine, rank, run.problem->symmetric.rows_per_expert));
    buffer = buffer_slot.get();
    buffer->connect(group.allgather(buffer->local_handle()));
    if (engine == BenchEngine::symmetric) {
      outcome.symmetric_combine = buffer->symmetric_combine_path();
      outcome.symmetric_dispatch = buffer->symmetric_dispatch_path();
      if (options.symmetric_heap && outcome.symmetric_dispatch != SymmetricDispatch::push) {
        // Heap-resident outputs (the receive area) are pushed into on CUDA under auto, also as processes,
        // unless SWITCHYARD_SYMMETRIC_PULL names a pull (the engine's rule, cuda/symmetric/engine.cpp);
        // else heap-resident bf16 rows are read in place whatever the buffer's path for other x.
        const char* pull = std::getenv("SWITCHYARD_SYMMETRIC_PULL");
        const bool pull_named =
            pull != nullptr && (std::string(pull) == "tma" || std::string(pull) == "warps");
        if (options.backend == Backend::cuda &&
            options.config.symmetric_dispatch == SymmetricDispatch::automatic && !pull_named) {
          outcome.symmetric_dispatch = SymmetricDispatch::push;
        } else if (options.dtype == DType::bf16) {
          outcome.symmetric_dispatch = SymmetricDispatch::zero_copy;
        }
      }
    }
  }
  const SessionContext context{&options, run.problem, buffer, rank, stream, &group, device};
  std::unique_ptr<EngineSession> session = make_engine_session(engine, context);
  outcome.note = session->note();
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
  CacheFlush cache_flush(options.backend, stream, options.cache_flush && evicts_cache(options, rank));
  outcome.cache_flush_bytes = static_cast<int64_t>(cache_flush.bytes());
  StartHold start_hold(group, stream, options.start, options.start_ahead_us);
  PhaseClock clock(
      group, *timer, synchronize, [&] { cache_flush.run(); }, &start_hold);
  // Every row's timed phases, read whenever the rank returns.
  auto count_start_holds = [&] {
    outcome.start_holds = clock.start_holds();
    outcome.start_holds_missed = clock.start_holds_missed();
  };

  // After every round of calls, outside the timed window: the outputs against the reference.
  const RoundCheck check = [&](const std::string& round) {
    ++outcome.checked_iterations;
    if (outcome.difference.found()) return;
    Difference difference = session->first_difference();
    if (difference.found()) difference.what = round + ": " + difference.what;
    outcome.difference = difference;
  };
  // One untimed iteration into outputs poisoned just before it, checked just after it.
  auto run_untimed_iteration = [&](int iteration, const std::string& label) {
    session->poison_outputs();
    session->prepare(iteration);
    clock.time([&] { session->dispatch(iteration); }, PhaseClock::Cache::keep);
    session->expert(iteration);
    clock.time([&] { session->combine(iteration); }, PhaseClock::Cache::keep);
    synchronize();
    check(label);
  };
  // The bar's steps: every iteration, of the plain calls and of the extra rows.
  const int total_steps = session->num_input_sets() + (warmup + iters) * (extra_rows ? 3 : 1);
  int steps_done = 0;
  auto report = [&](const std::string& what) {
    if (reports_progress) run.progress->update(name + ": " + what, steps_done++, total_steps);
  };

  // One check iteration per input set: every set must pass. The dump is the first set's.
  const int sets = session->num_input_sets();
  outcome.input_sets = sets;
  int iteration = 0;
  for (int set = 0; set < sets; ++set) {
    const std::string label = check_label(set, sets);
    report(label);
    run_untimed_iteration(iteration++, label);
    if (run.dump && set == 0) {
      if (reports_progress) run.progress->update(name + ": writing --dump files");
      session->dump(*run.dump);
    }
  }
  for (int done = 0; done < warmup; ++done) {
    const std::string label = "warmup iteration " + std::to_string(done + 1) + "/" + std::to_string(warmup);
    report(label);
    run_untimed_iteration(iteration++, label);
  }
  const int forgotten_iteration = forgotten_timed_iteration();
  for (int done = 0; done < iters; ++done) {
    const std::string label = "timed iteration " + std::to_string(done + 1) + "/" + std::to_string(iters);
    report(label);
    session->poison_outputs();
    session->prepare(iteration);
    outcome.dispatch_seconds[done] = clock.time([&] { session->dispatch(iteration); });
    outcome.dispatch_host_seconds[done] = clock.last_host_seconds();
    session->expert(iteration);
    outcome.combine_seconds[done] = clock.time([&] { session->combine(iteration); });
    outcome.combine_host_seconds[done] = clock.last_host_seconds();
    synchronize();
    if (rank == 0 && done + 1 == forgotten_iteration) session->poison_outputs();
    check(label);
    ++iteration;
  }
  count_start_holds();
  if (!extra_rows) return outcome;

  // The send and receive halves apart, each iteration checked. The library may refuse the hook for
  // these options (Unsupported, raised by its host-side checks on every rank alike): then the rows
  // say so rather than the engine being skipped.
  std::string split_unsupported = session->hook_split_unsupported();
  if (split_unsupported.empty()) {
    std::string refused;
    try {
      iteration =
          run_hook_split(*session, clock, iteration, warmup, iters, outcome.split_seconds, report, check);
    } catch (const Unsupported& error) {
      refused = error.what();
    }
    split_unsupported = agree_on_failure(group, "refused by the library", refused);
  }
  outcome.hook_split_status = split_unsupported.empty() ? kMeasured : split_unsupported;

  // CUDA graph replay last: the captured handle stays with the session until it is destroyed.
  std::string graph_unsupported =
      options.backend == Backend::cpu ? std::string(kNoGraphOnCpu) : session->graph_capture_unsupported();
  if (graph_unsupported.empty()) {
    graph_unsupported = run_graph_replays(*session, clock, group, stream, iteration, warmup, iters,
                                          outcome.graph_seconds, report, check);
  }
  outcome.graph_status = graph_unsupported.empty() ? kMeasured : graph_unsupported;
  count_start_holds();
  return outcome;
}

}  // namespace switchyard::bench
