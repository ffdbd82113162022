// --json FILE: the options, the copy bandwidths and every engine's results.
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "kernel_launches.hpp"
#include "metrics.hpp"
#include "report.hpp"
#include "start_hold.hpp"
#include "switchyard/version.hpp"

namespace switchyard::bench {
namespace {

using Json = nlohmann::ordered_json;

// A value, or null when absent.
template <typename T>
Json or_null(const std::optional<T>& value) {
  return value ? Json(*value) : Json(nullptr);
}

Json text_or_null(const std::string& text) {
  return text.empty() ? Json(nullptr) : Json(text);
}

std::optional<double> microseconds(std::optional<double> seconds) {
  return seconds ? std::optional<double>(*seconds * 1e6) : std::nullopt;
}

// Across nodes, the normal engine's bytes by link (NodeTraffic); null on one node and when it did not run.
void add_forwarded_node_bytes(Json& out, const EngineResult& result) {
  const bool across = result.timed && result.node_bytes.has_value() && result.node_bytes->forwarded;
  const NodeBytes node = across ? *result.node_bytes : NodeBytes{};
  auto field = [&](const char* name, int64_t value) { out[name] = across ? Json(value) : Json(nullptr); };
  field("rdma_dispatch_bytes", node.rdma_dispatch);
  field("nvlink_dispatch_bytes", node.nvlink_dispatch);
  field("direct_rdma_dispatch_bytes", node.direct_rdma_dispatch);
  field("rdma_combine_bytes", node.rdma_combine);
  field("nvlink_combine_bytes", node.nvlink_combine);
  field("direct_rdma_combine_bytes", node.direct_rdma_combine);
  field("rdma_dispatch_saved_bytes", node.direct_rdma_dispatch - node.rdma_dispatch);
  field("rdma_combine_saved_bytes", node.direct_rdma_combine - node.rdma_combine);
  field("own_node_dispatch_bytes", node.own_node_dispatch);
  field("own_node_combine_bytes", node.own_node_combine);
}

// The expert-major engines: what low_latency sends over each link across nodes (no hierarchy, so no
// direct or saved bytes; null on one node, for symmetric and when it did not run), and the extra rows
// (graph replay and hook split): "measured" and numbers, or why not and nulls.
void add_expert_major_rows(Json& out, const EngineResult& result, const PhaseBounds& minimal,
                           const PhaseBounds& design) {
  const bool across = result.timed && result.node_bytes.has_value() && !result.node_bytes->forwarded;
  const NodeBytes node = across ? *result.node_bytes : NodeBytes{};
  auto field = [&](const char* name, int64_t value) { out[name] = across ? Json(value) : Json(nullptr); };
  field("rdma_dispatch_bytes", node.rdma_dispatch);
  field("nvlink_dispatch_bytes", node.nvlink_dispatch);
  field("rdma_combine_bytes", node.rdma_combine);
  field("nvlink_combine_bytes", node.nvlink_combine);
  field("rdma_dispatch_signals", node.rdma_dispatch_signals);
  field("rdma_combine_signals", node.rdma_combine_signals);
  auto row = [&](const std::string& name, const std::optional<PhaseTiming>& timing) {
    out[name + "_us"] = timing ? Json(timing->median_seconds * 1e6) : Json(nullptr);
    out[name + "_p99_us"] = timing ? Json(timing->p99_seconds * 1e6) : Json(nullptr);
  };
  out["graph_replay"] = text_or_null(result.graph_replay);
  row("graph_replay_dispatch", result.graph_dispatch);
  row("graph_replay_combine", result.graph_combine);
  // launch = plain call - graph replay, medians.
  out["dispatch_launch_us"] =
      or_null(microseconds(launch_seconds(result.dispatch_seconds, result.graph_dispatch)));
  out["combine_launch_us"] =
      or_null(microseconds(launch_seconds(result.combine_seconds, result.graph_combine)));
  out["graph_replay_minimal_fraction"] = or_null(graph_replay_fraction(result, minimal));
  out["graph_replay_design_fraction"] = or_null(graph_replay_fraction(result, design));
  out["hook_split"] = text_or_null(result.hook_split);
  row("dispatch_send", result.dispatch_send);
  row("dispatch_recv", result.dispatch_recv);
  row("combine_send", result.combine_send);
  row("combine_recv", result.combine_recv);
}

Json engine_json(const EngineResult& result, const CopyBandwidth& copy,
                 const std::vector<EngineResult>& results) {
  Json out;
  out["engine"] = bench_engine_name(result.engine);
  out["check"] = check_status_name(result.status);
  if (result.status != CheckStatus::passed) out["reason"] = result.detail;
  // Numbers when the engine ran, null when it was skipped.
  auto timed = [&](double seconds) { return result.timed ? Json(seconds * 1e6) : Json(nullptr); };
  auto count = [&](int64_t value) { return result.timed ? Json(value) : Json(nullptr); };
  auto ran = [&](std::optional<double> value) { return result.timed ? or_null(value) : Json(nullptr); };
  out["tokens"] = count(result.tokens_per_rank);
  out["delivered_rows"] = count(result.delivered_rows);
  // Rows per local expert of recv_x (expert_capacity resolved, else R x max); null for rank-major.
  out["rows_per_expert"] = result.rows_per_expert > 0 ? count(result.rows_per_expert) : Json(nullptr);
  out["dispatch_us"] = timed(result.dispatch_seconds);
  out["combine_us"] = timed(result.combine_seconds);
  // The host's wall time of the calls (the slowest rank's median), apart from the stream's time above.
  // null where the dispatch's host wait for the counts sat behind --start timer's hold (runner.hpp).
  out["dispatch_host_us"] =
      result.dispatch_host_behind_hold ? Json(nullptr) : timed(result.dispatch_host_seconds);
  out["combine_host_us"] = timed(result.combine_host_seconds);
  out["dispatch_p99_us"] = timed(result.dispatch_p99_seconds);
  out["combine_p99_us"] = timed(result.combine_p99_seconds);
  out["dispatch_bytes"] = count(result.dispatch_bytes);
  out["combine_bytes"] = count(result.combine_bytes);
  // GB/s per rank as DeepEP counts it (one rank's received rows x row bytes / that rank's median time,
  // the mean over the ranks, and each rank's), and all ranks' bytes over the slowest rank's median.
  out["dispatch_gbps_per_rank"] = ran(gigabytes_per_second_per_rank(
      result.received_rows_by_rank, result.dispatch_row_bytes, result.dispatch_rank_seconds));
  out["combine_gbps_per_rank"] = ran(gigabytes_per_second_per_rank(
      result.received_rows_by_rank, result.combine_row_bytes, result.combine_rank_seconds));
  auto by_rank = [&](int64_t row_bytes, const std::vector<double>& seconds) {
    Json rates = Json::array();
    if (!result.timed) return rates;
    for (size_t rank = 0; rank < seconds.size() && rank < result.received_rows_by_rank.size(); ++rank)
      rates.push_back(
          or_null(gigabytes_per_second(result.received_rows_by_rank[rank] * row_bytes, seconds[rank])));
    return rates;
  };
  out["dispatch_gbps_by_rank"] = by_rank(result.dispatch_row_bytes, result.dispatch_rank_seconds);
  out["combine_gbps_by_rank"] = by_rank(result.combine_row_bytes, result.combine_rank_seconds);
  out["received_rows_by_rank"] = result.timed ? Json(result.received_rows_by_rank) : Json::array();
  out["dispatch_gbps_all_ranks"] = ran(gigabytes_per_second(result.dispatch_bytes, result.dispatch_seconds));
  out["combine_gbps_all_ranks"] = ran(gigabytes_per_second(result.combine_bytes, result.combine_seconds));
  // Time per token of one rank; null at 0 tokens.
  out["dispatch_ns_per_token"] = ran(nanoseconds_per_token(result.dispatch_seconds, result.tokens_per_rank));
  out["combine_ns_per_token"] = ran(nanoseconds_per_token(result.combine_seconds, result.tokens_per_rank));
  // Every iteration checked, each into poisoned outputs; the cache eviction before every timed phase.
  out["checked_iterations"] = count(result.checked_iterations);
  out["cache_flush_bytes"] = count(result.cache_flush_bytes);
  out["input_sets"] = count(result.input_sets);
  // --start timer: the timed phases held for a common start, and those that began after their moment (all
  // ranks).
  out["start_holds"] = count(result.start_holds);
  out["start_holds_missed"] = count(result.start_holds_missed);
  out["remote_dispatch_bytes"] = count(result.remote_dispatch_bytes);
  out["remote_combine_bytes"] = count(result.remote_combine_bytes);
  // The minimal bound (minimal_bound.hpp): its memory bytes, per phase its time (us) and the fraction
  // bound / median, and both phases' fraction.
  const PhaseBounds minimal = result.timed ? minimal_bounds(result, copy) : PhaseBounds{};
  const PhaseBounds design = result.timed ? design_bounds(result, copy) : PhaseBounds{};
  out["minimal_dispatch_bytes"] = count(result.minimal_dispatch_bytes);
  out["minimal_combine_bytes"] = count(result.minimal_combine_bytes);
  out["minimal_fraction"] = or_null(minimal_fraction(result, copy));
  out["dispatch_minimal_us"] = or_null(microseconds(minimal.dispatch));
  out["combine_minimal_us"] = or_null(microseconds(minimal.combine));
  out["dispatch_minimal_fraction"] = or_null(phase_fraction(minimal.dispatch, result.dispatch_seconds));
  out["combine_minimal_fraction"] = or_null(phase_fraction(minimal.combine, result.combine_seconds));
  // The design roofline (design_roofline.hpp); null where the engine's passes are not counted, with
  // design_note saying why.
  out["design_dispatch_bytes"] = result.timed ? or_null(result.design_dispatch_bytes) : Json(nullptr);
  out["design_combine_bytes"] = result.timed ? or_null(result.design_combine_bytes) : Json(nullptr);
  out["dispatch_design_roofline_us"] = or_null(microseconds(design.dispatch));
  out["combine_design_roofline_us"] = or_null(microseconds(design.combine));
  out["dispatch_design_fraction"] = or_null(phase_fraction(design.dispatch, result.dispatch_seconds));
  out["combine_design_fraction"] = or_null(phase_fraction(design.combine, result.combine_seconds));
  out["design_fraction"] = or_null(design_fraction(result, copy));
  out["design_passes"] = text_or_null(result.design_passes);
  out["design_note"] = text_or_null(result.design_note);
  // nccl's time / this engine's, both phases together; null unless both ran with the same tokens.
  const std::optional<NcclComparison> versus_nccl = compare_with_nccl(result, results);
  out["speedup_vs_nccl"] = versus_nccl ? Json(versus_nccl->total) : Json(nullptr);
  out["note"] = text_or_null(result.note);
  out["symmetric_combine"] = text_or_null(result.symmetric_combine);
  out["symmetric_dispatch"] = text_or_null(result.symmetric_dispatch);
  if (is_rank_major(result.engine)) {
    add_forwarded_node_bytes(out, result);
  } else {
    add_expert_major_rows(out, result, minimal, design);
  }
  return out;
}

}  // namespace

void write_results_json(const std::string& path, const BenchOptions& options, const CopyBandwidth& copy,
                        const std::vector<EngineResult>& results) {
  Json report;
  report["switchyard_version"] = SWITCHYARD_VERSION_STRING;
  report["backend"] = backend_name(options.backend);
  report["shape"] = options.notes.shape;
  report["ranks"] = options.topology.num_ranks;
  report["ranks_per_node"] = options.topology.ranks_per_node;
  report["ranks_as"] = ranks_as_name(options.ranks_as);
  report["tokens"] = options.tokens_per_rank;
  report["ll_tokens"] = options.ll_tokens_per_rank;
  report["symmetric_tokens"] = options.symmetric_tokens_per_rank;
  // "auto", or the rows given (0: R x max).
  report["expert_capacity_request"] =
      options.expert_capacity == kAutoExpertCapacity ? Json("auto") : Json(options.expert_capacity);
  report["hidden"] = options.hidden;
  report["topk"] = options.topk;
  report["experts"] = options.num_experts;
  report["dtype"] = options.dtype == DType::fp8_e4m3 ? "fp8" : "bf16";
  report["seed"] = options.seed;
  report["iters"] = options.iters;
  report["warmup"] = options.warmup;
  // Where the phases' start events land (--start); the timer's lead, null with barrier.
  report["start"] = start_mode_name(options.start);
  report["start_ahead_us"] = options.start == StartMode::timer ? Json(options.start_ahead_us) : Json(nullptr);
  // With the timer: how a phase is timed from its hold (start_hold.hpp, StartTiming).
  report["start_event"] = options.start != StartMode::timer
                              ? Json(nullptr)
                              : Json(start_timing_name(start_timing_from_environment()));
  // Whether the engines' kernels launched as programmatic dependents (SWITCHYARD_DEPENDENT_LAUNCH); null on
  // cpu.
  report["dependent_launch"] = or_null(dependent_launches_for(options.backend));
  // Which GPU each rank used (--devices); empty on cpu.
  report["devices"] = options.devices.device_of_rank;
  report["devices_request"] = options.devices.request_text();
  report["visible_devices"] = options.devices.visible_devices;
  report["copy_gbps"] = copy.bytes_per_second / 1e9;
  report["copy_devices"] = copy.devices;
  report["copy_method"] = copy.method;
  // Between GPUs: null unless the ranks use several.
  report["peer_copy_gbps"] = copy.peer ? Json(copy.peer->all_pairs_bytes_per_second / 1e9) : Json(nullptr);
  report["peer_copy_pair_gbps"] = copy.peer ? Json(copy.peer->pair_bytes_per_second / 1e9) : Json(nullptr);
  report["peer_copy_method"] = copy.peer ? Json(copy.peer->method) : Json(nullptr);
  Json engines = Json::array();
  for (const EngineResult& result : results) engines.push_back(engine_json(result, copy, results));
  report["results"] = engines;

  std::ofstream out(path);
  if (!out) throw std::runtime_error("--json: cannot write " + path);
  out << report.dump(2) << "\n";
  out.close();
  if (!out) throw std::runtime_error("--json: cannot write " + path);
}

}  // namespace switchyard::bench
