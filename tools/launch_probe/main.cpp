// switchyard-launch-probe: P forked processes on GPU 0 (under MPS, as the bench's and the side by side's
// ranks), each timing the step a fresh `normal` dispatch takes between its notify and its rows kernel: a
// kernel posts a flag into host-mapped memory, the host polls for it and launches the next kernel, whose
// first block notes the clock. Session 35's stamps put ~45 us between the notify's last instruction and
// the rows kernel's first at 8 processes, of which the host's own part (flag seen to launch returned) was
// 12-14 us; this says where the rest goes: the host seeing the flag, or the launch reaching the GPU.
//
// Every process calibrates the offset between %globaltimer and its CLOCK_REALTIME both ways (a kernel
// catching a host write, the host catching a kernel's), which brackets it within the two latencies. Modes,
// every sample started together by a host barrier of all the processes:
//   host-launch        the consumer launched once the host has seen the flag (the dispatch's way), with
//                      the gather's grid (--blocks x --threads, --shared-kib per block);
//   host-launch-small  the same with a one-warp consumer: whether the grid's size or shared memory matters;
//   back-to-back       the consumer launched right behind the producer, before the host looks: the stream
//                      order alone;
//   released           every process's stream held until one moment on the GPU's clock (the bench's and the
//                      side by side's timer start, cuda/timing/gpu_timer.hpp), the consumer queued behind the
//                      hold: how far apart the processes' consumers start once the holds end together
//                      (session 36 saw the ranks' first kernels start ~5 us apart each, up to ~39 us at 8);
//   released-small     the same with the one-warp consumer: a property of launches, or of the grid;
//   released-alloc     released, with a stream-ordered allocation of --alloc-mib (cudaMallocAsync from the
//                      device's default pool, freed after the consumer) between the hold and the consumer, as
//                      an engine's call allocates its tables and outputs; the pool as CUDA leaves it (its
//                      release threshold 0: memory goes back at every synchronisation);
//   released-kept      the same with the default pool's release threshold raised to keep its memory (as the
//                      CUDA backend sets it);
//   released-event     released, with a timing event recorded between the hold and the consumer, as the
//                      bench and the side by side record each phase's start event;
//   released-untimed   the same with an event made with cudaEventDisableTiming;
//   released-params    released, the consumer taking kBigParamBytes of parameters by value;
//   released-l1        released, after a kernel on every SM that prefers L1 (carveout 0) before the hold: the
//                      consumer's SMs must change their L1/shared split back first (as the symmetric
//                      dispatch's after the pull combine and the bench's kernels);
//   released-shared    the same with that kernel preferring the most shared memory (carveout 100);
//   released-resident  released, the consumer's blocks staying on their SMs --resident-us after their start,
//                      as the engines' kernels do (session 42: their first blocks start ~2.8 us a process
//                      apart, the short consumers here ~0.6);
//   released-heavy     the same, each thread also keeping ~100 registers live (the engines' register use);
//   released-outputs   released-kept with --outputs small stream-ordered allocations instead of one large one
//                      (a symmetric dispatch allocates its tables, recv_count, layout_range and src_info per
//                      call: 4), each freed after the consumer as the previous call's outputs are;
//   released-marks     released, timed as the bench's --start timer times a phase (cuda::HoldMarks): the hold
//                      writes its first and last clock readings to host-mapped words, and a mark kernel
//                      queued behind the consumer writes the clock there too;
//   released-busy      released-resident whose consumer streams through --busy-mib of device memory while it
//                      stays, as the engines' kernels move rows from their first microseconds (session 43:
//                      whether the running ranks' memory traffic is what spaces the later ranks' starts).
//   released-big-code  released-resident whose consumer carries ~256 KB of code it does not run (the
//   symmetric
//                      dispatch's size; the probe's other consumers are a few hundred bytes): whether a
//                      kernel's size spaces the launches (session 47);
//   released-big-run   the same, every thread running that code once at its start: whether the cold
//                      instruction stream of the grids already started delays the later processes' launches;
//   released-bench     a phase as switchyard-bench's --start timer times it: a timing event before the hold,
//   the
//                      hold's marks, the heavy resident consumer, the end mark, a timing event after it;
//   released-bench-outputs  released-bench with --outputs stream-ordered allocations between the hold and the
//                      consumer, freed after it (an engine call's tables and outputs, as released-outputs).
#include <time.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "cuda/timing/gpu_timer.hpp"
#include "device/mapped_host_words.hpp"
#include "forked_ranks.hpp"
#include "probe_kernels.hpp"
#include "rank_run.hpp"
#include "switchyard/buffer.hpp"
#include "switchyard/group.hpp"

