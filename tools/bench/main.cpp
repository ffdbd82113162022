// switchyard-bench: the project's main job (DESIGN.md, Performance). See --help.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "copy_bandwidth.hpp"
#include "dump.hpp"
#include "engines.hpp"
#include "metrics.hpp"
#include "options.hpp"
#include "parent_probes.hpp"
#include "problem.hpp"
#include "progress.hpp"
#include "report.hpp"
#include "runner.hpp"
#include "summary.hpp"
#include "switchyard/buffer.hpp"
#include "switchyard/errors.hpp"

namespace switchyard::bench {
namespace {

constexpr int kExitOk = 0;
constexpr int kExitFailed = 1;  // a check failed, or the library failed at run time
constexpr int kExitUsage = 2;   // a bad argument, or a configuration the library refuses

// Errors go to stderr on one line.
int report_error(int status, const std::string& message) {
  std::string line = message;
  for (char& c : line) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  std::fflush(stdout);
  std::fprintf(stderr, "switchyard-bench: %s\n", line.c_str());
  return status;
}

// --json is written at the end; refuse an unwritable path before the run, without creating it.
void check_json_path(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code error;
  bool writable;
  if (fs::exists(path, error)) {
    writable = !fs::is_directory(path, error) && access(path.c_str(), W_OK) == 0;
  } else {
    fs::path parent = fs::path(path).parent_path();
    if (parent.empty()) parent = ".";
    writable = fs::is_directory(parent, error) && access(parent.c_str(), W_OK | X_OK) == 0;
  }
  if (!writable) throw UsageError("--json: expected a file that can be written, got '" + path + "'");
}

// Everything that can refuse the arguments, before any long work.
BenchOptions set_up(const CommandLine& command_line) {
  // Probed from a forked child: ranks may be forked processes, which need a parent without CUDA.
  // Nothing to probe for the cpu backend.
  const CudaPresence cuda =
      command_line.backend == std::optional<std::string>("cpu") ? CudaPresence{} : probe_cuda();
  BenchOptions options = resolve(command_line, cuda.available, cuda.visible_devices);
  for (BenchEngine engine : options.engines) {
    EngineSupport support = engine_support(engine, options);
    if (!support.runs_here && !options.engine_was_all) {
      throw UsageError(std::string("--engine: ") + bench_engine_name(engine) + " is " + support.reason);
    }
  }
  // Ranks as threads of this process each need their own hardware queue of the GPU's CUDA context
  // (src/cuda/device_connections.hpp); the driver reads this when the context is created, so it is
  // set before this process's first CUDA call (probe_cuda's was a child's). Not for ranks as
  // processes: each needs one queue, and MPS clients that ask for 32 fail to start from the fourth
  // on. A value the caller set is kept.
  if (options.backend == Backend::cuda && options.ranks_as == RanksAs::threads)
    setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 0);
  options.topology.validate();
  options.config.validate();
  check_fits_in_memory(options);
  if (!options.json_path.empty()) check_json_path(options.json_path);
  return options;
}

bool ran(const std::vector<EngineResult>& results, BenchEngine engine) {
  for (const EngineResult& result : results) {
    if (result.engine == engine && result.status != CheckStatus::skipped) return true;
  }
  return false;
}

int run(const BenchOptions& options) {
  std::unique_ptr<DumpDirectory> dump;
  if (!options.dump_dir.empty()) dump = std::make_unique<DumpDirectory>(options.dump_dir);

  Progress progress;
  progress.update("measuring the copy bandwidth");
  const CopyBandwidth copy = copy_bandwidth_for(options);
  const Problem problem = make_problem(options, progress);
  progress.clear();
  print_header(stdout, options, copy, problem, cache_flush_rule_for(options));
  std::fflush(stdout);

  std::vector<EngineResult> results;
  std::vector<std::string> engines_run;
  const int num_engines = static_cast<int>(options.engines.size());
  for (int index = 0; index < num_engines; ++index) {
    const BenchEngine engine = options.engines[index];
    progress.begin_part(index, num_engines);
    EngineSupport support = engine_support(engine, options);
    EngineResult result = support.runs_here ? run_engine(engine, options, problem, progress, dump.get())
                                            : skipped_result(engine, support.reason);
    progress.clear();
    // A time below the minimal bound means the bound is wrong: the run must not pass quietly.
    const std::string violation = minimal_bound_violation(result, copy);
    if (result.status == CheckStatus::passed && !violation.empty()) {
      result.status = CheckStatus::failed;
      result.detail = "minimal bound: " + violation;
    }
    print_engine(stdout, result, copy);
    std::fflush(stdout);
    if (result.status != CheckStatus::skipped) engines_run.push_back(bench_engine_name(result.engine));
    results.push_back(result);
  }
  print_nccl_comparison(stdout, results);
  print_summary_table(stdout, results, copy);

  if (!options.json_path.empty()) write_results_json(options.json_path, options, copy, results);
  if (dump) {
    if (ran(results, BenchEngine::normal) || ran(results, BenchEngine::nccl)) {
      progress.update("writing the reference to --dump");
      dump_normal_reference(*dump, problem);
      progress.clear();
    }
    const bool ran_low_latency = ran(results, BenchEngine::low_latency);
    const bool ran_symmetric = ran(results, BenchEngine::symmetric);
    // symmetric on low_latency's shape (the default) shares its reference and directory.
    const bool symmetric_shares =
        options.symmetric_tokens_per_rank == options.ll_tokens_per_rank && options.expert_capacity == 0;
    if (ran_low_latency || (ran_symmetric && symmetric_shares)) {
      progress.update("writing the low_latency reference to --dump");
      dump_low_latency_reference(*dump, ran_low_latency ? problem.low_latency : problem.symmetric,
                                 "reference_low_latency");
      progress.clear();
    }
    if (ran_symmetric && !symmetric_shares) {
      progress.update("writing the symmetric reference to --dump");
      dump_low_latency_reference(*dump, problem.symmetric, "reference_symmetric");
      progress.clear();
    }
    dump->write_meta(options, engines_run);
  }

  int status = kExitOk;
  for (const EngineResult& result : results) {
    if (result.status == CheckStatus::failed || result.status == CheckStatus::error) status = kExitFailed;
  }
  // The last line: whether every check passed, or which failed.
  std::printf("\n%s\n", verdict_line(results).c_str());
  std::fflush(stdout);
  return status;
}

int bench_main(const std::vector<std::string>& args) {
  BenchOptions options;
  try {
    CommandLine command_line = parse_command_line(args);
    if (command_line.help) {
      std::fputs(help_text().c_str(), stdout);
      return kExitOk;
    }
    options = set_up(command_line);
  } catch (const UsageError& error) {
    return report_error(kExitUsage, error.what());
  } catch (const InvalidArgument& error) {
    return report_error(kExitUsage, error.what());
  } catch (const Unsupported& error) {
    return report_error(kExitUsage, error.what());
  }

  try {
    return run(options);
  } catch (const UsageError& error) {
    return report_error(kExitUsage, error.what());
  } catch (const InvalidArgument& error) {
    return report_error(kExitUsage, std::string("the library refused the configuration: ") + error.what());
  } catch (const Unsupported& error) {
    return report_error(kExitUsage, std::string("not supported: ") + error.what());
  } catch (const std::bad_alloc&) {
    return report_error(kExitFailed, "out of host memory (try fewer --tokens or --ranks)");
  }
}

}  // namespace
}  // namespace switchyard::bench

int main(int argc, char** argv) {
  try {
    return switchyard::bench::bench_main(std::vector<std::string>(argv + 1, argv + argc));
  } catch (const std::exception& error) {
    return switchyard::bench::report_error(1, error.what());
  }
}
