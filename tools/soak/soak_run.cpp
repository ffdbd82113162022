#include "soak_run.hpp"

#include <chrono>
#include <cstdio>
#include <iostream>
#include <sstream>

#include "case_runner.hpp"
#include "crash_note.hpp"
#include "memory.hpp"
#include "rounds.hpp"
#ifdef SWITCHYARD_WITH_CUDA
#include "cuda_rank.hpp"
#endif

namespace switchyard::soak {

namespace {

using Clock = std::chrono::steady_clock;

// NOTES: a case with many mismatches (a broken engine) would flood the log; the count says how many.
constexpr size_t kPrintedLinesPerCase = 8;

struct Memory {
  double host_rss_mib = 0;
  std::optional<double> device_used_mib;
};

Memory measure(const SoakOptions& options) {
  Memory memory;
#ifdef SWITCHYARD_WITH_CUDA
  // First: the first call starts CUDA, whose host memory belongs in the baseline. Used = -free: the
  // total is constant, and only the difference is reported.
  if (options.backend == Backend::cuda)
    memory.device_used_mib = -static_cast<double>(cuda_free_bytes()) / kMiB;
#else
  (void)options;
#endif
  memory.host_rss_mib = static_cast<double>(host_rss_bytes()) / kMiB;
  return memory;
}

void record(const SoakCase& c, const CaseOutcome& outcome, const SoakOptions& options, SoakTotals& totals) {
  totals.cases += 1;
  totals.round_trips += outcome.round_trips;
  totals.mismatches += static_cast<int64_t>(outcome.mismatches.size());
  totals.errors += static_cast<int64_t>(outcome.errors.size());
  totals.corruption_applied = totals.corruption_applied || outcome.corrupted;
  for (Tally* tally :
       {&totals.by_engine[soak_engine_name(c.engine)], &totals.by_rank_model[rank_model_name(c.ranks_as)]}) {
    tally->cases += 1;
    tally->round_trips += outcome.round_trips;
  }
  if (outcome.mismatches.empty() && outcome.errors.empty()) return;
  const std::string description = describe(c);
  std::cerr << "FAILED case " << hex(c.seed) << " (" << description
            << ")\n  replay: " << replay_command(options, c.seed) << "\n";
  size_t printed = 0;
  auto note = [&](const std::string& kind, const std::string& line) {
    totals.failures.push_back({c.seed, description, kind + ": " + line});
    if (printed++ < kPrintedLinesPerCase) std::cerr << "  " << kind << ": " << line << "\n";
  };
  for (const std::string& line : outcome.errors) note("error", line);
  for (const std::string& line : outcome.mismatches) note("mismatch", line);
  if (printed > kPrintedLinesPerCase) std::cerr << "  ... " << printed - kPrintedLinesPerCase << " more\n";
}

// run_case, with the case named for the crash handler while it runs.
CaseOutcome run_noted(const SoakCase& c, const SoakOptions& options, bool corrupt) {
  set_crash_note("case " + hex(c.seed) + " (" + describe(c) +
                 ")\n  replay: " + replay_command(options, c.seed));
  return run_case(c, corrupt);
}

}  // namespace

bool SoakTotals::memory_within(const SoakOptions& options) const {
  return host_growth_mib() <= options.host_tolerance_mib &&
         device_growth_mib() <= options.device_tolerance_mib;
}

bool SoakTotals::pass(const SoakOptions& options) const {
  // NOTES: a replay has no warm-up: its one case loads the kernels and the rank threads' arenas, so
  // its memory is printed but not judged.
  return round_trips > 0 && mismatches == 0 && errors == 0 &&
         (options.replay || kSanitizedAllocator || memory_within(options));
}

SoakTotals run_soak(const SoakOptions& options) {
  SoakTotals totals;
  const Clock::time_point start = Clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(Clock::now() - start).count(); };

