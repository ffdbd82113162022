#pragma once
// The numbers derived from an engine's timings: logical bandwidth and the roofline fraction.
#include <optional>

#include "runner.hpp"

namespace switchyard::bench {

// bytes / seconds in GB/s (1e9 bytes); absent without a positive time.
inline std::optional<double> gigabytes_per_second(int64_t bytes, double seconds) {
  if (!(seconds > 0)) return std::nullopt;
  return static_cast<double>(bytes) / seconds / 1e9;
}

// Every delivered row is read once and written once, so dispatch and combine together need at least
// 2 * (dispatch_bytes + combine_bytes) / copy bandwidth; the fraction is that over the measured time.
inline std::optional<double> roofline_fraction(const EngineResult& result, double copy_bytes_per_second) {
  double seconds = result.dispatch_seconds + result.combine_seconds;
  if (!result.timed || !(seconds > 0) || !(copy_bytes_per_second > 0)) return std::nullopt;
  double bytes = static_cast<double>(result.dispatch_bytes + result.combine_bytes);
  return (2 * bytes / copy_bytes_per_second) / seconds;
}

}  // namespace switchyard::bench
