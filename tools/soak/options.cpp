#include "options.hpp"

#include <algorithm>
#include <cstdlib>
#include <sstream>

namespace switchyard::soak {

namespace {

// The value after a flag.
std::string value_of(int argc, char** argv, int& index) {
  const std::string flag = argv[index];
  if (index + 1 >= argc) throw UsageError(flag + ": expected a value, got none");
  return argv[++index];
}

uint64_t parse_unsigned(const std::string& flag, const std::string& text) {
  char* end = nullptr;
  const unsigned long long value = std::strtoull(text.c_str(), &end, 0);
  if (text.empty() || text[0] == '-' || *end != '\0') {
    throw UsageError(flag + ": expected a non-negative integer (decimal or 0x hex), got '" + text + "'");
  }
  return value;
}

double parse_positive(const std::string& flag, const std::string& text, const char* unit) {
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || !(value > 0)) {
    throw UsageError(flag + ": expected a positive number of " + unit + ", got '" + text + "'");
  }
  return value;
}

std::vector<SoakEngine> parse_engines(const std::string& text) {
  std::vector<SoakEngine> engines;
  std::istringstream list(text);
  std::string name;
  while (std::getline(list, name, ',')) {
    if (name == "all") return {std::begin(kAllSoakEngines), std::end(kAllSoakEngines)};
    try {
      engines.push_back(soak_engine_from_name(name));
    } catch (const std::invalid_argument& error) {
      throw UsageError(std::string("--engines: ") + error.what());
    }
  }
  if (engines.empty())
    throw UsageError("--engines: expected a comma-separated list of engines, got '" + text + "'");
  return engines;
}

}  // namespace

bool SoakOptions::runs(SoakEngine engine) const {
  return std::find(engines.begin(), engines.end(), engine) != engines.end();
}

SoakOptions parse_options(int argc, char** argv) {
  SoakOptions options;
  for (int index = 1; index < argc; ++index) {
    const std::string flag = argv[index];
    if (flag == "--help" || flag == "-h") {
      options.help = true;
    } else if (flag == "--backend") {
      const std::string name = value_of(argc, argv, index);
      if (name != "cpu" && name != "cuda")
        throw UsageError("--backend: expected cpu or cuda, got '" + name + "'");
      options.backend = name == "cpu" ? Backend::cpu : Backend::cuda;
    } else if (flag == "--seconds") {
      options.seconds = parse_positive(flag, value_of(argc, argv, index), "seconds");
    } else if (flag == "--round-trips") {
      options.round_trips = static_cast<int64_t>(parse_unsigned(flag, value_of(argc, argv, index)));
      if (*options.round_trips == 0) throw UsageError("--round-trips: expected at least 1, got 0");
    } else if (flag == "--seed") {
      options.seed = parse_unsigned(flag, value_of(argc, argv, index));
    } else if (flag == "--engines") {
      options.engines = parse_engines(value_of(argc, argv, index));
    } else if (flag == "--json") {
      options.json_path = value_of(argc, argv, index);
    } else if (flag == "--progress-every") {
      options.progress_every = static_cast<int64_t>(parse_unsigned(flag, value_of(argc, argv, index)));
      if (options.progress_every == 0) throw UsageError("--progress-every: expected at least 1, got 0");
    } else if (flag == "--replay") {
      options.replay = parse_unsigned(flag, value_of(argc, argv, index));
    } else if (flag == "--no-graph-replays") {
      options.graph_replays = false;
    } else if (flag == "--trace") {
      options.trace = true;
    } else if (flag == "--self-test-corrupt") {
      options.self_test_corrupt = true;
    } else if (flag == "--host-tolerance-mib") {
      options.host_tolerance_mib = parse_positive(flag, value_of(argc, argv, index), "MiB");
    } else if (flag == "--device-tolerance-mib") {
      options.device_tolerance_mib = parse_positive(flag, value_of(argc, argv, index), "MiB");
    } else {
      throw UsageError("unknown argument '" + flag + "' (see --help)");
    }
  }
  if (!options.seconds && !options.round_trips) options.round_trips = 1000;
#ifndef SWITCHYARD_WITH_CUDA
  if (options.backend == Backend::cuda)
    throw UsageError("--backend: cuda needs a build with the CUDA backend");
#endif
  return options;
}

std::string usage() {
  return R"(usage: switchyard-soak [options]
Random round trips (dispatch, synthetic expert, combine) through the public API, every output
compared bit for bit with the reference; host (and device) memory measured before and after.

  --backend cpu|cuda        backend (default cpu); cuda runs ranks as threads on GPU 0
  --seconds S               stop after S seconds
  --round-trips N           stop after N round trips (default 1000 when neither is given)
  --seed X                  run seed (default 1); each case's seed derives from it
  --engines LIST            comma-separated: normal,internode,low_latency,symmetric (default all)
  --json PATH               write the results as JSON
  --progress-every N        a progress line on stderr every N round trips (default 200)
  --replay SEED             run the one case of that seed (printed with every mismatch)
  --no-graph-replays        cuda: cases drawn with CUDA graph replays make direct calls instead
  --trace                   a line per case on stderr (seed, case, host RSS after it)
  --self-test-corrupt       flip one output bit before it is compared: the run must fail
  --host-tolerance-mib M    allowed host RSS growth (default 16)
  --device-tolerance-mib M  allowed device memory growth (default 64)

The last stdout line is the verdict; exit 0 on pass, 1 on fail, 2 on a usage error.
)";
}

std::string replay_command(const SoakOptions& options, uint64_t seed) {
  return std::string("switchyard-soak --backend ") + backend_name(options.backend) +
         (options.graph_replays ? "" : " --no-graph-replays") + " --replay " + hex(seed);
}

}  // namespace switchyard::soak
