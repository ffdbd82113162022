#include "summary.hpp"

#include <cinttypes>

#include "metrics.hpp"

namespace switchyard::bench {
namespace {

std::string number_text(std::optional<double> value, const char* format) {
  if (!value) return "-";
  char text[32];
  std::snprintf(text, sizeof(text), format, *value);
  return text;
}

}  // namespace

void print_summary_table(std::FILE* out, const std::vector<EngineResult>& results,
                         const CopyBandwidth& copy) {
  std::fprintf(out, "\nresults: medians; GB/s per rank as DeepEP counts it; fractions of both phases\n");
  std::fprintf(out, "  %-12s %7s %12s %12s %10s %11s %11s %8s %7s  %s\n", "engine", "tokens", "dispatch us",
               "combine us", "ns/token", "disp GB/s/r", "comb GB/s/r", "minimal", "design", "check");
  for (const EngineResult& result : results) {
    const char* name = bench_engine_name(result.engine);
    if (!result.timed) {
      std::fprintf(out, "  %-12s %7s %12s %12s %10s %11s %11s %8s %7s  %s\n", name, "-", "-", "-", "-", "-",
                   "-", "-", "-", check_status_name(result.status));
      continue;
    }
    const std::optional<double> per_token =
        nanoseconds_per_token(result.dispatch_seconds + result.combine_seconds, result.tokens_per_rank);
    std::fprintf(
        out, "  %-12s %7" PRId64 " %12.1f %12.1f %10s %11s %11s %8s %7s  %s\n", name, result.tokens_per_rank,
        result.dispatch_seconds * 1e6, result.combine_seconds * 1e6, number_text(per_token, "%.1f").c_str(),
        number_text(gigabytes_per_second_per_rank(result.received_rows_by_rank, result.dispatch_row_bytes,
                                                  result.dispatch_rank_seconds),
                    "%.2f")
            .c_str(),
        number_text(gigabytes_per_second_per_rank(result.received_rows_by_rank, result.combine_row_bytes,
                                                  result.combine_rank_seconds),
                    "%.2f")
            .c_str(),
        number_text(minimal_fraction(result, copy), "%.3f").c_str(),
        number_text(design_fraction(result, copy), "%.3f").c_str(), check_status_name(result.status));
  }
}

std::string verdict_line(const std::vector<EngineResult>& results) {
  std::string passed, skipped, failed;
  auto append = [](std::string& list, const std::string& item) { list += (list.empty() ? "" : "; ") + item; };
  for (const EngineResult& result : results) {
    const std::string name = bench_engine_name(result.engine);
    switch (result.status) {
      case CheckStatus::passed:
        passed += (passed.empty() ? "" : ", ") + name;
        break;
      case CheckStatus::skipped:
        append(skipped, name + " skipped: " + result.detail);
        break;
      case CheckStatus::failed:
      case CheckStatus::error:
        append(failed, name + " " + check_status_name(result.status) + ": " + result.detail);
        break;
    }
  }
  if (!failed.empty()) return "verdict: FAIL: " + failed;
  if (passed.empty()) return "verdict: nothing ran: " + skipped;
  std::string line = "verdict: pass: every iteration of " + passed + " matched the reference bit for bit";
  if (!skipped.empty()) line += "; " + skipped;
  return line;
}

}  // namespace switchyard::bench
