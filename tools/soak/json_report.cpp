#include "json_report.hpp"

#include <cstdio>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace switchyard::soak {

namespace {

std::string quoted(const std::string& text) {
  std::string out = "\"";
  for (const char character : text) {
    if (character == '"' || character == '\\') {
      out += '\\';
      out += character;
    } else if (static_cast<unsigned char>(character) < 0x20) {
      char escaped[8];
      std::snprintf(escaped, sizeof(escaped), "\\u%04x", character);
      out += escaped;
    } else {
      out += character;
    }
  }
  return out + "\"";
}

void tallies(std::ostream& out, const std::map<std::string, Tally>& by_name) {
  out << "{";
  const char* separator = "";
  for (const auto& [name, tally] : by_name) {
    out << separator << quoted(name) << ": {\"cases\": " << tally.cases
        << ", \"round_trips\": " << tally.round_trips << "}";
    separator = ", ";
  }
  out << "}";
}

}  // namespace

void write_json(const std::string& path, const SoakTotals& totals, const SoakOptions& options) {
  std::ostringstream out;
  out << "{\n  \"backend\": " << quoted(backend_name(options.backend))
      << ",\n  \"seed\": " << quoted(hex(options.seed)) << ",\n  \"engines\": [";
  for (size_t i = 0; i < options.engines.size(); ++i)
    out << (i ? ", " : "") << quoted(soak_engine_name(options.engines[i]));
  out << "],\n  \"seconds\": " << totals.seconds << ",\n  \"cases\": " << totals.cases
      << ",\n  \"round_trips\": " << totals.round_trips << ",\n  \"mismatches\": " << totals.mismatches
      << ",\n  \"errors\": " << totals.errors << ",\n  \"by_engine\": ";
  tallies(out, totals.by_engine);
  out << ",\n  \"by_rank_model\": ";
  tallies(out, totals.by_rank_model);
  out << ",\n  \"host_rss_mib\": {\"before\": " << totals.host_rss_before_mib
      << ", \"after\": " << totals.host_rss_after_mib << ", \"growth\": " << totals.host_growth_mib()
      << ", \"tolerance\": " << options.host_tolerance_mib << "}";
  if (totals.device_used_before_mib) {
    out << ",\n  \"device_memory_mib\": {\"growth\": " << totals.device_growth_mib()
        << ", \"tolerance\": " << options.device_tolerance_mib << "}";
  }
  out << ",\n  \"failures\": [";
  for (size_t i = 0; i < totals.failures.size(); ++i) {
    const Failure& failure = totals.failures[i];
    out << (i ? "," : "") << "\n    {\"case_seed\": " << quoted(hex(failure.case_seed))
        << ", \"case\": " << quoted(failure.case_description) << ", \"what\": " << quoted(failure.what)
        << ", \"replay\": " << quoted(replay_command(options, failure.case_seed)) << "}";
  }
  out << (totals.failures.empty() ? "" : "\n  ")
      << "],\n  \"verdict\": " << quoted(totals.pass(options) ? "pass" : "fail") << "\n}\n";
  std::ofstream file(path);
  file << out.str();
  if (!file) throw std::runtime_error("--json: cannot write '" + path + "'");
}

}  // namespace switchyard::soak
