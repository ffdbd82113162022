#include "metrics.hpp"

#include <cstdio>

namespace switchyard::bench {
namespace {

// The first phase of one row whose median is below its minimal bound, described; empty when none.
std::string row_violation(const char* row, double dispatch_seconds, double combine_seconds,
                          const PhaseBounds& bounds) {
  const std::pair<const char*, std::pair<double, std::optional<double>>> phases[] = {
      {"dispatch", {dispatch_seconds, bounds.dispatch}}, {"combine", {combine_seconds, bounds.combine}}};
  for (const auto& [phase, timing] : phases) {
    const auto& [seconds, bound] = timing;
    const std::optional<double> fraction = phase_fraction(bound, seconds);
    if (!fraction || *fraction <= 1.0) continue;
    char text[300];
    std::snprintf(text, sizeof(text),
                  "%s%s took %.2f us, below its minimal bound of %.2f us (fraction %.3f > 1): the bound is "
                  "not a lower bound, a bench bug",
                  phase, row, seconds * 1e6, *bound * 1e6, *fraction);
    return text;
  }
  return "";
}

}  // namespace

std::string minimal_bound_violation(const EngineResult& result, const CopyBandwidth& copy) {
  if (!result.timed) return "";
  const PhaseBounds bounds = minimal_bounds(result, copy);
  std::string violation = row_violation("", result.dispatch_seconds, result.combine_seconds, bounds);
  if (violation.empty() && result.graph_dispatch && result.graph_combine) {
    violation = row_violation(" (graph)", result.graph_dispatch->median_seconds,
                              result.graph_combine->median_seconds, bounds);
  }
  return violation;
}

}  // namespace switchyard::bench
