#include "copy_bandwidth.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "cache_flush.hpp"
#include "cuda_check.hpp"
#include "stats.hpp"
#include "switchyard/errors.hpp"

namespace switchyard::bench {
namespace {

constexpr size_t kMiB = size_t{1} << 20;
// NOTES: each of source and destination: twice the cache flush's cap (cache_flush.hpp), beyond the
// last-level cache of laptops and most servers, and small enough to keep the run under 1 GB. Where a
// cache is larger, part of the copy comes from it: the bandwidth comes out higher and the minimal
// bound lower, so it stays a lower bound.
constexpr size_t kCpuCopyBytes = 2 * kCpuMaxFlushBytes;
// NOTES: each thread's slice of the cached copy: within the L2 of current cores, where memcpy is
// fastest. The minimal bound on cpu divides by the faster of the two copies, so that it stays a
// lower bound even where a phase's rows never leave the cache.
constexpr size_t kCpuCachedCopyBytesPerThread = size_t{256} << 10;
// Leave most of the machine to the run itself.
constexpr size_t kMaxMemoryFraction = 4;
constexpr int kRepetitions = 5;

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

std::string format_gbps(double bytes_per_second) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f", bytes_per_second / 1e9);
  return text;
}

#if defined(SWITCHYARD_WITH_CUDA)
// Each of source and destination: far beyond the L2 (60 MB on an H200), so the copy streams from HBM.
constexpr size_t kCudaCopyBytes = size_t{1} << 30;
// ... but at least this many L2s, or the measurement refuses to run.
constexpr size_t kCudaMinL2Multiple = 4;
// Both buffers together take at most this fraction of the free device memory.
constexpr size_t kCudaMaxFreeFraction = 4;
constexpr int kCudaWarmups = 2;
constexpr int kCudaRepetitions = 10;

// What the measurement allocates, released on every path out of it.
struct CudaCopyResources {
  void* source = nullptr;
  void* destination = nullptr;
  cudaStream_t stream = nullptr;
  cudaEvent_t start = nullptr;
  cudaEvent_t stop = nullptr;

