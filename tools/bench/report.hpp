#pragma once
// The human-readable output on stdout: a header with the shape and the copy bandwidth, then per
// engine a table and a check line.
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "copy_bandwidth.hpp"
#include "options.hpp"
#include "problem.hpp"
#include "runner.hpp"

namespace switchyard::bench {

// `problem`: its traffic and the expert-major engines' tokens and capacity (auto resolved).
// `cache_rule`: what evicts the cache before every timed phase (cache_flush_rule).
void print_header(std::FILE* out, const BenchOptions& options, const CopyBandwidth& copy,
                  const Problem& problem, const std::string& cache_rule);
void print_engine(std::FILE* out, const EngineResult& result, const CopyBandwidth& copy);

// How much faster an engine ran than the nccl baseline: nccl's median time / the engine's, per phase
// and for both. Only when both were timed with the same tokens per rank.
struct NcclComparison {
  double dispatch = 0, combine = 0, total = 0;
};
std::optional<NcclComparison> compare_with_nccl(const EngineResult& result,
                                                const std::vector<EngineResult>& results);
// The "vs nccl" lines after the engines; nothing when nccl did not run.
void print_nccl_comparison(std::FILE* out, const std::vector<EngineResult>& results);

// --json FILE: the options, the copy bandwidth and every engine's result (skipped ones with a
// reason and null numbers). Throws std::runtime_error when the file cannot be written.
void write_results_json(const std::string& path, const BenchOptions& options, const CopyBandwidth& copy,
                        const std::vector<EngineResult>& results);

}  // namespace switchyard::bench
