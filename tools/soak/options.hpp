#pragma once
// switchyard-soak's command line. A bad argument becomes a UsageError naming it, what was expected
// and what was given; main turns it into exit status 2.
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "soak_case.hpp"

namespace switchyard::soak {

class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// NOTES: the allowed growth of the memory measured before and after the round trips (after the
// warm-up). Host: the allocator keeps a few arenas of the rank threads, and a page-granular heap;
// device: the driver allocates in 2 MiB pages. A leak of one buffer per case exceeds both within
// a few hundred cases.
constexpr double kDefaultHostToleranceMiB = 16.0;
constexpr double kDefaultDeviceToleranceMiB = 64.0;
// The first tenth of the run (by round trips or by time) is the warm-up that fills the allocators'
// pools; memory is measured at its end.
constexpr double kWarmupFraction = 0.1;

struct SoakOptions {
  Backend backend = Backend::cpu;
  std::optional<double> seconds;
  std::optional<int64_t> round_trips;
  uint64_t seed = 1;
  std::vector<SoakEngine> engines{std::begin(kAllSoakEngines), std::end(kAllSoakEngines)};
  std::string json_path;
  int64_t progress_every = 200;
  std::optional<uint64_t> replay;  // one case, by its seed
  bool self_test_corrupt = false;
  // --no-graph-replays: the cases drawn with CUDA graph replays make direct calls instead.
  bool graph_replays = true;
  bool trace = false;  // a line per case on stderr: its seed, description and the host RSS after it
  double host_tolerance_mib = kDefaultHostToleranceMiB;
  double device_tolerance_mib = kDefaultDeviceToleranceMiB;
  bool help = false;

  bool runs(SoakEngine engine) const;
};

SoakOptions parse_options(int argc, char** argv);
std::string usage();

// The command that replays the case of `seed` under these options.
std::string replay_command(const SoakOptions& options, uint64_t seed);

}  // namespace switchyard::soak
