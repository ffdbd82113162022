#pragma once
// --json: the run's options, totals, memory, per-engine and per-rank-model counts, every failure
// with its case seed, and the verdict.
#include <string>

#include "options.hpp"
#include "soak_run.hpp"

namespace switchyard::soak {

// Throws std::runtime_error when the file cannot be written.
void write_json(const std::string& path, const SoakTotals& totals, const SoakOptions& options);

}  // namespace switchyard::soak
