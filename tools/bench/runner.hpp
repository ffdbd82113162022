#pragma once
// Runs one engine on every rank (threads of this process, one Buffer each): a check iteration per
// input set, then --warmup and --iters timed iterations of dispatch and combine. Every iteration
// writes into outputs poisoned just before it and is compared with the reference just after it,
// both outside the timed window, so that a timed call that wrote nothing fails the run.
#include <optional>
#include <string>
#include <vector>

#include "dump.hpp"
#include "options.hpp"
#include "problem.hpp"
#include "progress.hpp"

namespace switchyard::bench {

enum class CheckStatus { passed, failed, skipped, error };
const char* check_status_name(CheckStatus status);  // "pass", "fail", "skipped", "error"

// A row's timing: over the timed iterations, the median and the p99 (nearest rank) of the slowest
// rank's time per iteration.
struct PhaseTiming {
  double median_seconds = 0, p99_seconds = 0;
};

// EngineResult::graph_replay and hook_split when their rows were timed.
constexpr const char* kMeasured = "measured";
// EngineResult::graph_replay on cpu, where there are no CUDA graphs (the table omits the rows).
constexpr const char* kNoGraphOnCpu = "not available (cpu backend)";

struct EngineResult {
  BenchEngine engine = BenchEngine::normal;
  CheckStatus status = CheckStatus::skipped;
  std::string detail;  // the first difference, why it was skipped, or the error
  bool timed = false;  // the timings below are valid
  int iters = 0, warmup = 0;
  // Median over the timed iterations of the slowest rank's time, and the p99 (nearest rank) of it.
  double dispatch_seconds = 0, combine_seconds = 0;
  double dispatch_p99_seconds = 0, combine_p99_seconds = 0;
  // Logical bytes, all ranks: delivered rows x row payload (DeepEP's bytes).
  int64_t dispatch_bytes = 0, combine_bytes = 0;
  // Of those, the bytes of rows between ranks on different GPUs (0 when all ranks share one).
  int64_t remote_dispatch_bytes = 0, remote_combine_bytes = 0;
  // The minimal bound's memory bytes per phase (minimal_bound.hpp).
  int64_t minimal_dispatch_bytes = 0, minimal_combine_bytes = 0;
  // DeepEP's per-rank GB/s: the rows each rank receives, the row payloads, and per rank the median over
  // the timed iterations of that rank's own time per phase.
  std::vector<int64_t> received_rows_by_rank;
  int64_t dispatch_row_bytes = 0, combine_row_bytes = 0;
  std::vector<double> dispatch_rank_seconds, combine_rank_seconds;
  // Iterations whose outputs were poisoned before and compared with the reference after: the check
  // iterations, warmup and timed ones, and the hook split's and graph replays' rounds.
  int checked_iterations = 0;
  // "threads" or "processes" (--ranks-as), and the host's wall time of each call (the slowest rank's
  // median): on cuda, what a call costs the host apart from its stream's time.
  std::string ranks_as;
  double dispatch_host_seconds = 0, combine_host_seconds = 0;
  // The dispatch call waits on the host for the device (normal's and nccl's counts, which size their outputs)
  // and --start timer holds the stream: that wait sits behind the hold, so the call's host time is mostly the
  // hold's lead, not the call's cost. The report and the JSON leave it out then (--start barrier times it).
  bool dispatch_host_behind_hold = false;
  // Bytes of the scratch buffer written before every timed phase to evict the cache (rank 0's), and
  // the input sets the iterations rotate through.
  int64_t cache_flush_bytes = 0;
  int input_sets = 1;
  // --start timer: over all ranks, the timed phases (every row's) the StartHold held, and those whose moment
  // had passed before the rank began the call (its start event already reached); 0 with barrier.
  int64_t start_holds = 0, start_holds_missed = 0;
  int64_t tokens_per_rank = 0;  // the engine's own: --tokens for normal, the --ll-tokens rule for low_latency
  int64_t delivered_rows = 0;   // normal: (token, destination rank) pairs; low_latency: (token, expert)
  // The expert-major engines: rows per local expert of recv_x (expert_capacity resolved, or R x max);
  // 0 for normal and nccl.
  int64_t rows_per_expert = 0;
  std::optional<NodeBytes> node_bytes;  // normal across nodes only: RDMA and NVLink bytes apart
  // The design roofline's bytes per phase (design_roofline.hpp): absent, with why in design_note,
  // when not counted; design_passes says what was counted.
  std::optional<int64_t> design_dispatch_bytes, design_combine_bytes;
  std::string design_passes, design_note;
  // The expert-major engines' extra rows (empty strings for normal and nccl, which have none):
  // CUDA graph replay of dispatch and combine (the launch-free latency): kMeasured, or why not.
  std::string graph_replay;
  std::optional<PhaseTiming> graph_dispatch, graph_combine;
  // The send and receive halves apart (return_recv_hook, ranks meeting at a host barrier between
  // them): kMeasured, or why not.
  std::string hook_split;
  std::optional<PhaseTiming> dispatch_send, dispatch_recv, combine_send, combine_recv;
  std::string note;  // how the engine ran, when worth a line (nccl: the NCCL version)
  // symmetric: the combine path its Buffers took ("push" or "pull"; Buffer::symmetric_combine_path);
  // empty for the other engines and when none connected.
  std::string symmetric_combine;
  // symmetric: its dispatch source ("publish" or "zero_copy"; Buffer::symmetric_dispatch_path); empty
  // likewise.
  std::string symmetric_dispatch;
};

// The tokens per rank an engine runs, and what its traffic counts.
int64_t engine_tokens_per_rank(BenchEngine engine, const BenchOptions& options);
const Traffic& engine_traffic(BenchEngine engine, const Problem& problem);

EngineResult skipped_result(BenchEngine engine, const std::string& why);

// Whether `engine`'s dispatch call waits on the host for the device while `start` holds the stream (normal's
// and nccl's counts behind --start timer's hold): its host time is then the hold's, and is not reported.
bool dispatch_host_waits_behind_hold(BenchEngine engine, StartMode start);

// Runs `engine`, which must exist for the backend: the check iterations, warmup and timed iterations,
// then for the expert-major engines the hook split (if the engine has one) and, on cuda, the CUDA graph
// replays, each followed by a bitwise check. A library error at run time (a timeout, say) becomes
// CheckStatus::error; with --engine all, an Unsupported one becomes skipped. InvalidArgument (a
// configuration the library refuses) propagates. A graph capture that fails only skips the graph rows.
EngineResult run_engine(BenchEngine engine, const BenchOptions& options, const Problem& problem,
                        Progress& progress, DumpDirectory* dump);

}  // namespace switchyard::bench