namespace switchyard::launch_probe {
namespace {

struct Options {
  std::vector<int> procs{1, 8};
  int iters = 200;
  int warmup = 20;
  int blocks = 16;
  int threads = 512;
  int shared_kib = 192;
  double spin_us = 30;
  int alloc_mib = 64;
  double resident_us = 100;
  int outputs = 4;
  int busy_mib = 256;
  // Device memory each process allocates and writes before the modes (an engine's heap), GiB.
  int footprint_gib = 0;
  // Each process holds a connected switchyard Buffer of the decode call's shape.
  bool with_buffer = false;
};

enum Mode {
  kHostLaunch,
  kHostLaunchSmall,
  kBackToBack,
  kReleased,
  kReleasedSmall,
  kReleasedAlloc,
  kReleasedKept,
  kReleasedEvent,
  kReleasedUntimed,
  kReleasedParams,
  kReleasedL1,
  kReleasedShared,
  kReleasedResident,
  kReleasedHeavy,
  kReleasedOutputs,
  kReleasedMarks,
  kReleasedBusy,
  kReleasedBigCode,
  kReleasedBigRun,
  kReleasedBench,
  kReleasedBenchOutputs,
  kModes
};
constexpr const char* kModeNames[] = {
    "host-launch",           "host-launch-small", "back-to-back",      "released",         "released-small",
    "released-alloc",        "released-kept",     "released-event",    "released-untimed", "released-params",
    "released-l1",           "released-shared",   "released-resident", "released-heavy",   "released-outputs",
    "released-marks",        "released-busy",     "released-big-code", "released-big-run", "released-bench",
    "released-bench-outputs"};
static_assert(sizeof(kModeNames) / sizeof(kModeNames[0]) == kModes, "a name for every mode");
constexpr int kFirstReleased = kReleased;
constexpr int kReleasedModes = kModes - kFirstReleased;
// How far ahead of rank 0's reading the holds end: room for every process to enqueue its hold and consumer.
constexpr uint64_t kReleaseAheadNs = 500'000;

// One process's medians for one mode, us.
struct ModeFigures {
  double gap = 0;            // consumer's first instruction - producer's flag (device clock)
  double host_sees = 0;      // host sees the flag - producer raised it (offset-corrected)
  double host_part = 0;      // launch returned - flag seen (host clock)
  double start_latency = 0;  // consumer's first instruction - launch returned (offset-corrected)
};

struct ProcessFigures {
  double offset_width_us = 0;  // how well the clock offset is known
  ModeFigures modes[kModes];
  // Per released mode and sample: the consumer's first instruction - the moment the holds ended, us.
  std::vector<double> released[kReleasedModes];
};

// A process's figures as its answer to the parent (run_forked_ranks hands back bytes): the words in order.
std::string encode(const ProcessFigures& figures) {
  std::string text = std::to_string(figures.offset_width_us);
  for (const ModeFigures& f : figures.modes) {
    for (const double value : {f.gap, f.host_sees, f.host_part, f.start_latency})
      text += " " + std::to_string(value);
  }
  for (const std::vector<double>& samples : figures.released) {
    text += " " + std::to_string(samples.size());
    for (const double value : samples) text += " " + std::to_string(value);
  }
  return text;
}

// A failed process's answer: its message, marked so that it is never read as figures.
constexpr const char* kFailed = "failed: ";

ProcessFigures decode(const std::string& text) {
  std::istringstream in(text);
  ProcessFigures figures;
  in >> figures.offset_width_us;
  for (ModeFigures& f : figures.modes) in >> f.gap >> f.host_sees >> f.host_part >> f.start_latency;
  for (std::vector<double>& samples : figures.released) {
    size_t count = 0;
    in >> count;
    samples.resize(count);
    for (double& value : samples) in >> value;
  }
  if (!in) throw std::runtime_error("an answer that is not figures: '" + text + "'");
  return figures;
}

int64_t realtime_ns() {
  timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  return int64_t{now.tv_sec} * 1000000000 + now.tv_nsec;
}

void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(status));
}

