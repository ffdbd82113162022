#pragma once
// The numbers derived from an engine's timings: logical bandwidth and the roofline fraction.
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

// (dispatch bound + combine bound) / (dispatch time + combine time).
inline std::optional<double> roofline_fraction(const EngineResult& result, const CopyBandwidth& copy) {
  double seconds = result.dispatch_seconds + result.combine_seconds;
  if (!result.timed || !(seconds > 0)) return std::nullopt;
  std::optional<double> dispatch =
      roofline_seconds(result.dispatch_bytes, result.remote_dispatch_bytes, copy);
  std::optional<double> combine = roofline_seconds(result.combine_bytes, result.remote_combine_bytes, copy);
  if (!dispatch || !combine) return std::nullopt;
  return (*dispatch + *combine) / seconds;
}

}  // namespace switchyard::bench
