#pragma once
// Runs one soak case: prepares its rounds, runs its ranks (threads or processes, CPU or CUDA), and
// gathers what they report, with the shared-memory segments a processes case left behind.
#include <cstdint>
#include <string>
#include <vector>

#include "soak_case.hpp"

namespace switchyard::soak {

struct CaseOutcome {
  int64_t round_trips = 0;              // completed and compared (0 when the case failed to run)
  std::vector<std::string> mismatches;  // outputs that differ from the reference
  std::vector<std::string> errors;      // exceptions, crashed ranks, leaked segments
  bool corrupted = false;               // --self-test-corrupt flipped its bit in this case
};

// `corrupt`: flip one bit of rank 0's first non-empty combined output before it is compared.
CaseOutcome run_case(const SoakCase& c, bool corrupt);

}  // namespace switchyard::soak