double median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::nth_element(values.begin(), values.begin() + values.size() / 2, values.end());
  return values[values.size() / 2];
}

struct Process {
  cudaStream_t stream{};
  cuda::MappedHostWords<int32_t> flag;
  cuda::MappedHostWords<uint64_t> words;  // [0] producer's end, [1] consumer's start, [2] catch
  int32_t next = 0;

  Process() {
    check(cudaSetDevice(0), "cudaSetDevice");
    check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
    // Here, not at the members: the mapping is made for the device current at allocation.
    flag.allocate(1);
    words.allocate(4);
  }

  // Bounded: a producer that never ran (a failed launch, a fault) ends the probe with a message, not a hang.
  void wait_for_flag(int32_t value, const char* producer) const {
    const int64_t from = realtime_ns();
    while (__atomic_load_n(flag.host(), __ATOMIC_ACQUIRE) != value) {
      if (realtime_ns() - from > 2'000'000'000) {
        const cudaError_t state = cudaStreamQuery(stream);
        throw std::runtime_error(std::string(producer) + ": its flag " + std::to_string(value) +
                                 " never came within 2 s (found " + std::to_string(*flag.host()) +
                                 "; stream: " + cudaGetErrorString(state) + ")");
      }
    }
  }

  // The offset o (device clock = host clock + o) lies in [lower, upper]; returns upper - lower (us) and
  // sets `offset` to the middle.
  double calibrate(double& offset) {
    int64_t upper = INT64_MAX, lower = INT64_MIN;
    volatile uint64_t* w = words.host();
    for (int i = 0; i < 40; ++i) {
      // Host to device: a kernel spins on the flag; the host writes it at a noted time.
      const int32_t value = ++next;
      check(launch_catch(flag.device(), value, words.device() + 2, 5'000'000, stream), "launch catch");
      const int64_t wait_from = realtime_ns();
      while (realtime_ns() - wait_from < 200'000) {
      }
      const int64_t set_at = realtime_ns();
      __atomic_store_n(flag.host(), value, __ATOMIC_RELEASE);
      check(cudaStreamSynchronize(stream), "catch");
      upper = std::min<int64_t>(upper, static_cast<int64_t>(w[2]) - set_at);
      // Device to host: a kernel raises the flag at a noted device time; the host notes when it sees it.
      const int32_t raised = ++next;
      check(launch_signal(Mailbox{words.device(), flag.device()}, raised, 20'000, stream), "launch signal");
      wait_for_flag(raised, "calibration's signal kernel");
      const int64_t seen_at = realtime_ns();
      check(cudaStreamSynchronize(stream), "signal");
      lower = std::max<int64_t>(lower, static_cast<int64_t>(w[0]) - seen_at);
    }
    offset = 0.5 * (static_cast<double>(upper) + static_cast<double>(lower));
    return (static_cast<double>(upper) - static_cast<double>(lower)) / 1000.0;
  }
};

// The released modes: per sample, every process holds its stream until one moment on the GPU's clock (rank
// 0's reading plus kReleaseAheadNs, shared through the group), with the consumer queued behind the hold.
// Returns each sample's consumer start minus that moment, us.
std::vector<double> run_released(const Options& options, Group& group, Process& process, Mode mode) {
  const bool small = mode == kReleasedSmall;
  const bool allocates = mode == kReleasedAlloc || mode == kReleasedKept;
  const bool outputs = mode == kReleasedOutputs || mode == kReleasedBenchOutputs;
  std::unique_ptr<cuda::HoldMarks> marks;
  const bool bench_phase = mode == kReleasedBench || mode == kReleasedBenchOutputs;
  if (mode == kReleasedMarks || bench_phase) marks = std::make_unique<cuda::HoldMarks>();
  // released-bench's phase events, recorded before the hold and after the end mark.
  cudaEvent_t phase_start{}, phase_stop{};
  if (bench_phase) {
    check(cudaEventCreate(&phase_start), "cudaEventCreate");
    check(cudaEventCreate(&phase_stop), "cudaEventCreate");
  }
  cudaEvent_t event{};
  if (mode == kReleasedEvent) check(cudaEventCreate(&event), "cudaEventCreate");
  if (mode == kReleasedUntimed)
    check(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), "cudaEventCreate");
  if (mode == kReleasedKept || outputs) {
    cudaMemPool_t pool{};
    check(cudaDeviceGetDefaultMemPool(&pool, 0), "cudaDeviceGetDefaultMemPool");
    uint64_t keep = UINT64_MAX;
    check(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep), "cudaMemPoolSetAttribute");
  }
  // The busy consumer's buffer: larger than L2, so that its copies reach device memory.
  void* busy_buffer = nullptr;
  const size_t busy_bytes = static_cast<size_t>(options.busy_mib) << 20;
  if (mode == kReleasedBusy) {
    check(cudaMalloc(&busy_buffer, busy_bytes), "cudaMalloc (busy buffer)");
    // Defined bytes to copy (their values do not matter).
    check(cudaMemset(busy_buffer, 0, busy_bytes), "cudaMemset (busy buffer)");
  }
  const size_t shared_bytes = small ? 0 : static_cast<size_t>(options.shared_kib) * 1024;
  const int blocks = small ? 1 : options.blocks;
  const int threads = small ? 32 : options.threads;
  std::vector<double> samples;
  for (int iter = 0; iter < options.warmup + options.iters; ++iter) {
    group.barrier();
    Bytes mine;
    if (group.rank() == 0) {
      const uint64_t moment = cuda::gpu_timer_now_ns() + kReleaseAheadNs;
      mine.resize(sizeof(moment));
      std::memcpy(mine.data(), &moment, sizeof(moment));
    }
    uint64_t moment = 0;
    std::memcpy(&moment, group.allgather(mine).front().data(), sizeof(moment));
    if (mode == kReleasedL1 || mode == kReleasedShared) {
      int sms = 0;
      check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), "cudaDeviceGetAttribute");
      check(launch_filler(sms, mode == kReleasedL1 ? 0 : 100, process.stream), "launch filler");
    }
    if (marks) marks->clear();
    if (phase_start != nullptr) check(cudaEventRecord(phase_start, process.stream), "cudaEventRecord");
    cuda::enqueue_gpu_timer_wait(process.stream, moment, 100 * kReleaseAheadNs,
                                 marks ? marks->device_marks() : nullptr);
    if (event != nullptr) check(cudaEventRecord(event, process.stream), "cudaEventRecord");
    void* scratch = nullptr;
    // The outputs' sizes: 4 KiB, 16 KiB, 64 KiB, ... (a decode call's tables and counts are KiB to a few
    // MiB).
    std::vector<void*> small(outputs ? static_cast<size_t>(options.outputs) : 0, nullptr);
    for (size_t i = 0; i < small.size(); ++i)
      check(cudaMallocAsync(&small[i], size_t{4096} << (2 * (i % 6)), process.stream),
            "cudaMallocAsync (output)");
    if (allocates) {
      check(cudaMallocAsync(&scratch, static_cast<size_t>(options.alloc_mib) << 20, process.stream),
            "cudaMallocAsync");
    }
    uint64_t* start_ns = process.words.device() + 1;
    if (mode == kReleasedBigCode || mode == kReleasedBigRun) {
      check(launch_big_code(start_ns, blocks, threads, shared_bytes,
                            static_cast<uint64_t>(options.resident_us * 1000), mode == kReleasedBigRun,
                            process.stream),
            "launch consumer");
    } else if (mode == kReleasedBusy) {
      check(launch_busy(start_ns, blocks, threads, shared_bytes,
                        static_cast<uint64_t>(options.resident_us * 1000), busy_buffer, busy_bytes,
                        process.stream),
            "launch consumer");
    } else if (mode == kReleasedResident || mode == kReleasedHeavy || bench_phase) {
      check(launch_resident(start_ns, blocks, threads, shared_bytes,
                            static_cast<uint64_t>(options.resident_us * 1000), mode != kReleasedResident,
                            process.stream),
            "launch consumer");
    } else {
      check(mode == kReleasedParams
                ? launch_stamp_big_params(start_ns, blocks, threads, shared_bytes, process.stream)
                : launch_stamp(start_ns, blocks, threads, shared_bytes, process.stream),
            "launch consumer");
    }
    if (allocates) check(cudaFreeAsync(scratch, process.stream), "cudaFreeAsync");
    for (void* output : small) check(cudaFreeAsync(output, process.stream), "cudaFreeAsync (output)");
    if (marks) cuda::enqueue_gpu_timer_mark(process.stream, marks->device_end_mark());
    if (phase_stop != nullptr) check(cudaEventRecord(phase_stop, process.stream), "cudaEventRecord");
    check(cudaStreamSynchronize(process.stream), "released sample");
    if (iter < options.warmup) continue;
    samples.push_back((static_cast<double>(static_cast<volatile uint64_t*>(process.words.host())[1]) -
                       static_cast<double>(moment)) /
                      1000.0);
  }
  if (event != nullptr) cudaEventDestroy(event);
  if (phase_start != nullptr) cudaEventDestroy(phase_start);
  if (phase_stop != nullptr) cudaEventDestroy(phase_stop);
  if (busy_buffer != nullptr) cudaFree(busy_buffer);
  return samples;
}

