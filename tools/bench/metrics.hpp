#pragma once
// The numbers derived from an engine's timings: logical bandwidth, the minimal and the design
// roofline fractions, and the launch time (plain call - graph replay).
#include <algorithm>
#include <optional>

#include "copy_bandwidth.hpp"
#include "runner.hpp"

namespace switchyard::bench {

// bytes / seconds in GB/s (1e9 bytes); absent without a positive time.
inline std::optional<double> gigabytes_per_second(int64_t bytes, double seconds) {
  if (!(seconds > 0)) return std::nullopt;
  return static_cast<double>(bytes) / seconds / 1e9;
}

// The least time a phase moving `bytes` can take, `remote_bytes` of them between ranks on different
// GPUs: the rest are read once and written once in one device's memory (2 * local / the local copy
// bandwidth of all devices used together); the remote ones cross a link once (remote / the peer copy
// bandwidth of all GPU pairs at once). The two use different resources, so the bound is the larger.
// On one device, 2 * bytes / copy bandwidth. Absent without the bandwidths it needs.
inline std::optional<double> roofline_seconds(int64_t bytes, int64_t remote_bytes,
                                              const CopyBandwidth& copy) {
  if (!(copy.bytes_per_second > 0)) return std::nullopt;
  const double local_seconds = 2.0 * static_cast<double>(bytes - remote_bytes) / copy.bytes_per_second;
  if (remote_bytes == 0) return local_seconds;
  if (!copy.peer || !(copy.peer->all_pairs_bytes_per_second > 0)) return std::nullopt;
  const double remote_seconds = static_cast<double>(remote_bytes) / copy.peer->all_pairs_bytes_per_second;
  return std::max(local_seconds, remote_seconds);
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

// The bounds of both phases under one roofline.
struct PhaseBounds {
  std::optional<double> dispatch, combine;
};

// The minimal roofline: each delivered row read once and written once (roofline_seconds).
inline PhaseBounds minimal_bounds(const EngineResult& result, const CopyBandwidth& copy) {
  return {roofline_seconds(result.dispatch_bytes, result.remote_dispatch_bytes, copy),
          roofline_seconds(result.combine_bytes, result.remote_combine_bytes, copy)};
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

// The plain calls' medians against the minimal roofline, both phases.
inline std::optional<double> roofline_fraction(const EngineResult& result, const CopyBandwidth& copy) {
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
