#pragma once
// The end of the output: one table of every engine's headline figures, then the verdict as the last
// line, so that a reader (or a script's `tail -1`) sees whether every check passed and which failed.
#include <cstdio>
#include <string>
#include <vector>

#include "copy_bandwidth.hpp"
#include "runner.hpp"

namespace switchyard::bench {

void print_summary_table(std::FILE* out, const std::vector<EngineResult>& results, const CopyBandwidth& copy);

// "verdict: pass: ..." when every engine that ran passed (skipped ones are named with why), else
// "verdict: FAIL: ..." naming each engine that failed and its first failure.
std::string verdict_line(const std::vector<EngineResult>& results);

}  // namespace switchyard::bench