ProcessFigures run_process(const Options& options, Group& group) {
  const int index = group.rank();
  const int processes = group.size();
  ProcessFigures out;
  Process process;
  // A switchyard Buffer's heap (GiBs a rank) stands in the process's device memory while it launches: whether
  // the mapped footprint delays the launches.
  void* footprint = nullptr;
  if (options.footprint_gib > 0) {
    const size_t bytes = static_cast<size_t>(options.footprint_gib) << 30;
    check(cudaMalloc(&footprint, bytes), "cudaMalloc (--footprint-gib)");
    check(cudaMemset(footprint, 0, bytes), "cudaMemset (--footprint-gib)");
  }
  // --with-buffer: the Buffer switchyard-bench's decode call holds a rank (bench_buffer_options on the
  // bench's defaults, DeepSeek-V3's shape at 128 tokens: symmetric engine, bf16, ranks as processes,
  // --symmetric-heap on), made and connected before the modes and kept through them; nothing is called on it.
  std::unique_ptr<Buffer> buffer;
  if (options.with_buffer) {
    bench::BenchOptions bench_options;
    bench_options.backend = Backend::cuda;
    bench_options.topology = Topology::single_node(processes);
    bench_options.ranks_as = bench::RanksAs::processes;
    bench_options.symmetric_heap = true;
    buffer = std::make_unique<Buffer>(
        bench::bench_buffer_options(bench_options, bench::BenchEngine::symmetric, index,
                                    bench_options.symmetric_tokens_per_rank * processes));
    buffer->connect(group.allgather(buffer->local_handle()));
    check(cudaSetDevice(0), "cudaSetDevice");
  }
  const size_t shared_bytes = static_cast<size_t>(options.shared_kib) * 1024;
  check(allow_stamp_shared(shared_bytes), "cudaFuncSetAttribute (the consumer's shared memory)");
  double offset = 0;
  group.barrier();
  out.offset_width_us = process.calibrate(offset);
  if (index == 0) std::fprintf(stderr, "launch-probe: %d process(es) calibrated\n", processes);
  const uint64_t spin_ns = static_cast<uint64_t>(options.spin_us * 1000);
  volatile uint64_t* w = process.words.host();
  for (int mode = 0; mode < kModes; ++mode) {
    if (mode >= kFirstReleased) {
      out.released[mode - kFirstReleased] = run_released(options, group, process, static_cast<Mode>(mode));
      if (index == 0)
        std::fprintf(stderr, "launch-probe: %d process(es): %s done\n", processes, kModeNames[mode]);
      continue;
    }
    std::vector<double> gap, host_sees, host_part, start_latency;
    for (int iter = 0; iter < options.warmup + options.iters; ++iter) {
      group.barrier();
      const int32_t value = ++process.next;
      check(launch_signal(Mailbox{process.words.device(), process.flag.device()}, value, spin_ns,
                          process.stream),
            "launch signal");
      const bool small = mode == kHostLaunchSmall;
      const int blocks = small ? 1 : options.blocks;
      const int threads = small ? 32 : options.threads;
      const size_t bytes = small ? 0 : shared_bytes;
      int64_t seen_at = 0, launched_at = 0;
      if (mode == kBackToBack) {
        check(launch_stamp(process.words.device() + 1, blocks, threads, bytes, process.stream),
              "launch consumer");
        process.wait_for_flag(value, kModeNames[mode]);
      } else {
        process.wait_for_flag(value, kModeNames[mode]);
        seen_at = realtime_ns();
        const cudaError_t launched =
            launch_stamp(process.words.device() + 1, blocks, threads, bytes, process.stream);
        launched_at = realtime_ns();
        check(launched, "launch consumer");
      }
      check(cudaStreamSynchronize(process.stream), "sample");
      if (iter < options.warmup) continue;
      const double end = static_cast<double>(w[0]), start = static_cast<double>(w[1]);
      gap.push_back((start - end) / 1000.0);
      if (mode != kBackToBack) {
        host_sees.push_back((static_cast<double>(seen_at) + offset - end) / 1000.0);
        host_part.push_back(static_cast<double>(launched_at - seen_at) / 1000.0);
        start_latency.push_back((start - (static_cast<double>(launched_at) + offset)) / 1000.0);
      }
    }
    out.modes[mode] = ModeFigures{median(gap), median(host_sees), median(host_part), median(start_latency)};
    if (index == 0)
      std::fprintf(stderr, "launch-probe: %d process(es): %s done\n", processes, kModeNames[mode]);
  }
  if (footprint != nullptr) cudaFree(footprint);
  return out;
}

