#include "report.hpp"

#include <cinttypes>
#include <string>
#include <vector>

#include "kernel_launches.hpp"
#include "metrics.hpp"
#include "start_hold.hpp"
#include "switchyard/version.hpp"

namespace switchyard::bench {
namespace {

// A fraction in its column, or n/a.
std::string fraction_text(std::optional<double> fraction) {
  if (!fraction) return "n/a";
  char text[32];
  std::snprintf(text, sizeof(text), "%.3f", *fraction);
  return text;
}

std::string optional_text(std::optional<double> value, const char* format) {
  if (!value) return "-";
  char text[32];
  std::snprintf(text, sizeof(text), format, *value);
  return text;
}

void print_table_header(std::FILE* out) {
  std::fprintf(out, "  %-17s %11s %11s %10s %10s %8s %8s\n", "phase", "median us", "p99 us", "ns/token",
               "GB/s/rank", "minimal", "design");
}

// A whole phase (plain calls or graph replays): time per token, GB/s per rank (absent for the graph
// rows, which have no per-rank times) and both fractions.
void print_phase(std::FILE* out, const char* phase, const PhaseTiming& timing, int64_t tokens_per_rank,
                 std::optional<double> gbps_per_rank, std::optional<double> bound,
                 std::optional<double> design_bound) {
  std::fprintf(out, "  %-17s %11.1f %11.1f %10s %10s %8s %8s\n", phase, timing.median_seconds * 1e6,
               timing.p99_seconds * 1e6,
               optional_text(nanoseconds_per_token(timing.median_seconds, tokens_per_rank), "%.1f").c_str(),
               optional_text(gbps_per_rank, "%.2f").c_str(),
               fraction_text(phase_fraction(bound, timing.median_seconds)).c_str(),
               fraction_text(phase_fraction(design_bound, timing.median_seconds)).c_str());
}

// Half a phase (the hook split): times only; the rest belongs to whole phases.
void print_half(std::FILE* out, const char* half, const std::optional<PhaseTiming>& timing) {
  if (!timing) return;
  std::fprintf(out, "  %-17s %11.1f %11.1f %10s %10s %8s %8s\n", half, timing->median_seconds * 1e6,
               timing->p99_seconds * 1e6, "-", "-", "-", "-");
}

// Saved bytes and direct / hierarchical; the ratio is n/a when no byte crosses the network.
void print_saving(std::FILE* out, const char* phase, int64_t direct, int64_t rdma) {
  std::fprintf(out,
               "  %-10s direct RDMA %" PRId64 " bytes, hierarchical %" PRId64 ": saves %" PRId64 " bytes",
               phase, direct, rdma, direct - rdma);
  if (rdma > 0) {
    std::fprintf(out, " (direct / hierarchical = %.2fx)\n",
                 static_cast<double>(direct) / static_cast<double>(rdma));
  } else {
    std::fprintf(out, " (direct / hierarchical = n/a)\n");
  }
}

// What the graph and hook split rows say besides their times: launch, or why a row is missing.
void print_extra_rows(std::FILE* out, const EngineResult& result) {
  const std::optional<double> dispatch_launch =
      launch_seconds(result.dispatch_seconds, result.graph_dispatch);
  const std::optional<double> combine_launch = launch_seconds(result.combine_seconds, result.graph_combine);
  if (dispatch_launch && combine_launch) {
    std::fprintf(out, "  launch (plain call - graph replay, medians): dispatch %.1f us, combine %.1f us\n",
                 *dispatch_launch * 1e6, *combine_launch * 1e6);
  } else if (!result.graph_replay.empty() && result.graph_replay != kNoGraphOnCpu) {
    std::fprintf(out, "  graph replay: skipped: %s\n", result.graph_replay.c_str());
  }
  if (!result.hook_split.empty() && result.hook_split != kMeasured) {
    std::fprintf(out, "  hook split: %s\n", result.hook_split.c_str());
  }
}

// low_latency across nodes: no hierarchy, so no direct column and no saving.
void print_direct_node_bytes(std::FILE* out, const NodeBytes& bytes) {
  std::fprintf(
      out,
      "  across nodes (per iteration, all ranks): RDMA = transport puts and signal adds to ranks of other "
      "nodes, NVLink = stores to ranks of the own node (itself included); dispatch messages (row, scales, "
      "16-byte source fields), bf16 combine rows, 8 bytes a signal\n");
  std::fprintf(out, "  %-10s %16s %16s %16s\n", "phase", "RDMA bytes", "NVLink bytes", "RDMA signals");
  std::fprintf(out, "  %-10s %16" PRId64 " %16" PRId64 " %16" PRId64 "\n", "dispatch", bytes.rdma_dispatch,
               bytes.nvlink_dispatch, bytes.rdma_dispatch_signals);
  std::fprintf(out, "  %-10s %16" PRId64 " %16" PRId64 " %16" PRId64 "\n", "combine", bytes.rdma_combine,
               bytes.nvlink_combine, bytes.rdma_combine_signals);
}

void print_node_bytes(std::FILE* out, const NodeBytes& bytes) {
  if (!bytes.forwarded) {
    print_direct_node_bytes(out, bytes);
    return;
  }
  std::fprintf(
      out,
      "  across nodes (per iteration, all ranks): RDMA = (token, other destination node) rows, NVLink = "
      "(token, destination rank) rows, local node included; x row payload\n");
  std::fprintf(out, "  %-10s %16s %16s %16s\n", "phase", "RDMA bytes", "NVLink bytes", "direct RDMA");
  std::fprintf(out, "  %-10s %16" PRId64 " %16" PRId64 " %16" PRId64 "\n", "dispatch", bytes.rdma_dispatch,
               bytes.nvlink_dispatch, bytes.direct_rdma_dispatch);
  std::fprintf(out, "  %-10s %16" PRId64 " %16" PRId64 " %16" PRId64 "\n", "combine", bytes.rdma_combine,
               bytes.nvlink_combine, bytes.direct_rdma_combine);
  print_saving(out, "dispatch", bytes.direct_rdma_dispatch, bytes.rdma_dispatch);
  print_saving(out, "combine", bytes.direct_rdma_combine, bytes.rdma_combine);
  std::fprintf(out,
               "  own node: %" PRId64 " dispatch, %" PRId64
               " combine bytes of (token, own node) rows take the RDMA path too (a put to itself: design "
               "bytes, not network bytes)\n",
               bytes.own_node_dispatch, bytes.own_node_combine);
}

// How a phase started by a hold is timed (StartTiming).
std::string timing_rule(StartTiming timing) {
  switch (timing) {
    case StartTiming::release_mark:
      break;
    case StartTiming::before_hold:
      return ", start event before the hold, its span taken off (SWITCHYARD_BENCH_START_EVENT=before_hold)";
    case StartTiming::after_hold:
      return ", start event after the hold (SWITCHYARD_BENCH_START_EVENT=after_hold)";
  }
  return ", timed on the GPU's clock from the hold's release to a mark after the call";
}

// Where each rank's time of a phase starts (--start).
std::string start_rule(const BenchOptions& options) {
  if (options.start == StartMode::timer) {
    char ahead[32];
    std::snprintf(ahead, sizeof(ahead), "%g", options.start_ahead_us);
    return std::string("every rank's stream held until one moment ") + ahead +
           " us ahead on the GPU's clock" + timing_rule(start_timing_from_environment());
  }
  return options.backend == Backend::cuda ? "every rank leaves a host barrier, then records its start event"
                                          : "every rank leaves a host barrier, then reads the wall clock";
}

// The timed phases whose moment came before the rank began the call (its stream already past the start
// event): their times hold that rank's lateness again.
void print_missed_start_holds(std::FILE* out, const EngineResult& result) {
  if (result.start_holds_missed == 0) return;
  std::fprintf(out,
               "  warning: the start hold had passed before the call began in %" PRId64 " of %" PRId64
               " timed phases, all ranks (raise --start-ahead-us)\n",
               result.start_holds_missed, result.start_holds);
}

}  // namespace

void print_header(std::FILE* out, const BenchOptions& options, const CopyBandwidth& copy,
                  const Problem& problem, const std::string& cache_rule) {
  const Traffic& traffic = problem.traffic;
  const Topology& topology = options.topology;
  std::fprintf(out,
               "switchyard-bench %s: backend %s, %d ranks (%d node%s of %d), %" PRId64
               " tokens per rank, hidden %d, top-%d of %d experts, %s, seed %llu\n",
               SWITCHYARD_VERSION_STRING, backend_name(options.backend), topology.num_ranks,
               topology.num_nodes(), topology.num_nodes() == 1 ? "" : "s", topology.ranks_per_node,
               options.tokens_per_rank, options.hidden, options.topk, options.num_experts,
               dtype_name(options.dtype), static_cast<unsigned long long>(options.seed));
  std::fprintf(out, "shape: %s (%s; --shape laptop|deepseek-v3, and the shape flags override it)\n",
               options.notes.shape.c_str(), options.notes.shape_source.c_str());
  if (options.notes.iters_from_cpu_default) {
    std::fprintf(out, "cpu backend: --iters defaults to %d (GPU default %d)\n", options.iters,
                 kGpuDefaultIters);
  }
  const Config& config = options.config;
  std::string channels = config.num_channels == kAutoChannels ? "auto" : std::to_string(config.num_channels);
  std::fprintf(out, "config: channels %s, ring slots %d, chunk tokens %d, timeout %g s\n", channels.c_str(),
               config.ring_slots, config.chunk_tokens, config.timeout_seconds);
  const std::string launches = dependent_launch_line(options.backend);
  if (!launches.empty()) std::fprintf(out, "%s\n", launches.c_str());
  if (options.normal_heap && !options.normal_heap_staged) {
    std::fprintf(
        out,
        "normal heap inputs: on (x and the expert outputs in the heap, read in place where the backend "
        "does: docs/normal-in-place.md)\n");
  } else if (options.normal_heap) {
    std::fprintf(out,
                 "normal heap inputs: staged (the calls pass ordinary x and expert outputs, which the Buffer "
                 "copies into its heap inputs inside each timed call; read in place from there)\n");
  }
  std::fprintf(out, "devices: %s\n", options.devices.describe().c_str());
  std::fprintf(out, "ranks as %s (%s)\n", ranks_as_name(options.ranks_as),
               options.notes.ranks_as_source.c_str());
  if (options.ranks_as == RanksAs::processes && options.devices.shares_a_device()) {
    std::fprintf(out,
                 "note: processes share a GPU: run under MPS (nvidia-cuda-mps-control -d), or their kernels "
                 "time-slice and the waits between ranks crawl\n");
  }
  std::fprintf(out, "copy bandwidth: %.2f GB/s (%s)\n", copy.bytes_per_second / 1e9, copy.method.c_str());
  if (copy.peer) {
    std::fprintf(out,
                 "peer copy bandwidth: %.2f GB/s all %d GPUs to each other at once (the bound of bytes "
                 "between GPUs); %.2f GB/s one pair alone (%s)\n",
                 copy.peer->all_pairs_bytes_per_second / 1e9, copy.peer->devices,
                 copy.peer->pair_bytes_per_second / 1e9, copy.peer->method.c_str());
  }
  if (options.runs_rank_major()) {
    std::fprintf(out,
                 "traffic: %" PRId64 " delivered rows (token, destination rank) over all ranks; %" PRId64
                 " bytes per dispatch row, %" PRId64 " per combine row\n",
                 traffic.delivered_rows, traffic.dispatch_row_bytes, traffic.combine_row_bytes);
  }
  const char* cast = options.dtype == DType::fp8_e4m3 ? " cast to fp8 by the engine (use_fp8)" : "";
  if (options.runs(BenchEngine::low_latency)) {
    // NOTES: its receive slots are L x R x max rows per rank in the heap (and in recv_x): at 4096
    // tokens that is 32 x 32768 rows of 14 KiB per rank, beyond one GPU for 8 ranks.
    std::fprintf(out,
                 "low_latency: %" PRId64
                 " tokens per rank (%s; its heap holds local experts x ranks x tokens rows "
                 "per rank, so it stays at decode size), bf16 inputs%s\n",
                 options.ll_tokens_per_rank, options.notes.ll_tokens_source.c_str(), cast);
  }
  if (options.runs(BenchEngine::symmetric)) {
    const LowLatencyReference& symmetric = problem.symmetric;
    std::string capacity =
        "0, R x max = " + std::to_string(symmetric.rows_per_expert) + " rows per local expert";
    if (options.expert_capacity == kAutoExpertCapacity) {
      capacity = "auto = " + std::to_string(symmetric.expert_capacity) +
                 " rows per local expert (the most any receives, rounded up to a multiple of " +
                 std::to_string(kExpertCapacityMultiple) + ")";
    } else if (options.expert_capacity > 0) {
      capacity = std::to_string(symmetric.expert_capacity) + " rows per local expert";
    }
    std::fprintf(out, "symmetric: %" PRId64 " tokens per rank (%s), expert_capacity %s, bf16 inputs%s\n",
                 options.symmetric_tokens_per_rank, options.notes.symmetric_tokens_source.c_str(),
                 capacity.c_str(), cast);
  }
  if (options.cache_flush) {
    std::fprintf(
        out, "cache: before every timed phase %s, so that nothing from the previous iteration is cached%s\n",
        cache_rule.c_str(),
        options.backend == Backend::cuda ? "; normal's inputs also rotate over input sets" : "");
  } else {
    std::fprintf(out, "cache: %s%s\n", cache_rule.c_str(),
                 options.backend == Backend::cuda ? "; normal's inputs still rotate over input sets" : "");
  }
  std::fprintf(out,
               "checks: every iteration (check, warmup, timed, hook split, graph replay) writes into outputs "
               "poisoned just before it and is compared bit for bit with the reference just after it, "
               "outside the timed window\n");
  std::fprintf(
      out,
      "time: per iteration the slowest rank's time, median and p99 over the iterations; ns/token: that "
      "over the tokens of one rank\n");
  std::fprintf(out, "start: %s (%s)\n", start_rule(options).c_str(), options.notes.start_source.c_str());
  std::fprintf(
      out,
      "GB/s/rank: one rank's received rows x row bytes / that rank's median time, the mean over the ranks "
      "(DeepEP's convention); 'all ranks' figures say so\n"
      "minimal: the minimal bound / the time, where the bound reads every input byte once and writes every "
      "output byte once in device memory, and moves the bytes between GPUs once, over the bandwidths "
      "measured above; above 1 fails the run\n"
      "design: the same with the bytes the engine's own passes move (see --help)\n");
  if (options.runs_expert_major()) {
    std::fprintf(out,
                 "expert-major engines: '(graph)' rows are CUDA graph replays of the same calls, launch = "
                 "plain call - graph replay; 'send' and 'recv' rows are the halves of low_latency's calls "
                 "apart, with a host barrier between them\n");
  }
}

void print_engine(std::FILE* out, const EngineResult& result, const CopyBandwidth& copy) {
  const char* name = bench_engine_name(result.engine);
  std::fprintf(out, "\n");
  if (result.status == CheckStatus::skipped) {
    std::fprintf(out, "%s: skipped: %s\n", name, result.detail.c_str());
    return;
  }
  if (result.timed) {
    std::fprintf(out,
                 "%s: %d timed iterations after %d warmup; %" PRId64 " tokens per rank, %" PRId64
                 " delivered rows (%s)\n",
                 name, result.iters, result.warmup, result.tokens_per_rank, result.delivered_rows,
                 is_rank_major(result.engine) ? "token, destination rank" : "token, expert");
    if (result.rows_per_expert > 0) {
      std::fprintf(out,
                   "  recv_x: %" PRId64 " rows per local expert (expert_capacity; R x max when not set)\n",
                   result.rows_per_expert);
    }
    if (!result.note.empty()) std::fprintf(out, "  %s\n", result.note.c_str());
    const PhaseBounds minimal = minimal_bounds(result, copy);
    const PhaseBounds design = design_bounds(result, copy);
    const std::optional<double> dispatch_per_rank = gigabytes_per_second_per_rank(
        result.received_rows_by_rank, result.dispatch_row_bytes, result.dispatch_rank_seconds);
    const std::optional<double> combine_per_rank = gigabytes_per_second_per_rank(
        result.received_rows_by_rank, result.combine_row_bytes, result.combine_rank_seconds);
    print_table_header(out);
    print_phase(out, "dispatch", {result.dispatch_seconds, result.dispatch_p99_seconds},
                result.tokens_per_rank, dispatch_per_rank, minimal.dispatch, design.dispatch);
    print_phase(out, "combine", {result.combine_seconds, result.combine_p99_seconds}, result.tokens_per_rank,
                combine_per_rank, minimal.combine, design.combine);
    if (result.graph_dispatch && result.graph_combine) {
      print_phase(out, "dispatch (graph)", *result.graph_dispatch, result.tokens_per_rank, std::nullopt,
                  minimal.dispatch, design.dispatch);
      print_phase(out, "combine (graph)", *result.graph_combine, result.tokens_per_rank, std::nullopt,
                  minimal.combine, design.combine);
    }
    print_half(out, "dispatch send", result.dispatch_send);
    print_half(out, "dispatch recv", result.dispatch_recv);
    print_half(out, "combine send", result.combine_send);
    print_half(out, "combine recv", result.combine_recv);
    print_extra_rows(out, result);
    if (result.node_bytes) print_node_bytes(out, *result.node_bytes);
    const std::optional<double> dispatch_all =
        gigabytes_per_second(result.dispatch_bytes, result.dispatch_seconds);
    const std::optional<double> combine_all =
        gigabytes_per_second(result.combine_bytes, result.combine_seconds);
    std::fprintf(out,
                 "  all ranks: %" PRId64 " dispatch bytes, %" PRId64
                 " combine bytes (rows x row payload); %s and %s GB/s over the slowest rank's median\n",
                 result.dispatch_bytes, result.combine_bytes, optional_text(dispatch_all, "%.2f").c_str(),
                 optional_text(combine_all, "%.2f").c_str());
    if (result.dispatch_host_behind_hold) {
      std::fprintf(
          out,
          "  host: dispatch call n/a (it waits for the device's counts, which sit behind the start "
          "hold: its wall time would be the hold's lead; --start barrier times it), combine call %.1f "
          "us (the call's wall time on the host)\n",
          result.combine_host_seconds * 1e6);
    } else {
      std::fprintf(out,
                   "  host: dispatch call %.1f us, combine call %.1f us (the calls' wall time on the host)\n",
                   result.dispatch_host_seconds * 1e6, result.combine_host_seconds * 1e6);
    }
    print_missed_start_holds(out, result);
    if (result.remote_dispatch_bytes > 0 || result.remote_combine_bytes > 0) {
      std::fprintf(out,
                   "  between GPUs: %" PRId64 " dispatch bytes, %" PRId64
                   " combine bytes, the rest within one GPU\n",
                   result.remote_dispatch_bytes, result.remote_combine_bytes);
    }
    std::fprintf(
        out,
        "  minimal bound: dispatch %s us, combine %s us; memory bytes: dispatch %" PRId64 ", combine %" PRId64
        "\n",
        optional_text(minimal.dispatch ? std::optional<double>(*minimal.dispatch * 1e6) : std::nullopt,
                      "%.1f")
            .c_str(),
        optional_text(minimal.combine ? std::optional<double>(*minimal.combine * 1e6) : std::nullopt, "%.1f")
            .c_str(),
        result.minimal_dispatch_bytes, result.minimal_combine_bytes);
    if (result.design_dispatch_bytes && result.design_combine_bytes) {
      std::fprintf(out, "  design bytes: dispatch %" PRId64 ", combine %" PRId64 "; passes: %s\n",
                   *result.design_dispatch_bytes, *result.design_combine_bytes, result.design_passes.c_str());
    } else {
      std::fprintf(out, "  design roofline: %s\n", result.design_note.c_str());
    }
    std::fprintf(out, "  both phases: minimal %s, design %s",
                 fraction_text(minimal_fraction(result, copy)).c_str(),
                 fraction_text(design_fraction(result, copy)).c_str());
    if (result.graph_dispatch && result.graph_combine) {
      std::fprintf(out, "; graph replays: minimal %s, design %s",
                   fraction_text(graph_replay_fraction(result, minimal)).c_str(),
                   fraction_text(graph_replay_fraction(result, design)).c_str());
    }
    std::fprintf(out, "\n");
  } else {
    std::fprintf(out, "%s: not timed\n", name);
  }
  switch (result.status) {
    case CheckStatus::passed:
      std::fprintf(out, "  check: pass, %d iterations each into poisoned outputs\n",
                   result.checked_iterations);
      break;
    case CheckStatus::failed:
      std::fprintf(out, "  check: fail: %s\n", result.detail.c_str());
      break;
    case CheckStatus::error:
      std::fprintf(out, "  check: error: %s\n", result.detail.c_str());
      break;
    case CheckStatus::skipped:
      break;
  }
}

std::optional<NcclComparison> compare_with_nccl(const EngineResult& result,
                                                const std::vector<EngineResult>& results) {
  const EngineResult* nccl = nullptr;
  for (const EngineResult& candidate : results) {
    if (candidate.engine == BenchEngine::nccl && candidate.timed) nccl = &candidate;
  }
  if (!nccl || !result.timed || result.engine == BenchEngine::nccl) return std::nullopt;
  if (result.tokens_per_rank != nccl->tokens_per_rank) return std::nullopt;
  if (!(result.dispatch_seconds > 0) || !(result.combine_seconds > 0)) return std::nullopt;
  NcclComparison comparison;
  comparison.dispatch = nccl->dispatch_seconds / result.dispatch_seconds;
  comparison.combine = nccl->combine_seconds / result.combine_seconds;
  comparison.total =
      (nccl->dispatch_seconds + nccl->combine_seconds) / (result.dispatch_seconds + result.combine_seconds);
  return comparison;
}

void print_nccl_comparison(std::FILE* out, const std::vector<EngineResult>& results) {
  bool header = false;
  for (const EngineResult& result : results) {
    std::optional<NcclComparison> comparison = compare_with_nccl(result, results);
    if (!comparison) continue;
    if (!header) {
      std::fprintf(
          out,
          "\nvs nccl (nccl's median time / the engine's, same tokens per rank; > 1: faster than nccl)\n");
      header = true;
    }
    std::fprintf(out, "  %-12s dispatch %.2fx, combine %.2fx, both %.2fx\n", bench_engine_name(result.engine),
                 comparison->dispatch, comparison->combine, comparison->total);
  }
}

}  // namespace switchyard::bench