  CudaCopyResources() = default;
  CudaCopyResources(const CudaCopyResources&) = delete;
  CudaCopyResources& operator=(const CudaCopyResources&) = delete;
  ~CudaCopyResources() {
    if (stream) cudaStreamSynchronize(stream);
    if (start) cudaEventDestroy(start);
    if (stop) cudaEventDestroy(stop);
    if (stream) cudaStreamDestroy(stream);
    if (source) cudaFree(source);
    if (destination) cudaFree(destination);
  }
};

struct DeviceCopy {
  double bytes_per_second = 0;
  size_t bytes = 0;  // each of source and destination
  size_t l2_bytes = 0;
};

// cudaMemcpyAsync device to device on one non-blocking stream of `device`, timed with events. The
// ranks on that device share the bandwidth a single copy measures.
DeviceCopy measure_cuda_device_copy(int device) {
  const std::string gpu = "GPU " + std::to_string(device);
  check_cuda(cudaSetDevice(device), "cudaSetDevice(" + std::to_string(device) + ") for the copy bandwidth");
  int l2_bytes = 0;
  check_cuda(cudaDeviceGetAttribute(&l2_bytes, cudaDevAttrL2CacheSize, device),
             "cudaDeviceGetAttribute(L2 cache size of " + gpu + ")");
  size_t free_bytes = 0, total_bytes = 0;
  check_cuda(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo for the copy bandwidth on " + gpu);
  size_t bytes = std::min(kCudaCopyBytes, free_bytes / kCudaMaxFreeFraction / 2) / kMiB * kMiB;
  const size_t min_bytes = kCudaMinL2Multiple * static_cast<size_t>(std::max(l2_bytes, 0));
  if (bytes == 0 || bytes < min_bytes) {
    throw SystemError("switchyard-bench: the copy bandwidth needs 2 x " +
                      format_mib(std::max(min_bytes, kMiB)) +
                      " of device memory within a quarter of the free " + "memory, but only " +
                      format_mib(free_bytes) + " of " + format_mib(total_bytes) + " are free on " + gpu);
  }

  CudaCopyResources resources;
  check_cuda(cudaMalloc(&resources.source, bytes),
             "cudaMalloc (copy-bandwidth source, " + format_mib(bytes) + ", " + gpu + ")");
  check_cuda(cudaMalloc(&resources.destination, bytes),
             "cudaMalloc (copy-bandwidth destination, " + format_mib(bytes) + ", " + gpu + ")");
  check_cuda(cudaStreamCreateWithFlags(&resources.stream, cudaStreamNonBlocking),
             "cudaStreamCreateWithFlags (copy bandwidth)");
  check_cuda(cudaEventCreate(&resources.start), "cudaEventCreate (copy-bandwidth start)");
  check_cuda(cudaEventCreate(&resources.stop), "cudaEventCreate (copy-bandwidth stop)");
  const cudaStream_t stream = resources.stream;
  check_cuda(cudaMemsetAsync(resources.source, 0x5A, bytes, stream),
             "cudaMemsetAsync (copy-bandwidth source)");
  check_cuda(cudaMemsetAsync(resources.destination, 0, bytes, stream),
             "cudaMemsetAsync (copy-bandwidth destination)");

  auto copy = [&] {
    check_cuda(
        cudaMemcpyAsync(resources.destination, resources.source, bytes, cudaMemcpyDeviceToDevice, stream),
        "cudaMemcpyAsync device to device (copy bandwidth, " + gpu + ")");
  };
  for (int warmup = 0; warmup < kCudaWarmups; ++warmup) copy();
  check_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize (copy-bandwidth warm-up)");
  std::vector<double> seconds;
  for (int repetition = 0; repetition < kCudaRepetitions; ++repetition) {
    check_cuda(cudaEventRecord(resources.start, stream), "cudaEventRecord (copy-bandwidth start)");
    copy();
    check_cuda(cudaEventRecord(resources.stop, stream), "cudaEventRecord (copy-bandwidth stop)");
    check_cuda(cudaEventSynchronize(resources.stop), "cudaEventSynchronize (copy bandwidth)");
    float milliseconds = 0;
    check_cuda(cudaEventElapsedTime(&milliseconds, resources.start, resources.stop),
               "cudaEventElapsedTime (copy bandwidth)");
    seconds.push_back(static_cast<double>(milliseconds) * 1e-3);
  }
  DeviceCopy result;
  result.bytes_per_second = 2.0 * static_cast<double>(bytes) / median(seconds);
  result.bytes = bytes;
  result.l2_bytes = static_cast<size_t>(std::max(l2_bytes, 0));
  return result;
}

// Every GPU the ranks use, each measured alone, summed: the ranks of different GPUs copy in
// different memories at once. With several GPUs, the peer copies between them too.
CopyBandwidth measure_cuda_copy_bandwidth(const DeviceMap& map) {
  const std::vector<int> devices = map.distinct_devices();
  CopyBandwidth result;
  result.devices = static_cast<int>(devices.size());
  std::string per_device;
  DeviceCopy first;
  for (int device : devices) {
    const DeviceCopy copy = measure_cuda_device_copy(device);
    if (per_device.empty()) first = copy;
    result.bytes_per_second += copy.bytes_per_second;
    per_device += (per_device.empty() ? "" : ", ") + ("GPU " + std::to_string(device) + " ") +
                  format_gbps(copy.bytes_per_second);
  }
  const std::string how = "2 x " + format_mib(first.bytes) + " (L2 " + format_mib(first.l2_bytes) +
                          "), bytes read + written, median of " + std::to_string(kCudaRepetitions) +
                          ", CUDA events";
  if (devices.size() == 1) {
    result.method = "cudaMemcpyAsync device to device, one stream on GPU " + std::to_string(devices.front()) +
                    " (the bandwidth all ranks there share), " + how;
  } else {
    result.method = "cudaMemcpyAsync device to device on each of the " + std::to_string(devices.size()) +
                    " GPUs alone, summed (" + per_device + " GB/s), one stream each, " + how;
    result.peer = measure_peer_copy_bandwidth(devices);
  }
  return result;
}
#endif

// Bytes read + written per second of `threads` threads, each copying its slice of 2 x `bytes`
// `passes` times, the fastest of kRepetitions.
double cpu_copy_bytes_per_second(int threads, size_t bytes, int passes) {
  std::unique_ptr<uint8_t[]> source(new uint8_t[bytes]);
  std::unique_ptr<uint8_t[]> destination(new uint8_t[bytes]);
  // First touch from the copying threads, so the pages exist (and sit near them) before timing.
  run_sliced(threads, bytes, [&](size_t begin, size_t end) {
    std::memset(source.get() + begin, 0x5A, end - begin);
    std::memset(destination.get() + begin, 0, end - begin);
  });
  auto copy = [&](size_t begin, size_t end) {
    for (int pass = 0; pass < passes; ++pass)
      std::memcpy(destination.get() + begin, source.get() + begin, end - begin);
  };
  run_sliced(threads, bytes, copy);  // warm-up
  std::vector<double> seconds;
  for (int repetition = 0; repetition < kRepetitions; ++repetition)
    seconds.push_back(run_sliced(threads, bytes, copy));
  // The fastest repetition: a busy machine slows some, and the bound must stay a lower bound.
  return 2.0 * static_cast<double>(bytes) * passes / *std::min_element(seconds.begin(), seconds.end());
}

}  // namespace

CopyBandwidth measure_cpu_copy_bandwidth(int num_ranks) {
  int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  int threads = std::max(1, std::min(num_ranks, cores));
  size_t bytes = kCpuCopyBytes;
  size_t memory = physical_memory_bytes();
  if (memory > 0) bytes = std::min(bytes, memory / kMaxMemoryFraction / 2);
  bytes = std::max(bytes / kMiB, size_t{1}) * kMiB;
  const double from_memory = cpu_copy_bytes_per_second(threads, bytes, 1);
  const size_t cached_bytes = kCpuCachedCopyBytesPerThread * static_cast<size_t>(threads);
  const double from_cache =
      cpu_copy_bytes_per_second(threads, cached_bytes, static_cast<int>(bytes / cached_bytes));

  CopyBandwidth result;
  result.bytes_per_second = std::max(from_memory, from_cache);
  result.method = "the faster memcpy of " + format_gbps(from_memory) + " GB/s at 2 x " + format_mib(bytes) +
                  " from memory and " + format_gbps(from_cache) + " GB/s at 2 x " +
                  std::to_string(kCpuCachedCopyBytesPerThread >> 10) +
                  " KiB a thread in cache, since the engines' rows may stay in cache; " +
                  std::to_string(threads) + (threads == 1 ? " thread" : " threads") +
                  ", bytes read + written, the fastest of " + std::to_string(kRepetitions);
  return result;
}

CopyBandwidth measure_copy_bandwidth(const BenchOptions& options) {
  switch (options.backend) {
    case Backend::cpu:
      return measure_cpu_copy_bandwidth(options.topology.num_ranks);
    case Backend::cuda:
#if defined(SWITCHYARD_WITH_CUDA)
      return measure_cuda_copy_bandwidth(options.devices);
#else
      throw Unsupported(
          "switchyard-bench: built without the CUDA backend, so there is no CUDA copy bandwidth");
#endif
  }
  throw Unsupported("switchyard-bench: no copy-bandwidth measurement for this backend");
}

}  // namespace switchyard::bench