void report(const Options& options, const std::vector<ProcessFigures>& figures) {
  const int processes = static_cast<int>(figures.size());
  std::printf(
      "== %d process%s, consumer %d x %d threads, %d KiB shared per block (small: 1 x 32, none); "
      "us, medians of %d per process; offset-corrected figures within +- half the bracket\n",
      processes, processes == 1 ? "" : "es", options.blocks, options.threads, options.shared_kib,
      options.iters);
  double widest = 0;
  for (const ProcessFigures& f : figures) widest = std::max(widest, f.offset_width_us);
  std::printf("clock offset bracket: widest %.1f us over the processes\n", widest);
  std::printf("%-18s %10s %10s %10s %10s   (mean over processes; max gap)\n", "mode", "gap", "host sees",
              "host part", "start lat");
  for (int mode = 0; mode < kFirstReleased; ++mode) {
    ModeFigures mean{};
    double max_gap = 0;
    for (int p = 0; p < processes; ++p) {
      const ModeFigures& f = figures[p].modes[mode];
      mean.gap += f.gap / processes;
      mean.host_sees += f.host_sees / processes;
      mean.host_part += f.host_part / processes;
      mean.start_latency += f.start_latency / processes;
      max_gap = std::max(max_gap, f.gap);
    }
    if (mode == kBackToBack) {
      std::printf("%-18s %10.1f %10s %10s %10s   max %.1f\n", kModeNames[mode], mean.gap, "-", "-", "-",
                  max_gap);
    } else {
      std::printf("%-18s %10.1f %10.1f %10.1f %10.1f   max %.1f\n", kModeNames[mode], mean.gap,
                  mean.host_sees, mean.host_part, mean.start_latency, max_gap);
    }
  }
  // Released: per sample, the processes' consumer starts after the moment, in order; the medians over the
  // samples of the earliest, the second, ... the last.
  for (int mode = kFirstReleased; mode < kModes; ++mode) {
    const size_t samples = figures.front().released[mode - kFirstReleased].size();
    std::vector<std::vector<double>> by_order(processes);
    for (size_t s = 0; s < samples; ++s) {
      std::vector<double> starts;
      for (const ProcessFigures& f : figures) starts.push_back(f.released[mode - kFirstReleased].at(s));
      std::sort(starts.begin(), starts.end());
      for (int k = 0; k < processes; ++k) by_order[k].push_back(starts[k]);
    }
    std::printf("%-18s starts after the moment, earliest to last process (us, medians):", kModeNames[mode]);
    for (int k = 0; k < processes; ++k) std::printf(" %.1f", median(by_order[k]));
    std::printf("\n");
  }
  std::fflush(stdout);
}

