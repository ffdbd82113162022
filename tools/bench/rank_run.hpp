#pragma once
// One rank's whole run of one engine, the same whether the rank is a thread or a process: its Buffer
// (connected through `group`), a check iteration per input set, --warmup and --iters timed
// iterations, then for the expert-major engines the hook split and the CUDA graph replays; every
// iteration into poisoned outputs and checked after it (runner.hpp). What it measured and found comes
// back as a RankOutcome, which the runner gathers over the ranks.
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "compare.hpp"
#include "dump.hpp"
#include "graph_replay.hpp"
#include "hook_split.hpp"
#include "options.hpp"
#include "problem.hpp"
#include "progress.hpp"
#include "switchyard/buffer.hpp"
#include "switchyard/group.hpp"

namespace switchyard::bench {

struct RankOutcome {
  // Per timed iteration: the phase's time on the rank's clock (CUDA events on its stream, the wall
  // clock on cpu), and the host's wall time of the call itself.
  std::vector<double> dispatch_seconds, combine_seconds;
  std::vector<double> dispatch_host_seconds, combine_host_seconds;
  Difference difference;  // the first, labelled with its iteration; none when every check passed
  HookSplitSeconds split_seconds;
  GraphReplaySeconds graph_seconds;
  // The extra rows: kMeasured, or why not (the same on every rank); empty for the rank-major engines.
  std::string hook_split_status, graph_status;
  std::string note;                                   // the session's (nccl: its version)
  std::optional<SymmetricCombine> symmetric_combine;  // symmetric: the paths its Buffer took
  std::optional<SymmetricDispatch> symmetric_dispatch;
  int checked_iterations = 0;
  int input_sets = 1;
  int64_t cache_flush_bytes = 0;
  // --start timer: the timed phases (every row's) whose stream the StartHold held, and those of them
  // whose start event the stream had reached before the rank began the call.
  int64_t start_holds = 0, start_holds_missed = 0;
};

struct RankRun {
  BenchEngine engine = BenchEngine::normal;
  const BenchOptions* options = nullptr;
  const Problem* problem = nullptr;
  Progress* progress = nullptr;  // rank 0 reports
  DumpDirectory* dump = nullptr;
};

// `buffer` receives the rank's Buffer, so that the caller can keep it alive until every rank is done
// (a rank that fails must not unmap a heap its peers may still write into).
RankOutcome run_rank(const RankRun& run, Group& group, std::unique_ptr<Buffer>& buffer);

// The rank's Buffer options for `engine` (HeapSharing::threads or processes by --ranks-as).
// `symmetric_rows_per_expert`: the symmetric dispatch's rows per expert, which its heap-resident expert
// outputs hold (--symmetric-heap on).
BufferOptions bench_buffer_options(const BenchOptions& options, BenchEngine engine, int rank,
                                   int64_t symmetric_rows_per_expert = 0);

}  // namespace switchyard::bench
