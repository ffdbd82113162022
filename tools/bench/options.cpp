#include "options.hpp"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <limits>
#include <map>
#include <memory>

namespace switchyard::bench {
namespace {

std::string quoted(const std::string& text) {
  return "'" + text + "'";
}

// Whole-string integer in [min, max]; `expected` reads like "a positive integer".
int64_t parse_integer(const std::string& flag, const std::string& text, int64_t min, int64_t max,
                      const std::string& expected) {
  const char* begin = text.c_str();
  char* end = nullptr;
  errno = 0;
  long long value = std::strtoll(begin, &end, 10);
  bool is_integer =
      !text.empty() && end == begin + text.size() && text.find_first_of(" \t") == std::string::npos;
  if (!is_integer) throw UsageError(flag + ": expected " + expected + ", got " + quoted(text));
  if (errno == ERANGE || value < min || value > max) {
    throw UsageError(flag + ": expected " + expected + " (" + std::to_string(min) + " to " +
                     std::to_string(max) + "), got " + quoted(text));
  }
  return value;
}

int parse_int(const std::string& flag, const std::string& text, int min, const std::string& expected) {
  return static_cast<int>(parse_integer(flag, text, min, std::numeric_limits<int>::max(), expected));
}

uint64_t parse_seed(const std::string& flag, const std::string& text) {
  const std::string expected = "a non-negative integer";
  const char* begin = text.c_str();
  char* end = nullptr;
  errno = 0;
  unsigned long long value = std::strtoull(begin, &end, 10);
  bool is_integer = !text.empty() && text[0] >= '0' && text[0] <= '9' && end == begin + text.size();
  if (!is_integer || errno == ERANGE)
    throw UsageError(flag + ": expected " + expected + ", got " + quoted(text));
  return value;
}

double parse_seconds(const std::string& flag, const std::string& text) {
  const char* begin = text.c_str();
  char* end = nullptr;
  errno = 0;
  double value = std::strtod(begin, &end);
  bool is_number = !text.empty() && end == begin + text.size();
  if (!is_number || errno == ERANGE || !std::isfinite(value) || value <= 0) {
    throw UsageError(flag + ": expected a positive number of seconds, got " + quoted(text));
  }
  return value;
}

// --start-ahead-us: microseconds above 0, at most kMaxStartAheadMicroseconds.
double parse_start_ahead(const std::string& flag, const std::string& text) {
  const char* begin = text.c_str();
  char* end = nullptr;
  errno = 0;
  double value = std::strtod(begin, &end);
  bool is_number = !text.empty() && end == begin + text.size();
  if (!is_number || errno == ERANGE || !std::isfinite(value) || value <= 0 ||
      value > kMaxStartAheadMicroseconds) {
    throw UsageError(flag + ": expected a number of microseconds above 0 and at most " +
                     std::to_string(static_cast<int64_t>(kMaxStartAheadMicroseconds)) + ", got " +
                     quoted(text));
  }
  return value;
}

std::string parse_choice(const std::string& flag, const std::string& text,
                         const std::vector<std::string>& choices) {
  std::string alternatives;
  for (const std::string& choice : choices) {
    if (choice == text) return text;
    alternatives += (alternatives.empty() ? "" : "|") + choice;
  }
  throw UsageError(flag + ": expected " + alternatives + ", got " + quoted(text));
}

using Setter = std::function<void(CommandLine&, const std::string& flag, const std::string& value)>;

Setter positive(std::optional<int> CommandLine::*field) {
  return [field](CommandLine& c, const std::string& flag, const std::string& value) {
    c.*field = parse_int(flag, value, 1, "a positive integer");
  };
}

Setter non_negative(std::optional<int> CommandLine::*field) {
  return [field](CommandLine& c, const std::string& flag, const std::string& value) {
    c.*field = parse_int(flag, value, 0, "a non-negative integer");
  };
}

Setter choice(std::optional<std::string> CommandLine::*field, std::vector<std::string> choices) {
  return [field, choices](CommandLine& c, const std::string& flag, const std::string& value) {
    c.*field = parse_choice(flag, value, choices);
  };
}

Setter path(std::optional<std::string> CommandLine::*field, const std::string& expected) {
  return [field, expected](CommandLine& c, const std::string& flag, const std::string& value) {
    if (value.empty()) throw UsageError(flag + ": expected " + expected + ", got ''");
    c.*field = value;
  };
}

const std::map<std::string, Setter>& value_flags() {
  static const std::map<std::string, Setter> flags = {
      {"--backend", choice(&CommandLine::backend, {"auto", "cpu", "cuda"})},
      {"--engine", choice(&CommandLine::engine, {"normal", "low_latency", "symmetric", "nccl", "all"})},
      {"--shape", choice(&CommandLine::shape, {"laptop", "deepseek-v3"})},
      {"--ranks-as", choice(&CommandLine::ranks_as, {"threads", "processes"})},
      {"--ranks", positive(&CommandLine::ranks)},
      {"--devices",
       [](CommandLine& c, const std::string& flag, const std::string& value) {
         c.devices =
             value == "auto" ? kAutoDevices : parse_int(flag, value, 1, "auto or a positive number of GPUs");
       }},
      {"--ranks-per-node", positive(&CommandLine::ranks_per_node)},
      {"--tokens",
       [](CommandLine& c, const std::string& flag, const std::string& value) {
         c.tokens =
             parse_integer(flag, value, 0, std::numeric_limits<int32_t>::max(), "a non-negative integer");
       }},
      {"--ll-tokens",
       [](CommandLine& c, const std::string& flag, const std::string& value) {
         c.ll_tokens =
             parse_integer(flag, value, 0, std::numeric_limits<int32_t>::max(), "a non-negative integer");
       }},
      {"--symmetric-tokens",
       [](CommandLine& c, const std::string& flag, const std::string& value) {
         c.symmetric_tokens =
             parse_integer(flag, value, 0, std::numeric_limits<int32_t>::max(), "a non-negative integer");
       }},
      {"--expert-capacity",
       [](CommandLine& c, const std::string& flag, const std::string& value) {
         c.expert_capacity = value == "auto"
                                 ? kAutoExpertCapacity
                                 : parse_integer(flag, value, 0, std::numeric_limits<int32_t>::max(),
                                                 "auto or a non-negative number of rows");
       }},
      {"--hidden", positive(&CommandLine::hidden)},
      {"--topk", positive(&CommandLine::topk)},
      {"--experts", positive(&CommandLine::experts)},
      {"--dtype", choice(&CommandLine::dtype, {"bf16", "fp8"})},
      {"--iters", positive(&CommandLine::iters)},
      {"--warmup", non_negative(&CommandLine::warmup)},
      {"--seed", [](CommandLine& c, const std::string& flag,
                    const std::string& value) { c.seed = parse_seed(flag, value); }},
      {"--json", path(&CommandLine::json_path, "a file name")},
      {"--dump", path(&CommandLine::dump_dir, "a directory")},
      {"--channels",
       [](CommandLine& c, const std::string& flag, const std::string& value) {
         c.channels =
             value == "auto" ? kAutoChannels : parse_int(flag, value, 1, "a positive integer or auto");
       }},
      {"--ring-slots", positive(&CommandLine::ring_slots)},
      {"--symmetric-combine", choice(&CommandLine::symmetric_combine, {"auto", "push", "pull"})},
      {"--symmetric-dispatch", choice(&CommandLine::symmetric_dispatch, {"auto", "publish", "zero_copy"})},
      {"--symmetric-heap", choice(&CommandLine::symmetric_heap, {"on", "off"})},
      {"--normal-heap", choice(&CommandLine::normal_heap, {"on", "staged", "off"})},
      {"--chunk-tokens", positive(&CommandLine::chunk_tokens)},
      {"--timeout", [](CommandLine& c, const std::string& flag,
                       const std::string& value) { c.timeout_seconds = parse_seconds(flag, value); }},
      {"--start", choice(&CommandLine::start, {"auto", "barrier", "timer"})},
      {"--start-ahead-us",
       [](CommandLine& c, const std::string& flag, const std::string& value) {
         c.start_ahead_us = parse_start_ahead(flag, value);
       }},
      {"--cache-flush", choice(&CommandLine::cache_flush, {"on", "off"})},
  };
  return flags;
}

// Every flag of --help: its group, its value, and what it does (CLI11 prints them in this order).
struct FlagHelp {
  const char* group;
  const char* flag;
  const char* value;
  const char* description;
};

const FlagHelp kFlags[] = {
    {"Backend and engines", "--backend", "auto|cpu|cuda",
     "auto: cuda when a CUDA device is available, else cpu (default auto)"},
    {"Backend and engines", "--engine", "normal|low_latency|symmetric|nccl|all",
     "all: every engine; those that cannot run with these options are\n"
     "reported as skipped, with the reason (default all). Naming one\n"
     "that cannot run exits 2 with the reason\n"
     "nccl: the baseline without an EP library (what the Megatron and\n"
     "vLLM all-to-all dispatchers do): sort (token, destination rank)\n"
     "pairs by destination, exchange counts, grouped ncclSend/ncclRecv of\n"
     "the rows (and top-k ids and weights), the same synthetic expert, the\n"
     "results back the same way, reduced on the source. Same inputs,\n"
     "reference and checks as normal. Needs --backend cuda, a build with\n"
     "NCCL, and one GPU per rank (NCCL refuses two ranks on one GPU):\n"
     "otherwise skipped with the reason, or exit 2 when named"},
    {"Shape (default: deepseek-v3 on cuda, laptop on cpu)", "--shape", "laptop|deepseek-v3",
     "the defaults of the flags below. deepseek-v3: 8 ranks, hidden 7168,\n"
     "top-8 of 256 experts, 4096 tokens (128 for low_latency and\n"
     "symmetric). laptop: 4 ranks, hidden 2048, top-8 of 64 experts, 256\n"
     "tokens (64): a few seconds and under 1 GB on the cpu backend"},
    {"Shape (default: deepseek-v3 on cuda, laptop on cpu)", "--ranks", "R", "ranks (default: the shape's)"},
    {"Shape (default: deepseek-v3 on cuda, laptop on cpu)", "--ranks-as", "threads|processes",
     "threads: threads of this process, one Buffer each. processes: one\n"
     "forked process per rank (HeapSharing::processes), as users deploy;\n"
     "the same checks and JSON. On one GPU, run processes under MPS\n"
     "(nvidia-cuda-mps-control -d), or their kernels time-slice.\n"
     "(default: processes when every rank has a GPU of its own, else\n"
     "threads; --dump needs threads)"},
    {"Shape (default: deepseek-v3 on cuda, laptop on cpu)", "--devices", "auto|N",
     "cuda: the GPUs the ranks use; the header names every rank's GPU.\n"
     "auto: rank r on GPU r when this process sees at least R GPUs, else\n"
     "every rank on GPU 0 (threads sharing it). N: rank r on GPU r % N;\n"
     "N above the visible GPUs or above R exits 2 (default auto; cpu:\n"
     "auto only)"},
    {"Shape (default: deepseek-v3 on cuda, laptop on cpu)", "--ranks-per-node", "P",
     "ranks per node; P < R runs the internode path (default R)"},
    {"Shape (default: deepseek-v3 on cuda, laptop on cpu)", "--tokens", "N",
     "tokens per rank, 0 included (default: the shape's)"},
    {"Shape (default: deepseek-v3 on cuda, laptop on cpu)", "--ll-tokens", "N",
     "tokens per rank of the low_latency and symmetric engines, their\n"
     "max_tokens_per_rank (default: --tokens with an explicit --tokens and\n"
     "--engine low_latency or symmetric; else min(--tokens, the shape's\n"
     "decode batch: 128 for deepseek-v3, 64 for laptop). The output says\n"
     "which applied."},
    {"Shape (default: deepseek-v3 on cuda, laptop on cpu)", "--symmetric-tokens", "N",
     "tokens per rank of the symmetric engine, its max_tokens_per_rank\n"
     "(default: the low_latency engine's, see --ll-tokens). With\n"
     "--expert-capacity it can run the prefill shape: e.g. --tokens 4096\n"
     "--symmetric-tokens 4096 --expert-capacity auto runs normal and\n"
     "symmetric at 4096 while low_latency stays at 128 (its heap holds\n"
     "L x R x max rows per rank). Needs --engine symmetric or all"},
    {"Shape (default: deepseek-v3 on cuda, laptop on cpu)", "--expert-capacity", "auto|N",
     "the symmetric dispatch's expert_capacity: rows per local expert of\n"
     "recv_x [L, C, H] (and its scales, src_info). 0 (default): R x max,\n"
     "every row that could arrive. auto: the most rows any local expert\n"
     "receives in the generated inputs (one input set), rounded up to a\n"
     "multiple of 16; the header prints it. N: at most R x symmetric\n"
     "tokens (an expert past it makes the run fail with CapacityError).\n"
     "Needs --engine symmetric or all"},
    {"Shape (default: deepseek-v3 on cuda, laptop on cpu)", "--hidden", "H",
     "hidden size (default: the shape's)"},
    {"Shape (default: deepseek-v3 on cuda, laptop on cpu)", "--topk", "K",
     "experts per token (default: the shape's)"},
    {"Shape (default: deepseek-v3 on cuda, laptop on cpu)", "--experts", "E",
     "experts in total, a multiple of R (default: the shape's)"},
    {"Shape (default: deepseek-v3 on cuda, laptop on cpu)", "--dtype", "bf16|fp8",
     "dispatch payload; fp8 carries f32 scales per 128 channels (default bf16).\n"
     "low_latency: its inputs are always bf16, and fp8 means use_fp8 (the\n"
     "engine casts on the fly, per 128 channels, f32 scales)"},
    {"Shape (default: deepseek-v3 on cuda, laptop on cpu)", "--seed", "S",
     "seed of the synthetic inputs (default 1)"},
    {"Timing", "--iters", "I",
     "timed iterations (default 20 on cuda, 10 on cpu); also of the hook\n"
     "split and of the graph replays (low_latency, symmetric)"},
    {"Timing", "--warmup", "W", "untimed iterations before them (default 3 on cuda, 2 on cpu)"},
    {"Timing", "--start", "auto|barrier|timer",
     "where each phase's start event lands. barrier: as each rank leaves\n"
     "the host barrier. timer (cuda, every rank on one GPU): every rank's\n"
     "stream waits for one moment on the GPU's clock, --start-ahead-us\n"
     "after rank 0 read it, so that no rank's time holds the barrier's\n"
     "exit skew or the host's enqueue of the call. auto (default): timer\n"
     "where every rank is on one GPU, else barrier"},
    {"Timing", "--start-ahead-us", "X",
     "--start timer: how far ahead the moment lies, in microseconds\n"
     "(above 0, at most 1000000; default 1000); a phase that began after\n"
     "it had passed is counted, and the output warns"},
    {"Timing", "--cache-flush", "on|off",
     "on (default): the caches are evicted before every timed phase (see\n"
     "'cache' below); off: not, so a call finds warm what the previous\n"
     "one left (its code, the peers' words), for comparison only"},
    {"Engine configuration (normal)", "--channels", "C|auto", "channels (default auto: the backend picks)"},
    {"Engine configuration (normal)", "--ring-slots", "S", "token slots per ring (default 128)"},
    {"Engine configuration (normal)", "--chunk-tokens", "T",
     "tokens per head/tail publication, at most S (default 16)"},
    {"Engine configuration (normal)", "--timeout", "SECONDS",
     "bound on every wait (default 30); nccl: on the host's waits for its\n"
     "stream, after which it aborts its communicator"},
    {"Engine configuration (symmetric)", "--symmetric-combine", "auto|push|pull",
     "the combine path (Config::symmetric_combine). push: rows into the\n"
     "homes' combine buffers, a barrier, a local reduction (3 passes per\n"
     "row); pull: each home reads the experts' y in place (1 pass; ranks\n"
     "as threads on one GPU only, else the engine is skipped with the\n"
     "reason). auto (default): pull where it works. The header of the\n"
     "results says which ran, and the design bytes follow it"},
    {"Engine configuration (symmetric)", "--symmetric-dispatch", "auto|publish|zero_copy",
     "the dispatch source (Config::symmetric_dispatch). publish: each\n"
     "source copies its rows into its heap, receivers pull from there (2\n"
     "passes per source token + 2 per row); zero_copy: receivers pull\n"
     "straight from the callers' x (2 per row; bf16 only, fp8 always\n"
     "publishes; ranks as threads on one GPU only, else skipped with the\n"
     "reason). auto (default): zero_copy where it works, and on CUDA the\n"
     "push where every receiver's outputs are reachable (each source\n"
     "reads a token once and writes it to its receivers;\n"
     "SWITCHYARD_SYMMETRIC_PULL=tma|warps turns it off). Reported and\n"
     "counted like the combine path"},
    {"Engine configuration (symmetric)", "--symmetric-heap", "on|off",
     "on: x, recv_x and the expert outputs live in the engine's\n"
     "heap-resident tensors (Buffer::symmetric_input, symmetric_receive,\n"
     "symmetric_expert_output), which every peer reads or writes in\n"
     "place, also as processes: dispatches push on CUDA (bf16 pulls\n"
     "zero_copy where the push is off), and --symmetric-combine pull\n"
     "works there. Reported as the dispatch source and combine path\n"
     "that ran. Default off"},
    {"Engine configuration (normal)", "--normal-heap", "on|staged|off",
     "on: x and the expert outputs live in the engine's heap-resident\n"
     "inputs (Buffer::normal_input, normal_combine_input), copied there\n"
     "untimed before each call as the layer before would write them; the\n"
     "receivers and home ranks read the rows in place\n"
     "(docs/normal-in-place.md). staged: the Buffer has those inputs but\n"
     "the calls pass their ordinary tensors, which the Buffer copies into\n"
     "them inside the timed call (staged inputs). One node only. Default off"},
    {"Output", "--json", "FILE", "write the results as JSON"},
    {"Output", "--dump", "DIR",
     "write every input and output of the check iteration as .npy files,\n"
     "DIR/<engine>/rank<r>/<name>.npy (the expected outputs under\n"
     "DIR/reference/), and DIR/meta.json naming each file's dtype"},
};

constexpr const char* kDescription =
    "Runs layout -> dispatch -> synthetic expert -> combine for R ranks (threads or processes, one\n"
    "Buffer each), checks every iteration's outputs bitwise against the reference, and times each\n"
    "engine against the minimal bound. Results go to stdout, ending with a table and the verdict line;\n"
    "a progress bar goes to stderr when it is a terminal.";

// What the numbers mean, after the flags.
constexpr const char* kFooter = R"(What is reported, per engine
  time      per timed iteration, the slowest rank's time, per phase; reported as the median
            and the p99 (nearest rank: the ceil(0.99 * n)-th smallest, so the largest when
            there are fewer than 100 iterations) over the iterations, in microseconds. Every
            rank starts each phase together: its stream drained, a host barrier (before a
            timed phase, then the cache evicted and a second barrier); then CUDA events on its
            stream (the wall clock on cpu) recorded back to back around the call. JSON:
            dispatch_host_us, combine_host_us: the host's wall time of the calls (null for
            normal's and nccl's dispatch under --start timer: it waits for the counts behind
            the hold).
            The start (--start): barrier, each rank records its start event as it leaves the
            barrier, so an early rank's time of a collective call includes waiting for the
            last one to leave it (tens to hundreds of us as processes), and a small call's
            includes the host's enqueue; timer (cuda, every rank on one GPU; auto's choice
            there), rank 0 reads the GPU's clock (%globaltimer, one clock for every process
            on that GPU) and adds --start-ahead-us; every rank's stream waits for that moment,
            and the time runs on the GPU's clock from the wait's release to a mark the GPU
            writes after the call, so every rank's time starts at one instant on the GPU with
            no event in it (SWITCHYARD_BENCH_START_EVENT=before_hold: a start event before
            the wait, its span taken off, which also counts the wait's launch gap; after_hold:
            the event between the wait and the call, which delays each process's release;
            both to compare). A timed phase whose wait had let its stream go before
            the rank began the call is counted (the moment came before the rank got there, and
            its time holds its lateness), and the engine's lines warn. JSON: start,
            start_ahead_us and start_event (null with barrier), and per
            engine start_holds, start_holds_missed (timed phases, all ranks)
  ns/token  the phase's median / the tokens per rank: it compares rank-major and expert-major
            engines, whose rows count different things, fairly (none at 0 tokens)
  cache     before every timed phase a scratch buffer of twice the cache is written, so that
            nothing from the previous iteration (inputs, outputs, poison) is cached: cuda, 2 x
            the L2 of each GPU (cudaDevAttrL2CacheSize), by the first rank on it; cpu, 2 x the
            last-level cache, at most 64 MiB, by rank 0. On cuda the normal engine's inputs also
            rotate over copies whose total exceeds twice the L2 (JSON: cache_flush_bytes,
            input_sets). --cache-flush off writes none (cache_flush_bytes 0)
  bytes     rows delivered x row payload. The rows: normal and nccl, every (token, destination
            rank) pair; low_latency, every (token, expert) pair with a valid top-k slot (each is
            its own row on its expert). Row payload: dispatch, hidden * element size, plus
            hidden / 128 * 4 scale bytes for fp8; combine, hidden * 2 (bf16). Summed over
            all ranks ('all ranks' in the output)
  across nodes  normal with --ranks-per-node < --ranks: the bytes by link, per iteration, all
            ranks, counted exactly on the host from every rank's topk_idx (a destination rank of
            a token holds at least one of its experts; a destination node holds a destination rank):
              dispatch RDMA bytes   = sum over tokens of (destination nodes other than the
                                      token's own) x dispatch row payload: a token crosses the
                                      network once per destination node
              dispatch NVLink bytes = sum over tokens of (destination ranks, on every node, the
                                      local one included) x dispatch row payload: the intranode
                                      delivery into each GPU's ring (equals dispatch bytes)
              combine RDMA bytes    = one bf16 partial row (hidden * 2) per (token, destination
                                      node other than its own)
              combine NVLink bytes  = one bf16 row per (token, destination rank)
              direct RDMA bytes     = sum over tokens of (destination ranks on other nodes) x row
                                      payload: each token sent to each GPU directly across nodes
            and the saving: direct - hierarchical RDMA bytes, and direct / hierarchical; own
            node bytes = (token, own node) pairs x row payload, which go through the RDMA path
            as a put to the rank itself (design bytes, not network bytes). JSON:
            rdma_/nvlink_/direct_rdma_/own_node_ dispatch_/combine_bytes and
            rdma_*_saved_bytes (null on one node)
            low_latency with --ranks-per-node < --ranks: no hierarchy, each (token, expert) row
            goes to its expert's rank, by transport puts to other nodes and stores within the
            node (as the CUDA kernels send them):
              dispatch RDMA bytes   = rows to other nodes x message (row, scales and 16-byte
                                      source fields, each 16-byte aligned) + RDMA signals x 8
              dispatch NVLink bytes = rows within the node x message + count signals x 8
              combine RDMA / NVLink bytes = the same with bf16 rows (hidden * 2)
              RDMA signals          = per phase, one count add per (expert, source rank) on
                                      different nodes, + on cuda one rows-landed add per RDMA
                                      row (its put's signal; the cpu engine sends none)
            JSON: rdma_/nvlink_ dispatch_/combine_bytes, rdma_dispatch_signals,
            rdma_combine_signals (null on one node and for symmetric, which runs on one node)
  graph replay  low_latency and symmetric on cuda: rows 'dispatch (graph)' and 'combine
            (graph)', the launch-free latency. After the timed iterations each rank captures
            its dispatch call into one CUDA graph and its combine call into another, on its own
            stream (relaxed capture mode: it never restricts the other rank threads, and the
            engines' dispatch allocates its handle with a plain cudaMalloc while capturing,
            which thread-local mode refuses), with every rank's stream idle; the outputs are
            preallocated and the inputs never move. Then --warmup and --iters replays, timed
            like the plain calls (host barrier and cache eviction before each phase, events
            around the replay), each into poisoned outputs and checked bit for bit against the
            reference (a difference fails the engine). A capture that fails on any rank skips the rows
            on all, with the reason ('graph replay: skipped: ...'). Not on cpu (no rows).
            JSON: graph_replay ("measured" or why not), graph_replay_dispatch_us,
            graph_replay_combine_us and their _p99_us, graph_replay_minimal_fraction,
            graph_replay_design_fraction
  launch    plain call time - graph replay time (medians), per phase: what launching the
            kernels and the host's work in the call add (dispatch_launch_us, combine_launch_us)
  hook split  low_latency: rows 'dispatch send', 'dispatch recv', 'combine send', 'combine
            recv' (both backends). The same calls with return_recv_hook: the send half is the
            call (it returns the hook; combine's includes the copy of topk_idx and weights the
            hook keeps), the receive half is the hook. Each half is timed as its own phase:
            every rank drains its stream and all meet at a host barrier before it, so every
            send half has finished before any receive half starts, and the receive half
            measures the receive work, not waiting for slow peers' sends (send + recv may
            exceed the plain call, which overlaps them). Each iteration into poisoned outputs,
            checked bit for bit. symmetric has no split (one stage each way):
            'hook split: not supported ...'. JSON: hook_split, dispatch_send_us,
            dispatch_recv_us, combine_send_us, combine_recv_us and their _p99_us
  GB/s/rank DeepEP's convention: one rank's received rows x row payload / that rank's own
            median time, the mean over the ranks (JSON: dispatch_gbps_per_rank and each rank's
            in dispatch_gbps_by_rank, the same for combine). 'all ranks' GB/s = all ranks'
            bytes / the slowest rank's median (dispatch_gbps_all_ranks, combine_gbps_all_ranks)
  minimal   the minimal bound, a true lower bound of each phase: every input byte read once
            and every output byte written once, in each device's memory, in the engine's own
            output layout, and the rows between GPUs moved across a link once:
              dispatch memory bytes = routed tokens x x row + rows x dispatch row
              combine memory bytes  = rows x combine row + tokens x combine row
              phase bound = max(memory bytes / local copy bandwidth,
                                remote bytes / peer copy bandwidth)
            routed tokens: source tokens with at least one valid top-k slot; tokens: all
            source tokens of all ranks; rows as under bytes; remote bytes: rows whose source and
            destination ranks sit on different GPUs x row payload. The bandwidths are measured
            at the start of the same run:
              local copy bandwidth = bytes read + written per second of a device-to-device
                                     copy, each GPU used measured alone, summed over them; on
                                     cpu the faster memcpy of one from memory and one within
                                     the cache, with min(R, cores) threads
              peer copy bandwidth  = bytes per second of cudaMemcpyPeerAsync from every GPU
                                     used to every other at once (only with several GPUs)
            minimal fraction = bound / median per phase (the table's minimal column), and
              (dispatch bound + combine bound) / (dispatch time + combine time)
            for both phases. A time below its bound (a fraction above 1) means the bound is
            wrong: the engine fails with 'minimal bound: ...' and the run exits 1. JSON:
            minimal_dispatch_bytes, minimal_combine_bytes, dispatch_minimal_us,
            dispatch_minimal_fraction (the same for combine), minimal_fraction
  design    the design roofline: the bytes each engine's design must move through memory per
            phase, all ranks (rows and row payloads as under bytes; tokens = source tokens of
            all ranks; x row = what the sender reads: the --dtype row for normal, bf16 for
            low_latency and symmetric, which cast to fp8 on the fly):
              normal dispatch      4 per row: the sender reads x and writes the ring, the
                                   receiver reads the ring and writes recv_x
                                   = rows * (x row + 3 * dispatch row)
              normal combine       3 per row: the sender reads y and writes the ring, the
                                   receiver reads the ring; + the output write
                                   = 3 * rows * combine row + tokens * hidden * 2
              low_latency dispatch 4 per row: the sender reads x and writes the receive slot,
                                   the receiver reads the slot and writes recv_x (as normal)
              low_latency combine  3 per row + the output (as normal)
            across nodes (--ranks-per-node < --ranks; staged = (token, destination node)
            pairs, the token's own node included: the hierarchy sends those through the RDMA
            path too, as a put to itself; RDMA rows = low_latency rows to other nodes):
              normal dispatch      4 per (token, node): the RDMA sender reads x and writes the
                                   send buffer, the put reads it and writes the peer's receive
                                   ring; + 4 per row: the forwarder reads the receive ring and
                                   writes each wanted rank's NVLink ring, the NVLink receiver
                                   reads it and writes recv_x
                                   = staged * (x row + 3 * dispatch row) + 4 * rows * dispatch row
              normal combine       3 per row: the NVLink sender reads y and writes the
                                   forwarder's ring, the forwarder's reduction reads it; + 4 per
                                   (token, node): the reduction writes one bf16 partial, the put
                                   reads and writes it, the RDMA receiver reads it; + the output
                                   = 3 * rows * combine row + 4 * staged * combine row
                                     + tokens * hidden * 2
              low_latency dispatch one node's + the put's read of the send area per RDMA row +
                                   the staging write of each token leaving the node
                                   = rows * (x row + 3 * dispatch row)
                                     + (RDMA rows + leaving tokens) * dispatch row
              low_latency combine  one node's + per RDMA row the copy of y into the combine
                                   buffer (the bench calls it without zero_copy) the put reads
                                   = one node's + 2 * RDMA rows * combine row
              symmetric            not counted (one node only)
              symmetric dispatch   publish, 2 per source token (read x, write the input
                                   buffer) + pull, 2 per row (read the source's input buffer,
                                   write recv_x)
                                   = tokens * (x row + dispatch row) + 2 * rows * dispatch row
              symmetric combine    by the path that ran (the 'combine path:' line):
                                   push, 2 per row (read y, write the home's combine buffer)
                                   + reduce, 1 per row + the output
                                   = 3 * rows * combine row + tokens * hidden * 2
                                   pull, 1 per row (the home reads y in place) + the output
                                   = rows * combine row + tokens * hidden * 2
              nccl                 not counted: NCCL's send/recv stages rows through its own
                                   buffers by a protocol it picks at run time
            Row payloads only: ring and slot metadata (ids, weights, source fields, signals)
            are left out.
            design phase bound = max(design bytes / local copy bandwidth, remote_bytes / peer
            copy bandwidth): every pass reads or writes some device's memory. On one GPU
            (every rank on it, as in "2 nodes x 4 ranks" over loopback) that is design bytes /
            copy bandwidth, RDMA and NVLink bytes alike: loopback puts are copies through the
            same HBM. With ranks on several GPUs (--devices) remote_bytes stay the
            (token, destination rank) rows between GPUs, also across nodes. design fraction =
              (dispatch design bound + combine design bound) / (dispatch_time + combine_time)
            and the table's design column per phase. JSON: design_dispatch_bytes,
            design_combine_bytes, dispatch_design_roofline_us, combine_design_roofline_us,
            dispatch_design_fraction, combine_design_fraction, design_fraction, design_note
            (why not counted, else null)
  check     every iteration, the untimed check iteration of each input set, warmup, timed,
            hook split and graph replay alike, writes into outputs poisoned just before it and
            is compared bit for bit with the reference just after it, on every rank, both
            outside the timed window: a call that wrote nothing fails the engine, naming the
            rank and the iteration (JSON: checked_iterations).
            low_latency: recv_x, recv_x_scales and src_info in the rows < recv_count of each
            expert (the rest is unspecified), recv_count, layout_range and combined_x.
            nccl: the rows sent to each rank (num_tokens_per_rank), num_recv_tokens, recv_x,
            recv_x_scales, recv_topk_idx, recv_topk_weights (received in source rank order,
            then token order: the reference's order), num_recv_tokens_per_expert, combined_x
            and combined_topk_weights
  phases    nccl, like normal: routing (its layout: each token's row per destination, from
            topk_idx alone) runs before the timed dispatch, as get_dispatch_layout does for
            normal; dispatch = packing the rows, the count exchange and the host's wait for
            it, the rows' exchange, local expert ids; combine = the results' exchange and the
            reduction into combined_x
  vs nccl   after the engines, each engine that ran with nccl's tokens per rank: nccl's time /
            its time, per phase and for both (the issue's target: 2x at 4096 tokens)

The last line of stdout is the verdict: 'verdict: pass: ...' when every engine that ran passed
every check, else 'verdict: FAIL: ...' naming each engine that failed and its first failure.
Exit status: 0 when every engine that ran passed its checks; 1 when a check failed, a time fell
below its minimal bound, or the library failed at run time (e.g. a timeout); 2 for a bad
argument or a configuration the library refuses.)";

// NOTES: the flags' column, wide enough for "--expert-capacity auto|N".
constexpr int kHelpColumn = 28;

// The parser of the command line into `command_line`: every flag of kFlags, each value checked and
// stored by its setter (which throws UsageError naming the flag).
std::unique_ptr<CLI::App> make_app(CommandLine& command_line) {
  auto app = std::make_unique<CLI::App>(kDescription, "switchyard-bench");
  app->get_formatter()->column_width(kHelpColumn);
  app->footer(kFooter);
  for (const FlagHelp& help : kFlags) {
    const std::string flag = help.flag;
    const Setter& setter = value_flags().at(flag);
    app->add_option_function<std::string>(
           flag,
           [&command_line, flag, &setter](const std::string& value) { setter(command_line, flag, value); },
           help.description)
        ->type_name(help.value)
        ->group(help.group)
        ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  }
  // Last, so that it is listed last, under Output.
  app->set_help_flag("-h,--help", "this text")->group("Output");
  return app;
}

// --start: the GPU's clock where every rank's stream reads the same one (cuda, one GPU), else the
// barrier. An explicit timer elsewhere is refused: across GPUs the clocks differ, and cpu has none.
void resolve_start(const CommandLine& command_line, BenchOptions& options) {
  const std::string requested = command_line.start.value_or("auto");
  const bool on_cuda = options.backend == Backend::cuda;
  const int gpus = static_cast<int>(options.devices.distinct_devices().size());
  const bool one_gpu = on_cuda && gpus == 1;
  if (requested == "timer" && !on_cuda) {
    throw UsageError("--start timer: expected --backend cuda (the hold waits on the GPU's clock), got cpu");
  }
  if (requested == "timer" && !one_gpu) {
    throw UsageError("--start timer: expected every rank on one GPU (their clocks differ), got ranks on " +
                     std::to_string(gpus) + " GPUs");
  }
  if (requested == "barrier" && command_line.start_ahead_us) {
    throw UsageError(
        "--start-ahead-us: expected --start timer or auto (it sets the timer's moment), got --start barrier");
  }
  const bool timer = requested == "timer" || (requested == "auto" && one_gpu);
  options.start = timer ? StartMode::timer : StartMode::barrier;
  options.start_ahead_us = command_line.start_ahead_us.value_or(kDefaultStartAheadMicroseconds);
  if (requested != "auto") {
    options.notes.start_source = "--start " + requested;
  } else if (timer) {
    options.notes.start_source = "the default where every rank is on one GPU; --start barrier";
  } else if (!on_cuda) {
    options.notes.start_source = "the default on cpu, which has no GPU clock";
  } else {
    options.notes.start_source =
        "the default with ranks on " + std::to_string(gpus) + " GPUs, whose clocks differ";
  }
}

BenchEngine engine_from_name(const std::string& name) {
  if (name == "low_latency") return BenchEngine::low_latency;
  if (name == "symmetric") return BenchEngine::symmetric;
  if (name == "nccl") return BenchEngine::nccl;
  return BenchEngine::normal;
}

}  // namespace

const char* bench_engine_name(BenchEngine engine) {
  switch (engine) {
    case BenchEngine::normal:
      return "normal";
    case BenchEngine::low_latency:
      return "low_latency";
    case BenchEngine::symmetric:
      return "symmetric";
    case BenchEngine::nccl:
      return "nccl";
  }
  return "?";
}

const char* ranks_as_name(RanksAs ranks_as) {
  return ranks_as == RanksAs::processes ? "processes" : "threads";
}

const char* start_mode_name(StartMode mode) {
  return mode == StartMode::timer ? "timer" : "barrier";
}

bool is_rank_major(BenchEngine engine) {
  return engine == BenchEngine::normal || engine == BenchEngine::nccl;
}

bool BenchOptions::runs(BenchEngine engine) const {
  for (BenchEngine chosen : engines) {
    if (chosen == engine) return true;
  }
  return false;
}

CommandLine parse_command_line(const std::vector<std::string>& args) {
  CommandLine command_line;
  std::unique_ptr<CLI::App> app = make_app(command_line);
  // CLI11 takes the arguments last first.
  std::vector<std::string> reversed(args.rbegin(), args.rend());
  try {
    app->parse(reversed);
  } catch (const CLI::CallForHelp&) {
    command_line.help = true;
  } catch (const CLI::ExtrasError&) {
    const std::vector<std::string> extras = app->remaining();
    const std::string first = extras.empty() ? "" : extras.front();
    if (first.rfind("-", 0) == 0)
      throw UsageError(first.substr(0, first.find('=')) + ": unknown option (see --help)");
    throw UsageError(quoted(first) + ": unexpected argument; options start with -- (see --help)");
  } catch (const CLI::ArgumentMismatch& error) {
    // "--ranks: ..." : every flag takes one value.
    const std::string message = error.what();
    throw UsageError(message.substr(0, message.find(':')) + ": expected a value, got nothing");
  } catch (const CLI::ParseError& error) {
    throw UsageError(error.what());
  }
  return command_line;
}

BenchOptions resolve(const CommandLine& command_line, bool cuda_is_available, int visible_devices) {
  BenchOptions options;

  std::string backend = command_line.backend.value_or("auto");
  options.backend_was_auto = backend == "auto";
  if (backend == "auto") {
    options.backend = cuda_is_available ? Backend::cuda : Backend::cpu;
  } else if (backend == "cuda") {
    if (!cuda_is_available) {
      throw UsageError(
          "--backend: expected a backend this machine has (cpu), got 'cuda' (no CUDA device, or built "
          "without the CUDA backend)");
    }
    options.backend = Backend::cuda;
  } else {
    options.backend = Backend::cpu;
  }
  bool on_cpu = options.backend == Backend::cpu;

  std::string engine = command_line.engine.value_or("all");
  options.engine_was_all = engine == "all";
  if (options.engine_was_all) {
    options.engines = {BenchEngine::normal, BenchEngine::low_latency, BenchEngine::symmetric,
                       BenchEngine::nccl};
  } else {
    options.engines = {engine_from_name(engine)};
  }

  const ShapeDefaults& shape =
      command_line.shape ? (*command_line.shape == kLaptopShape.name ? kLaptopShape : kDeepSeekV3Shape)
                         : (on_cpu ? kLaptopShape : kDeepSeekV3Shape);
  options.notes.shape = shape.name;
  options.notes.shape_source = command_line.shape ? "--shape"
                               : on_cpu           ? "the cpu default"
                                                  : "the cuda default";

  int ranks = command_line.ranks.value_or(shape.ranks);
  int ranks_per_node = command_line.ranks_per_node.value_or(ranks);
  if (ranks_per_node > ranks || ranks % ranks_per_node != 0) {
    throw UsageError("--ranks-per-node: expected a divisor of --ranks " + std::to_string(ranks) + ", got " +
                     std::to_string(ranks_per_node));
  }
  options.topology = Topology{ranks, ranks_per_node};
  options.devices = map_ranks_to_devices(command_line.devices, ranks, options.backend, visible_devices);

  // Processes where every rank has a GPU of its own (how users deploy across GPUs); threads where ranks
  // share a device (the cpu backend, one GPU), which processes could only share under MPS.
  const bool own_gpu_each = options.backend == Backend::cuda && ranks > 1 &&
                            static_cast<int>(options.devices.distinct_devices().size()) == ranks;
  if (command_line.ranks_as) {
    options.ranks_as = *command_line.ranks_as == "processes" ? RanksAs::processes : RanksAs::threads;
    options.notes.ranks_as_source = "--ranks-as";
  } else {
    options.ranks_as = own_gpu_each ? RanksAs::processes : RanksAs::threads;
    options.notes.ranks_as_source = own_gpu_each
                                        ? "the default with one GPU per rank"
                                        : "the default where ranks share a device; --ranks-as processes";
  }
  resolve_start(command_line, options);
  options.cache_flush = command_line.cache_flush.value_or("on") == "on";

  options.tokens_per_rank = command_line.tokens.value_or(shape.tokens);
  // low_latency: --ll-tokens; else --tokens when it was given for low_latency or symmetric alone;
  // else min(--tokens, the shape's decode batch).
  if (command_line.ll_tokens) {
    options.ll_tokens_per_rank = *command_line.ll_tokens;
    options.notes.ll_tokens_source = "--ll-tokens";
  } else if (command_line.tokens && (engine == "low_latency" || engine == "symmetric")) {
    options.ll_tokens_per_rank = *command_line.tokens;
    options.notes.ll_tokens_source = "--tokens";
  } else {
    options.ll_tokens_per_rank = std::min(options.tokens_per_rank, shape.ll_tokens);
    options.notes.ll_tokens_source = "min(--tokens, " + std::to_string(shape.ll_tokens) + "), the " +
                                     shape.name + " decode batch; --ll-tokens N overrides";
  }
  // symmetric: --symmetric-tokens, else the low_latency engine's tokens (one expert-major shape).
  if (command_line.symmetric_tokens) {
    if (!options.runs(BenchEngine::symmetric)) {
      throw UsageError(
          "--symmetric-tokens: expected --engine symmetric or all (it sets the symmetric engine's "
          "tokens per rank), got --engine " +
          engine);
    }
    options.symmetric_tokens_per_rank = *command_line.symmetric_tokens;
    options.notes.symmetric_tokens_source = "--symmetric-tokens";
  } else {
    options.symmetric_tokens_per_rank = options.ll_tokens_per_rank;
    options.notes.symmetric_tokens_source = "as low_latency; --symmetric-tokens N overrides";
  }
  if (command_line.expert_capacity) {
    if (!options.runs(BenchEngine::symmetric)) {
      throw UsageError(
          "--expert-capacity: expected --engine symmetric or all (only the symmetric engine has "
          "per-expert capacities), got --engine " +
          engine);
    }
    const int64_t all_rows = int64_t{ranks} * options.symmetric_tokens_per_rank;
    if (*command_line.expert_capacity > all_rows) {
      throw UsageError("--expert-capacity: expected auto, 0 or at most --ranks x symmetric tokens = " +
                       std::to_string(all_rows) + " rows per expert, got " +
                       std::to_string(*command_line.expert_capacity));
    }
    options.expert_capacity = *command_line.expert_capacity;
  }
  options.hidden = command_line.hidden.value_or(shape.hidden);
  options.topk = command_line.topk.value_or(shape.topk);
  options.num_experts = command_line.experts.value_or(shape.experts);
  if (options.num_experts % ranks != 0) {
    throw UsageError("--experts: expected a multiple of --ranks " + std::to_string(ranks) + ", got " +
                     std::to_string(options.num_experts));
  }
  if (options.topk > options.num_experts) {
    throw UsageError("--topk: expected at most --experts " + std::to_string(options.num_experts) + ", got " +
                     std::to_string(options.topk));
  }

  options.dtype = command_line.dtype.value_or("bf16") == "fp8" ? DType::fp8_e4m3 : DType::bf16;
  if (options.dtype == DType::fp8_e4m3 && options.hidden % kFp8ScaleBlock != 0) {
    throw UsageError("--hidden: expected a multiple of " + std::to_string(kFp8ScaleBlock) +
                     " with --dtype fp8 (one scale per 128 channels), got " + std::to_string(options.hidden));
  }

  options.iters = command_line.iters.value_or(on_cpu ? kCpuDefaultIters : kGpuDefaultIters);
  options.notes.iters_from_cpu_default = on_cpu && !command_line.iters;
  options.warmup = command_line.warmup.value_or(on_cpu ? kCpuDefaultWarmup : kGpuDefaultWarmup);
  options.seed = command_line.seed.value_or(kDefaultSeed);
  options.json_path = command_line.json_path.value_or("");
  options.dump_dir = command_line.dump_dir.value_or("");
  if (!options.dump_dir.empty() && options.ranks_as == RanksAs::processes) {
    throw UsageError("--dump: expected ranks as threads (--ranks-as threads), got --ranks-as processes");
  }

  // Unset: the library's defaults.
  if (command_line.channels) options.config.num_channels = *command_line.channels;
  if (command_line.ring_slots) options.config.ring_slots = *command_line.ring_slots;
  if (command_line.chunk_tokens) options.config.chunk_tokens = *command_line.chunk_tokens;
  if (command_line.timeout_seconds) options.config.timeout_seconds = *command_line.timeout_seconds;
  if (command_line.symmetric_combine) {
    const std::string& path = *command_line.symmetric_combine;
    options.config.symmetric_combine = path == "push"   ? SymmetricCombine::push
                                       : path == "pull" ? SymmetricCombine::pull
                                                        : SymmetricCombine::automatic;
  }
  if (command_line.symmetric_heap) options.symmetric_heap = *command_line.symmetric_heap == "on";
  if (command_line.normal_heap) {
    options.normal_heap = *command_line.normal_heap != "off";
    options.normal_heap_staged = *command_line.normal_heap == "staged";
  }
  if (command_line.symmetric_dispatch) {
    const std::string& path = *command_line.symmetric_dispatch;
    options.config.symmetric_dispatch = path == "publish"     ? SymmetricDispatch::publish
                                        : path == "zero_copy" ? SymmetricDispatch::zero_copy
                                                              : SymmetricDispatch::automatic;
  }
  if (options.config.chunk_tokens > options.config.ring_slots) {
    throw UsageError("--chunk-tokens: expected at most --ring-slots " +
                     std::to_string(options.config.ring_slots) + ", got " +
                     std::to_string(options.config.chunk_tokens));
  }
  return options;
}

std::string help_text() {
  CommandLine unused;
  return make_app(unused)->help();
}

}  // namespace switchyard::bench