// Seconds a process waits for its peers at a barrier before the run fails (a process that died or hangs).
constexpr double kWaitSeconds = 60;

int run(const Options& options) {
  int failures = 0;
  for (int processes : options.procs) {
    if (processes < 1 || processes > 64) throw std::invalid_argument("--procs: expected 1..64 per entry");
    // The bench's forked ranks: the parent never touches CUDA, a process that fails fails its peers'
    // barriers instead of leaving them waiting.
    const std::vector<std::string> answers = bench::run_forked_ranks(
        processes, kWaitSeconds, [&](Group& group) { return encode(run_process(options, group)); },
        [](std::exception_ptr failure) {
          try {
            std::rethrow_exception(failure);
          } catch (const std::exception& error) {
            return std::string(kFailed) + error.what();
          } catch (...) {
            return std::string(kFailed) + "an exception that is not a std::exception";
          }
        });
    std::vector<ProcessFigures> figures;
    bool all_ok = true;
    for (size_t p = 0; p < answers.size(); ++p) {
      if (answers[p].rfind(kFailed, 0) == 0) {
        std::fprintf(stderr, "switchyard-launch-probe: process %zu %s\n", p, answers[p].c_str());
        all_ok = false;
        continue;
      }
      figures.push_back(decode(answers[p]));
    }
    if (all_ok)
      report(options, figures);
    else
      ++failures;
  }
  return failures == 0 ? 0 : 1;
}

}  // namespace
}  // namespace switchyard::launch_probe

