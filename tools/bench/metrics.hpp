#pragma once
// The numbers derived from an engine's timings: GB/s per rank (DeepEP's convention) and of all ranks,
// time per token, the fractions of the minimal bound and of the design roofline, and the launch time
// (plain call - graph replay).
#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "copy_bandwidth.hpp"
#include "minimal_bound.hpp"
#include "runner.hpp"

namespace switchyard::bench {

// bytes / seconds in GB/s (1e9 bytes); absent without a positive time.
inline std::optional<double> gigabytes_per_second(int64_t bytes, double seconds) {
  if (!(seconds > 0)) return std::nullopt;
  return static_cast<double>(bytes) / seconds / 1e9;
}

// GB/s per rank, as DeepEP counts it: one rank's received rows x row bytes / that rank's own time
// (the median over the timed iterations), averaged over the ranks. Absent without times.
inline std::optional<double> gigabytes_per_second_per_rank(const std::vector<int64_t>& received_rows_by_rank,
                                                           int64_t row_bytes,
                                                           const std::vector<double>& rank_seconds) {
  if (rank_seconds.empty() || rank_seconds.size() != received_rows_by_rank.size()) return std::nullopt;
  double sum = 0;
  for (size_t rank = 0; rank < rank_seconds.size(); ++rank) {
    std::optional<double> rate =
        gigabytes_per_second(received_rows_by_rank[rank] * row_bytes, rank_seconds[rank]);
    if (!rate) return std::nullopt;
    sum += *rate;
  }
  return sum / static_cast<double>(rank_seconds.size());
}

// Nanoseconds per token of one rank: the phase's time / the tokens each rank sends. It compares
// rank-major and expert-major engines fairly, whose rows count different things. Absent at 0 tokens.
inline std::optional<double> nanoseconds_per_token(double seconds, int64_t tokens_per_rank) {
  if (tokens_per_rank <= 0 || !(seconds > 0)) return std::nullopt;
  return seconds * 1e9 / static_cast<double>(tokens_per_rank);
}

// The least time a phase whose design moves `design_bytes` through memory can take
// (design_roofline.hpp): every pass reads or writes some device's memory (design bytes / the local
// copy bandwidth, summed over the devices used), and the rows between GPUs still cross a link once
// (remote bytes / the peer copy bandwidth); the larger. On one device, design bytes / copy bandwidth.
// Absent without the design bytes or the bandwidths.
inline std::optional<double> design_roofline_seconds(std::optional<int64_t> design_bytes,
                                                     int64_t remote_bytes, const CopyBandwidth& copy) {
  if (!design_bytes || !(copy.bytes_per_second > 0)) return std::nullopt;
  const double memory_seconds = static_cast<double>(*design_bytes) / copy.bytes_per_second;
  if (remote_bytes == 0) return memory_seconds;
  if (!copy.peer || !(copy.peer->all_pairs_bytes_per_second > 0)) return std::nullopt;
  return std::max(memory_seconds, static_cast<double>(remote_bytes) / copy.peer->all_pairs_bytes_per_second);
}

// The bounds of both phases under one of the two (the minimal bound or the design roofline).
struct PhaseBounds {
  std::optional<double> dispatch, combine;
};

// The minimal bound (minimal_bound.hpp): every input byte read once, every output byte written once.
inline PhaseBounds minimal_bounds(const EngineResult& result, const CopyBandwidth& copy) {
  return {minimal_seconds(result.minimal_dispatch_bytes, result.remote_dispatch_bytes, copy),
          minimal_seconds(result.minimal_combine_bytes, result.remote_combine_bytes, copy)};
}

// The design roofline: the engine's own passes (design_roofline_seconds).
inline PhaseBounds design_bounds(const EngineResult& result, const CopyBandwidth& copy) {
  return {design_roofline_seconds(result.design_dispatch_bytes, result.remote_dispatch_bytes, copy),
          design_roofline_seconds(result.design_combine_bytes, result.remote_combine_bytes, copy)};
}

// One phase: bound / time; absent without either.
inline std::optional<double> phase_fraction(std::optional<double> bound, double seconds) {
  if (!bound || !(seconds > 0)) return std::nullopt;
  return *bound / seconds;
}

// Both phases: (dispatch bound + combine bound) / (dispatch time + combine time).
inline std::optional<double> both_phases_fraction(const PhaseBounds& bounds, double dispatch_seconds,
                                                  double combine_seconds) {
  const double seconds = dispatch_seconds + combine_seconds;
  if (!bounds.dispatch || !bounds.combine || !(seconds > 0)) return std::nullopt;
  return (*bounds.dispatch + *bounds.combine) / seconds;
}

// The plain calls' medians against the minimal bound, both phases.
inline std::optional<double> minimal_fraction(const EngineResult& result, const CopyBandwidth& copy) {
  if (!result.timed) return std::nullopt;
  return both_phases_fraction(minimal_bounds(result, copy), result.dispatch_seconds, result.combine_seconds);
}

// The plain calls' medians against the design roofline, both phases.
inline std::optional<double> design_fraction(const EngineResult& result, const CopyBandwidth& copy) {
  if (!result.timed) return std::nullopt;
  return both_phases_fraction(design_bounds(result, copy), result.dispatch_seconds, result.combine_seconds);
}

// The graph replays' medians against `bounds`, both phases; absent without graph rows.
inline std::optional<double> graph_replay_fraction(const EngineResult& result, const PhaseBounds& bounds) {
  if (!result.timed || !result.graph_dispatch || !result.graph_combine) return std::nullopt;
  return both_phases_fraction(bounds, result.graph_dispatch->median_seconds,
                              result.graph_combine->median_seconds);
}

// launch = the plain call's median - the graph replay's median: the host's work and the kernel
// launches that the graph removes. Absent without graph rows.
inline std::optional<double> launch_seconds(double plain_seconds, const std::optional<PhaseTiming>& graph) {
  if (!graph) return std::nullopt;
  return plain_seconds - graph->median_seconds;
}

}  // namespace switchyard::bench

namespace switchyard::bench {

// Why a timing is below its minimal bound (a bench bug: the bound must be a lower bound), naming the
// row and the phase; empty when every timed row is at or above its bound.
std::string minimal_bound_violation(const EngineResult& result, const CopyBandwidth& copy);

}  // namespace switchyard::bench
