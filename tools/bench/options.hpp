#pragma once
// Command line of switchyard-bench: parsing, defaults (which depend on the backend) and the
// cross-argument checks. Every bad argument becomes one UsageError naming the argument, what was
// expected and what was given; main turns it into exit status 2.
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "devices.hpp"
#include "switchyard/buffer.hpp"
#include "switchyard/config.hpp"
#include "switchyard/dtype.hpp"
#include "switchyard/topology.hpp"

namespace switchyard::bench {

class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// How the ranks run (--ranks-as): threads of this process (one Buffer each, HeapSharing::threads), or
// one forked process each (HeapSharing::processes), as users deploy.
enum class RanksAs : uint8_t { threads, processes };
const char* ranks_as_name(RanksAs ranks_as);  // "threads", "processes"

// Where a timed phase's start event lands (--start; start_hold.hpp): as each rank leaves the host
// barrier, or at one moment on the GPU's clock, the same for every rank of that GPU.
enum class StartMode : uint8_t { barrier, timer };
const char* start_mode_name(StartMode mode);  // "barrier", "timer"

// The engines the bench runs: the library's three (switchyard::Engine), and `nccl`, the baseline a
// framework builds without an EP library (sort by destination rank, grouped ncclSend/ncclRecv;
// nccl_session.cpp). The library has no nccl engine, hence a type of the bench's own.
enum class BenchEngine : uint8_t { normal, low_latency, symmetric, nccl };
const char* bench_engine_name(BenchEngine engine);  // "normal", ..., "nccl": the --engine names
// normal and nccl: the --tokens inputs, rank-major outputs, checked against problem.normal.
bool is_rank_major(BenchEngine engine);

// A named shape (--shape): the defaults of --ranks, --hidden, --topk, --experts, --tokens and
// --ll-tokens; each flag given overrides its own.
struct ShapeDefaults {
  const char* name;
  int ranks, hidden, topk, experts;
  int64_t tokens, ll_tokens;
};
// DeepSeek-V3 (DESIGN.md, Performance): top-8 of 256 experts, hidden 7168, 4096 tokens per rank for
// prefill and 128 for decode, on 8 ranks. The default on cuda.
constexpr ShapeDefaults kDeepSeekV3Shape{"deepseek-v3", 8, 7168, 8, 256, 4096, 128};
// NOTES: the default on cpu, where R ranks run as threads on what may be a 2-core laptop: the whole
// default run in a few seconds and under 1 GB of memory. The expert-major engines' buffers grow with
// experts x ranks x tokens, hence the smaller decode batch.
constexpr ShapeDefaults kLaptopShape{"laptop", 4, 2048, 8, 64, 256, 64};
constexpr int kDefaultRanks = kDeepSeekV3Shape.ranks;
constexpr int kGpuDefaultIters = 20;
constexpr int kGpuDefaultWarmup = 3;
constexpr int kCpuDefaultIters = 10;
constexpr int kCpuDefaultWarmup = 2;
// --expert-capacity auto rounds the largest expert's rows up to a multiple of this (a GEMM-friendly
// tile of rows, as a framework would size per-expert buffers).
constexpr int64_t kExpertCapacityMultiple = 16;
constexpr uint64_t kDefaultSeed = 1;
// fp8 scales cover this many channels each (DESIGN.md, Semantics).
constexpr int kFp8ScaleBlock = 128;
// --channels auto: Config::num_channels 0 lets the backend pick.
constexpr int kAutoChannels = 0;
// --start timer: how far ahead of rank 0's reading of the GPU's clock the phase starts. It must cover
// the host's allgather of the moment and every rank's enqueue of the call; the bound keeps a typo from
// idling every phase for minutes.
constexpr double kDefaultStartAheadMicroseconds = 1000;
constexpr double kMaxStartAheadMicroseconds = 1e6;

// What the command line said; unset optionals take their defaults in resolve().
struct CommandLine {
  bool help = false;
  std::optional<std::string> backend;   // auto | cpu | cuda
  std::optional<std::string> engine;    // normal | low_latency | symmetric | nccl | all
  std::optional<std::string> shape;     // laptop | deepseek-v3
  std::optional<std::string> ranks_as;  // threads | processes
  std::optional<int> ranks, ranks_per_node, hidden, topk, experts, iters, warmup;
  std::optional<int> devices;  // kAutoDevices, or the number of GPUs to spread the ranks over
  std::optional<int64_t> tokens;
  std::optional<int64_t> ll_tokens;
  std::optional<int64_t> symmetric_tokens;
  std::optional<int64_t> expert_capacity;  // kAutoExpertCapacity for "auto"
  std::optional<std::string> dtype;        // bf16 | fp8
  std::optional<uint64_t> seed;
  std::optional<std::string> json_path, dump_dir;
  std::optional<int> channels, ring_slots, chunk_tokens;
  std::optional<double> timeout_seconds;
  std::optional<std::string> symmetric_combine;
  std::optional<std::string> symmetric_dispatch;
  std::optional<std::string> symmetric_heap;  // on | off
  std::optional<std::string> normal_heap;     // on | staged | off
  std::optional<std::string> start;           // auto | barrier | timer
  std::optional<double> start_ahead_us;
  std::optional<std::string> cache_flush;  // on | off
};

// Where a default came from, so that the output can say so.
struct DefaultNotes {
  // The shape whose defaults applied, and why ("the cpu default", "--shape").
  std::string shape = kDeepSeekV3Shape.name;
  std::string shape_source;
  // Why the ranks run as they do ("--ranks-as", "one GPU per rank", ...).
  std::string ranks_as_source;
  bool iters_from_cpu_default = false;
  // How the low_latency engine's tokens per rank were chosen, for the output ("--ll-tokens", ...).
  std::string ll_tokens_source;
  // How the symmetric engine's tokens per rank were chosen ("--symmetric-tokens", ...).
  std::string symmetric_tokens_source;
  // Why the phases start as they do ("--start timer", "the default where every rank is on one GPU; ...").
  std::string start_source;
};

// --expert-capacity auto: resolved from the generated inputs (Problem::symmetric.expert_capacity).
constexpr int64_t kAutoExpertCapacity = -1;

struct BenchOptions {
  Backend backend = Backend::cpu;
  bool backend_was_auto = true;
  std::vector<BenchEngine> engines;  // what to run, in order
  bool engine_was_all = true;        // "all": engines that do not exist are reported as skipped
  Topology topology{kDefaultRanks, kDefaultRanks};
  DeviceMap devices;  // which GPU each rank uses (--devices); empty on cpu
  RanksAs ranks_as = RanksAs::threads;
  StartMode start = StartMode::barrier;
  double start_ahead_us = kDefaultStartAheadMicroseconds;  // read only with StartMode::timer
  // --cache-flush off: the caches are not evicted before a timed phase (what a call finds warm: its code,
  // the peers' words), for comparison with the default's cold caches.
  bool cache_flush = true;
  int64_t tokens_per_rank = kDeepSeekV3Shape.tokens;
  // The low_latency engine's tokens per rank: its max_tokens_per_rank, and its inputs' size.
  int64_t ll_tokens_per_rank = kDeepSeekV3Shape.ll_tokens;
  // The symmetric engine's tokens per rank (its max_tokens_per_rank and inputs): --symmetric-tokens,
  // else the low_latency engine's.
  int64_t symmetric_tokens_per_rank = kDeepSeekV3Shape.ll_tokens;
  // The symmetric dispatch's expert_capacity: 0 (R * max rows per expert), N, or kAutoExpertCapacity.
  int64_t expert_capacity = 0;
  // --symmetric-heap on: the symmetric engine's x and y live in its heap-resident tensors
  // (Buffer::symmetric_input, symmetric_expert_output), read in place on any topology.
  bool symmetric_heap = false;
  // --normal-heap on: the normal engine's x and expert outputs live in its heap-resident inputs
  // (Buffer::normal_input, normal_combine_input), which the peers read in place (docs/normal-in-place.md).
  bool normal_heap = false;
  // --normal-heap staged (with normal_heap): the calls pass their ordinary x and expert outputs, which the
  // Buffer copies into its heap inputs inside each call (core/staged_heap_input.hpp).
  bool normal_heap_staged = false;
  int hidden = kDeepSeekV3Shape.hidden;
  int topk = kDeepSeekV3Shape.topk;
  int num_experts = kDeepSeekV3Shape.experts;
  DType dtype = DType::bf16;
  int iters = kGpuDefaultIters;
  int warmup = kGpuDefaultWarmup;
  uint64_t seed = kDefaultSeed;
  std::string json_path;  // empty: no JSON
  std::string dump_dir;   // empty: no dump
  Config config;
  DefaultNotes notes;
  bool runs(BenchEngine engine) const;
  bool runs_rank_major() const { return runs(BenchEngine::normal) || runs(BenchEngine::nccl); }
  bool runs_expert_major() const { return runs(BenchEngine::low_latency) || runs(BenchEngine::symmetric); }
};

// Parses argv (without argv[0]). Accepts "--flag value" and "--flag=value". Throws UsageError.
CommandLine parse_command_line(const std::vector<std::string>& args);

// Fills the defaults for the chosen backend and checks the arguments against each other. Throws
// UsageError. `cuda_is_available` decides --backend auto and refuses --backend cuda without it;
// `visible_devices` (CUDA devices this process sees) resolves --devices (devices.hpp).
BenchOptions resolve(const CommandLine& command_line, bool cuda_is_available, int visible_devices);

std::string help_text();

}  // namespace switchyard::bench