int main(int argc, char** argv) {
  switchyard::launch_probe::Options options;
  CLI::App app{
      "switchyard-launch-probe: where the time goes between a kernel's flag and the host's next launch"};
  app.add_option("--procs", options.procs, "process counts to run, one after another")->delimiter(',');
  app.add_option("--iters", options.iters, "samples per mode and process")->check(CLI::PositiveNumber);
  app.add_option("--warmup", options.warmup, "unrecorded samples before them")->check(CLI::NonNegativeNumber);
  app.add_option("--blocks", options.blocks, "the consumer's blocks")->check(CLI::PositiveNumber);
  app.add_option("--threads", options.threads, "the consumer's threads per block")
      ->check(CLI::Range(32, 1024));
  app.add_option("--shared-kib", options.shared_kib, "the consumer's dynamic shared memory per block")
      ->check(CLI::Range(0, 227));
  app.add_option("--spin-us", options.spin_us, "the producer's spin before its flag")
      ->check(CLI::PositiveNumber);
  app.add_option("--alloc-mib", options.alloc_mib, "the released-alloc modes' allocation")
      ->check(CLI::PositiveNumber);
  app.add_option("--outputs", options.outputs, "the released-outputs mode's allocations a sample")
      ->check(CLI::PositiveNumber);
  app.add_option(
         "--footprint-gib", options.footprint_gib,
         "device memory each process allocates and writes before the modes, as an engine's heap (GiB)")
      ->check(CLI::Range(0, 64));
  app.add_flag(
      "--with-buffer", options.with_buffer,
      "each process holds a connected switchyard Buffer of the decode call's shape (symmetric, 128 tokens)");
  app.add_option("--busy-mib", options.busy_mib, "the released-busy mode's buffer a process (MiB)")
      ->check(CLI::Range(2, 4096));
  app.add_option(
         "--resident-us", options.resident_us,
         "how long the released-resident and busy modes' consumer blocks stay (at most 512 threads a block)")
      ->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);
  try {
    return switchyard::launch_probe::run(options);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "switchyard-launch-probe: %s\n", error.what());
    return 2;
  }
}
