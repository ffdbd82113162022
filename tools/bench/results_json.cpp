// --json FILE: the options, the copy bandwidths and every engine's results.
#include <fstream>
#include <stdexcept>

#include "json_writer.hpp"
#include "metrics.hpp"
#include "report.hpp"
#include "switchyard/version.hpp"

namespace switchyard::bench {

void write_results_json(const std::string& path, const BenchOptions& options, const CopyBandwidth& copy,
                        const std::vector<EngineResult>& results) {
  std::ofstream out(path);
  if (!out) throw std::runtime_error("--json: cannot write " + path);
  JsonWriter json(out);
  json.begin_object();
  json.key("switchyard_version");
  json.string(SWITCHYARD_VERSION_STRING);
  json.key("backend");
  json.string(backend_name(options.backend));
  json.key("ranks");
  json.integer(options.topology.num_ranks);
  json.key("ranks_per_node");
  json.integer(options.topology.ranks_per_node);
  json.key("tokens");
  json.integer(options.tokens_per_rank);
  json.key("ll_tokens");
  json.integer(options.ll_tokens_per_rank);
  json.key("symmetric_tokens");
  json.integer(options.symmetric_tokens_per_rank);
  // "auto", or the rows given (0: R x max).
  json.key("expert_capacity_request");
  if (options.expert_capacity == kAutoExpertCapacity) {
    json.string("auto");
  } else {
    json.integer(options.expert_capacity);
  }
  json.key("hidden");
  json.integer(options.hidden);
  json.key("topk");
  json.integer(options.topk);
  json.key("experts");
  json.integer(options.num_experts);
  json.key("dtype");
  json.string(options.dtype == DType::fp8_e4m3 ? "fp8" : "bf16");
  json.key("seed");
  json.unsigned_integer(options.seed);
  json.key("iters");
  json.integer(options.iters);
  json.key("warmup");
  json.integer(options.warmup);
  // Which GPU each rank used (--devices); empty on cpu.
  json.key("devices");
  json.begin_array();
  for (int device : options.devices.device_of_rank) json.integer(device);
  json.end_array();
  json.key("devices_request");
  json.string(options.devices.request_text());
  json.key("visible_devices");
  json.integer(options.devices.visible_devices);
  json.key("copy_gbps");
  json.number(copy.bytes_per_second / 1e9);
  json.key("copy_devices");
  json.integer(copy.devices);
  json.key("copy_method");
  json.string(copy.method);
  // Between GPUs: null unless the ranks use several.
  json.key("peer_copy_gbps");
  json.number_or_null(copy.peer ? std::optional<double>(copy.peer->all_pairs_bytes_per_second / 1e9)
                                : std::nullopt);
  json.key("peer_copy_pair_gbps");
  json.number_or_null(copy.peer ? std::optional<double>(copy.peer->pair_bytes_per_second / 1e9)
                                : std::nullopt);
  json.key("peer_copy_method");
  if (copy.peer) {
    json.string(copy.peer->method);
  } else {
    json.null();
  }
  json.key("results");
  json.begin_array();
  for (const EngineResult& result : results) {
    json.begin_object();
    json.key("engine");
    json.string(bench_engine_name(result.engine));
    json.key("check");
    json.string(check_status_name(result.status));
    if (result.status != CheckStatus::passed) {
      json.key("reason");
      json.string(result.detail);
    }
    auto timed = [&](double seconds) {
      return result.timed ? std::optional<double>(seconds * 1e6) : std::nullopt;
    };
    auto bytes = [&](int64_t count) { return result.timed ? std::optional<int64_t>(count) : std::nullopt; };
    auto gbps = [&](int64_t count, double seconds) {
      return result.timed ? gigabytes_per_second(count, seconds) : std::nullopt;
    };
    json.key("tokens");
    json.integer_or_null(bytes(result.tokens_per_rank));
    json.key("delivered_rows");
    json.integer_or_null(bytes(result.delivered_rows));
    // Rows per local expert of recv_x (expert_capacity resolved, else R x max); null for rank-major.
    json.key("rows_per_expert");
    json.integer_or_null(result.rows_per_expert > 0 ? bytes(result.rows_per_expert) : std::nullopt);
    json.key("dispatch_us");
    json.number_or_null(timed(result.dispatch_seconds));
    json.key("combine_us");
    json.number_or_null(timed(result.combine_seconds));
    json.key("dispatch_p99_us");
    json.number_or_null(timed(result.dispatch_p99_seconds));
    json.key("combine_p99_us");
    json.number_or_null(timed(result.combine_p99_seconds));
    json.key("dispatch_bytes");
    json.integer_or_null(bytes(result.dispatch_bytes));
    json.key("combine_bytes");
    json.integer_or_null(bytes(result.combine_bytes));
    // GB/s per rank as DeepEP counts it (one rank's received rows x row bytes / that rank's median time,
    // the mean over the ranks, and each rank's), and of all ranks' bytes over the slowest rank's median.
    json.key("dispatch_gbps_per_rank");
    json.number_or_null(result.timed ? gigabytes_per_second_per_rank(result.received_rows_by_rank,
                                                                     result.dispatch_row_bytes,
                                                                     result.dispatch_rank_seconds)
                                     : std::nullopt);
    json.key("combine_gbps_per_rank");
    json.number_or_null(result.timed ? gigabytes_per_second_per_rank(result.received_rows_by_rank,
                                                                     result.combine_row_bytes,
                                                                     result.combine_rank_seconds)
                                     : std::nullopt);
    auto by_rank = [&](const char* name, int64_t row_bytes, const std::vector<double>& seconds) {
      json.key(name);
      json.begin_array();
      if (result.timed) {
        for (size_t rank = 0; rank < seconds.size() && rank < result.received_rows_by_rank.size(); ++rank)
          json.number_or_null(
              gigabytes_per_second(result.received_rows_by_rank[rank] * row_bytes, seconds[rank]));
      }
      json.end_array();
    };
    by_rank("dispatch_gbps_by_rank", result.dispatch_row_bytes, result.dispatch_rank_seconds);
    by_rank("combine_gbps_by_rank", result.combine_row_bytes, result.combine_rank_seconds);
    json.key("received_rows_by_rank");
    json.begin_array();
    if (result.timed) {
      for (int64_t rows : result.received_rows_by_rank) json.integer(rows);
    }
    json.end_array();
    json.key("dispatch_gbps_all_ranks");
    json.number_or_null(gbps(result.dispatch_bytes, result.dispatch_seconds));
    json.key("combine_gbps_all_ranks");
    json.number_or_null(gbps(result.combine_bytes, result.combine_seconds));
    // Time per token of one rank; null at 0 tokens.
    json.key("dispatch_ns_per_token");
    json.number_or_null(result.timed ? nanoseconds_per_token(result.dispatch_seconds, result.tokens_per_rank)
                                     : std::nullopt);
    json.key("combine_ns_per_token");
    json.number_or_null(result.timed ? nanoseconds_per_token(result.combine_seconds, result.tokens_per_rank)
                                     : std::nullopt);
    // Every iteration checked, each into poisoned outputs; the cache eviction before every timed phase.
    json.key("checked_iterations");
    json.integer_or_null(result.timed ? std::optional<int64_t>(result.checked_iterations) : std::nullopt);
    json.key("cache_flush_bytes");
    json.integer_or_null(result.timed ? std::optional<int64_t>(result.cache_flush_bytes) : std::nullopt);
    json.key("input_sets");
    json.integer_or_null(result.timed ? std::optional<int64_t>(result.input_sets) : std::nullopt);
    json.key("remote_dispatch_bytes");
    json.integer_or_null(bytes(result.remote_dispatch_bytes));
    json.key("remote_combine_bytes");
    json.integer_or_null(bytes(result.remote_combine_bytes));
    // The minimal bound (minimal_bound.hpp): its memory bytes, per phase its time (us) and the fraction
    // bound / median, and both phases' fraction.
    json.key("minimal_dispatch_bytes");
    json.integer_or_null(bytes(result.minimal_dispatch_bytes));
    json.key("minimal_combine_bytes");
    json.integer_or_null(bytes(result.minimal_combine_bytes));
    json.key("minimal_fraction");
    json.number_or_null(minimal_fraction(result, copy));
    const PhaseBounds minimal = result.timed ? minimal_bounds(result, copy) : PhaseBounds{};
    const PhaseBounds design = result.timed ? design_bounds(result, copy) : PhaseBounds{};
    auto microseconds = [](std::optional<double> seconds) {
      return seconds ? std::optional<double>(*seconds * 1e6) : std::nullopt;
    };
    json.key("dispatch_minimal_us");
    json.number_or_null(microseconds(minimal.dispatch));
    json.key("combine_minimal_us");
    json.number_or_null(microseconds(minimal.combine));
    json.key("dispatch_minimal_fraction");
    json.number_or_null(phase_fraction(minimal.dispatch, result.dispatch_seconds));
    json.key("combine_minimal_fraction");
    json.number_or_null(phase_fraction(minimal.combine, result.combine_seconds));
    // The design roofline (design_roofline.hpp); null where the engine's passes are not counted, with
    // design_note saying why.
    json.key("design_dispatch_bytes");
    json.integer_or_null(result.timed ? result.design_dispatch_bytes : std::nullopt);
    json.key("design_combine_bytes");
    json.integer_or_null(result.timed ? result.design_combine_bytes : std::nullopt);
    json.key("dispatch_design_roofline_us");
    json.number_or_null(microseconds(design.dispatch));
    json.key("combine_design_roofline_us");
    json.number_or_null(microseconds(design.combine));
    json.key("dispatch_design_fraction");
    json.number_or_null(phase_fraction(design.dispatch, result.dispatch_seconds));
    json.key("combine_design_fraction");
    json.number_or_null(phase_fraction(design.combine, result.combine_seconds));
    json.key("design_fraction");
    json.number_or_null(design_fraction(result, copy));
    json.key("design_note");
    if (result.design_note.empty()) {
      json.null();
    } else {
      json.string(result.design_note);
    }
    // nccl's time / this engine's, both phases together; null unless both ran with the same tokens.
    const std::optional<NcclComparison> versus_nccl = compare_with_nccl(result, results);
    json.key("speedup_vs_nccl");
    json.number_or_null(versus_nccl ? std::optional<double>(versus_nccl->total) : std::nullopt);
    json.key("note");
    if (result.note.empty()) {
      json.null();
    } else {
      json.string(result.note);
    }
    json.key("symmetric_combine");
    if (result.symmetric_combine.empty()) {
      json.null();
    } else {
      json.string(result.symmetric_combine);
    }
    json.key("symmetric_dispatch");
    if (result.symmetric_dispatch.empty()) {
      json.null();
    } else {
      json.string(result.symmetric_dispatch);
    }
    if (is_rank_major(result.engine)) {
      // Across nodes only (NodeTraffic); null on one node and when the engine did not run.
      const bool across = result.timed && result.node_bytes.has_value() && result.node_bytes->forwarded;
      const NodeBytes node = across ? *result.node_bytes : NodeBytes{};
      auto field = [&](const char* name, int64_t value) {
        json.key(name);
        json.integer_or_null(across ? std::optional<int64_t>(value) : std::nullopt);
      };
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
    if (!is_rank_major(result.engine)) {
      // Across nodes (low_latency): what its kernels send over each link, messages and signals
      // included; no hierarchy, so no direct or saved bytes. Null on one node, for symmetric (one
      // node only) and when the engine did not run.
      const bool across = result.timed && result.node_bytes.has_value() && !result.node_bytes->forwarded;
      const NodeBytes node = across ? *result.node_bytes : NodeBytes{};
      auto field = [&](const char* name, int64_t value) {
        json.key(name);
        json.integer_or_null(across ? std::optional<int64_t>(value) : std::nullopt);
      };
      field("rdma_dispatch_bytes", node.rdma_dispatch);
      field("nvlink_dispatch_bytes", node.nvlink_dispatch);
      field("rdma_combine_bytes", node.rdma_combine);
      field("nvlink_combine_bytes", node.nvlink_combine);
      field("rdma_dispatch_signals", node.rdma_dispatch_signals);
      field("rdma_combine_signals", node.rdma_combine_signals);
      // The expert-major engines' extra rows: "measured" and numbers, or why not and nulls.
      auto status = [&](const char* name, const std::string& text) {
        json.key(name);
        if (text.empty()) {
          json.null();
        } else {
          json.string(text);
        }
      };
      auto row = [&](const std::string& name, const std::optional<PhaseTiming>& timing) {
        json.key(name + "_us");
        json.number_or_null(timing ? std::optional<double>(timing->median_seconds * 1e6) : std::nullopt);
        json.key(name + "_p99_us");
        json.number_or_null(timing ? std::optional<double>(timing->p99_seconds * 1e6) : std::nullopt);
      };
      status("graph_replay", result.graph_replay);
      row("graph_replay_dispatch", result.graph_dispatch);
      row("graph_replay_combine", result.graph_combine);
      // launch = plain call - graph replay, medians.
      json.key("dispatch_launch_us");
      json.number_or_null(microseconds(launch_seconds(result.dispatch_seconds, result.graph_dispatch)));
      json.key("combine_launch_us");
      json.number_or_null(microseconds(launch_seconds(result.combine_seconds, result.graph_combine)));
      json.key("graph_replay_minimal_fraction");
      json.number_or_null(graph_replay_fraction(result, minimal));
      json.key("graph_replay_design_fraction");
      json.number_or_null(graph_replay_fraction(result, design));
      status("hook_split", result.hook_split);
      row("dispatch_send", result.dispatch_send);
      row("dispatch_recv", result.dispatch_recv);
      row("combine_send", result.combine_send);
      row("combine_recv", result.combine_recv);
    }
    json.end_object();
  }
  json.end_array();
  json.end_object();
  out.close();
  if (!out) throw std::runtime_error("--json: cannot write " + path);
}

}  // namespace switchyard::bench
