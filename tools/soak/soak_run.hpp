#pragma once
// The soak itself: cases one after another until the time or the round trips run out, the memory
// measured after the warm-up and at the end, and the totals for the verdict.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "options.hpp"

namespace switchyard::soak {

struct Failure {
  uint64_t case_seed = 0;
  std::string case_description;
  std::string what;  // "mismatch: ..." or "error: ..."
};

struct Tally {
  int64_t cases = 0;
  int64_t round_trips = 0;
};

struct SoakTotals {
  int64_t cases = 0;
  int64_t round_trips = 0;
  int64_t mismatches = 0;
  int64_t errors = 0;
  std::map<std::string, Tally> by_engine;      // soak_engine_name
  std::map<std::string, Tally> by_rank_model;  // rank_model_name
  std::vector<Failure> failures;
  double seconds = 0;
  double host_rss_before_mib = 0, host_rss_after_mib = 0;
  std::optional<double> device_used_before_mib, device_used_after_mib;
  bool corruption_applied = false;

  double host_growth_mib() const { return host_rss_after_mib - host_rss_before_mib; }
  double device_growth_mib() const {
    return device_used_before_mib ? *device_used_after_mib - *device_used_before_mib : 0.0;
  }
  bool memory_within(const SoakOptions& options) const;
  bool pass(const SoakOptions& options) const;
};

// Runs the soak (or, with --replay, the one case), printing mismatches and progress on stderr.
SoakTotals run_soak(const SoakOptions& options);

// "soak: N round trips, M mismatches, E errors, host RSS +x MiB, device +y MiB: pass"
std::string verdict_line(const SoakTotals& totals, const SoakOptions& options);

}  // namespace switchyard::soak
