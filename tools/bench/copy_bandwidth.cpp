#include "copy_bandwidth.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "stats.hpp"
#include "switchyard/errors.hpp"

namespace switchyard::bench {
namespace {

constexpr size_t kMiB = size_t{1} << 20;
// NOTES: each of source and destination is at least this, and at least the last-level cache, so
// that the copy streams from memory rather than from cache.
constexpr size_t kMinCopyBytes = 256 * kMiB;
// Leave most of the machine to the run itself.
constexpr size_t kMaxMemoryFraction = 4;
constexpr int kRepetitions = 5;

size_t last_level_cache_bytes() {
  long largest = 0;
#if defined(_SC_LEVEL3_CACHE_SIZE)
  largest = std::max(largest, sysconf(_SC_LEVEL3_CACHE_SIZE));
#endif
#if defined(_SC_LEVEL4_CACHE_SIZE)
  largest = std::max(largest, sysconf(_SC_LEVEL4_CACHE_SIZE));
#endif
  return largest > 0 ? static_cast<size_t>(largest) : 0;
}

size_t physical_memory_bytes() {
  long pages = sysconf(_SC_PHYS_PAGES);
  long page_size = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page_size > 0 ? static_cast<size_t>(pages) * static_cast<size_t>(page_size) : 0;
}

// Runs body(thread, begin, end) over [0, bytes) split into `threads` slices; returns the seconds the
// slowest slice took, from a common start.
template <typename Body>
double run_sliced(int threads, size_t bytes, const Body& body) {
  std::vector<std::thread> workers;
  workers.reserve(threads);
  auto start = std::chrono::steady_clock::now();
  for (int t = 0; t < threads; ++t) {
    size_t begin = bytes * t / threads;
    size_t end = bytes * (t + 1) / threads;
    workers.emplace_back([&body, begin, end] { body(begin, end); });
  }
  for (auto& worker : workers) worker.join();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

std::string format_mib(size_t bytes) {
  return std::to_string(bytes / kMiB) + " MiB";
}

}  // namespace

CopyBandwidth measure_cpu_copy_bandwidth(int num_ranks) {
  int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  int threads = std::max(1, std::min(num_ranks, cores));
  size_t bytes = std::max(kMinCopyBytes, last_level_cache_bytes());
  size_t memory = physical_memory_bytes();
  if (memory > 0) bytes = std::min(bytes, memory / kMaxMemoryFraction / 2);
  bytes = std::max(bytes / kMiB, size_t{1}) * kMiB;

  std::unique_ptr<uint8_t[]> source(new uint8_t[bytes]);
  std::unique_ptr<uint8_t[]> destination(new uint8_t[bytes]);
  // First touch from the copying threads, so the pages exist (and sit near them) before timing.
  run_sliced(threads, bytes, [&](size_t begin, size_t end) {
    std::memset(source.get() + begin, 0x5A, end - begin);
    std::memset(destination.get() + begin, 0, end - begin);
  });
  auto copy = [&](size_t begin, size_t end) {
    std::memcpy(destination.get() + begin, source.get() + begin, end - begin);
  };
  run_sliced(threads, bytes, copy);  // warm-up
  std::vector<double> seconds;
  for (int repetition = 0; repetition < kRepetitions; ++repetition)
    seconds.push_back(run_sliced(threads, bytes, copy));

  CopyBandwidth result;
  result.bytes_per_second = 2.0 * static_cast<double>(bytes) / median(seconds);
  result.method = "memcpy, " + std::to_string(threads) + (threads == 1 ? " thread, " : " threads, ") +
                  "2 x " + format_mib(bytes) + ", bytes read + written, median of " +
                  std::to_string(kRepetitions);
  return result;
}

CopyBandwidth measure_copy_bandwidth(Backend backend, int num_ranks) {
  switch (backend) {
    case Backend::cpu:
      return measure_cpu_copy_bandwidth(num_ranks);
    case Backend::cuda:
      // NOTES: the CUDA seam: cudaMemcpy device to device over buffers larger than L2, timed with events.
      throw Unsupported(
          "switchyard-bench: the CUDA copy-bandwidth measurement is not implemented yet "
          "(tools/bench/copy_bandwidth.cpp)");
  }
  throw Unsupported("switchyard-bench: no copy-bandwidth measurement for this backend");
}

}  // namespace switchyard::bench