  if (options.replay) {
    SoakCase c = draw_case(*options.replay, options.backend);
    c.graph_replays = c.graph_replays && options.graph_replays;
    std::cerr << "replaying case " << hex(c.seed) << ": " << describe(c) << "\n";
    const Memory before = measure(options);
    record(c, run_noted(c, options, options.self_test_corrupt), options, totals);
    const Memory after = measure(options);
    totals.host_rss_before_mib = before.host_rss_mib;
    totals.host_rss_after_mib = after.host_rss_mib;
    totals.device_used_before_mib = before.device_used_mib;
    totals.device_used_after_mib = after.device_used_mib;
    totals.seconds = elapsed();
    return totals;
  }

  // Round trips counted for --round-trips whether their case completed or failed: a run whose every
  // case fails (no GPU, say) still ends.
  int64_t attempted = 0;
  auto done = [&] {
    return (options.round_trips && attempted >= *options.round_trips) ||
           (options.seconds && elapsed() >= *options.seconds);
  };
  auto warmed_up = [&] {
    return (options.round_trips && attempted >= kWarmupFraction * *options.round_trips) ||
           (options.seconds && elapsed() >= kWarmupFraction * *options.seconds);
  };
  std::optional<Memory> baseline;
  bool corrupt = options.self_test_corrupt;
  int64_t next_progress = options.progress_every;
  for (uint64_t index = 0; !done(); ++index) {
    SoakCase c = draw_case(case_seed(options.seed, index), options.backend);
    c.graph_replays = c.graph_replays && options.graph_replays;
    if (!options.runs(c.engine)) continue;
    const double case_start = elapsed();
    const CaseOutcome outcome = run_noted(c, options, corrupt);
    attempted += round_trips_of(c);
    corrupt = corrupt && !outcome.corrupted;  // one flipped bit per run
    record(c, outcome, options, totals);
    if (options.trace) {
      std::fprintf(stderr, "case %s: %lld round trips in %.2f s, host RSS %.1f MiB: %s\n",
                   hex(c.seed).c_str(), static_cast<long long>(outcome.round_trips), elapsed() - case_start,
                   static_cast<double>(host_rss_bytes()) / kMiB, describe(c).c_str());
    }
    if (!baseline && warmed_up()) baseline = measure(options);
    if (totals.round_trips >= next_progress) {
      std::fprintf(stderr, "soak: %lld round trips in %lld cases, %lld mismatches, %lld errors, %.0f s\n",
                   static_cast<long long>(totals.round_trips), static_cast<long long>(totals.cases),
                   static_cast<long long>(totals.mismatches), static_cast<long long>(totals.errors),
                   elapsed());
      while (next_progress <= totals.round_trips) next_progress += options.progress_every;
    }
  }
  const Memory after = measure(options);
  if (!baseline) baseline = after;
  totals.host_rss_before_mib = baseline->host_rss_mib;
  totals.host_rss_after_mib = after.host_rss_mib;
  totals.device_used_before_mib = baseline->device_used_mib;
  totals.device_used_after_mib = after.device_used_mib;
  totals.seconds = elapsed();
  return totals;
}

std::string verdict_line(const SoakTotals& totals, const SoakOptions& options) {
  char memory[160];
  std::snprintf(memory, sizeof(memory), "host RSS %+.1f MiB", totals.host_growth_mib());
  std::ostringstream out;
  out << "soak: " << totals.round_trips << " round trips, " << totals.mismatches << " mismatches, "
      << totals.errors << " errors, " << memory;
  if (totals.device_used_before_mib) {
    std::snprintf(memory, sizeof(memory), ", device %+.0f MiB", totals.device_growth_mib());
    out << memory;
  }
  if (options.replay) {
    out << " (not judged in a replay)";
  } else if (kSanitizedAllocator) {
    out << " (not judged under a sanitizer)";
  } else if (!totals.memory_within(options)) {
    out << " (beyond the tolerance)";
  }
  out << ": " << (totals.pass(options) ? "pass" : "fail");
  return out.str();
}

}  // namespace switchyard::soak
