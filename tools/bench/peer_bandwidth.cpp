// The peer copy bandwidth: cudaMemcpyPeerAsync between the GPUs the ranks use, the bound of the
// rows that cross from one rank's GPU to another's (NVLink on an H200 node). Each byte counts once:
// it crosses a link once (the local copy counts bytes read + written, as its memory sees both).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "copy_bandwidth.hpp"
#include "cuda_check.hpp"
#include "stats.hpp"
#include "switchyard/errors.hpp"

namespace switchyard::bench {

#if defined(SWITCHYARD_WITH_CUDA)
namespace {

constexpr size_t kMiB = size_t{1} << 20;
// Per copy: far beyond the L2 (60 MB on an H200) at both ends.
constexpr size_t kPeerCopyBytes = 256 * kMiB;
// ... and never less than this, or the measurement refuses to run.
constexpr size_t kMinPeerCopyBytes = 64 * kMiB;
// A GPU holds one source and one destination per peer; together at most this fraction of its free
// memory.
constexpr size_t kMaxFreeFraction = 4;
constexpr int kPairWarmups = 2;
constexpr int kPairRepetitions = 10;
// All pairs at once are timed by the wall clock, from the first launch to the last completion. Each
// pair's stream copies this many times per round, so that a round moves gigabytes per GPU and the
// microseconds between the first and the last launch hardly count (they only lower the result).
constexpr int kCopiesPerRound = 4;
constexpr int kRoundWarmups = 1;
constexpr int kRounds = 5;

std::string gpu_name(int device) {
  return "GPU " + std::to_string(device);
}

std::string format_mib(size_t bytes) {
  return std::to_string(bytes / kMiB) + " MiB";
}

// Every allocation, stream and event of the measurement, released on every path out of it.
class PeerResources {
 public:
  PeerResources() = default;
  PeerResources(const PeerResources&) = delete;
  PeerResources& operator=(const PeerResources&) = delete;
  ~PeerResources() {
    for (const auto& [device, stream] : streams_) {
      cudaSetDevice(device);
      cudaStreamSynchronize(stream);
      cudaStreamDestroy(stream);
    }
    for (const auto& [device, event] : events_) {
      cudaSetDevice(device);
      cudaEventDestroy(event);
    }
    for (const auto& [device, pointer] : allocations_) {
      cudaSetDevice(device);
      cudaFree(pointer);
    }
  }

  void* allocate(int device, size_t bytes, const std::string& what) {
    check_cuda(cudaSetDevice(device), "cudaSetDevice(" + std::to_string(device) + ") for the peer copy");
    void* pointer = nullptr;
    check_cuda(cudaMalloc(&pointer, bytes),
               "cudaMalloc (peer copy " + what + ", " + format_mib(bytes) + ", " + gpu_name(device) + ")");
    allocations_.emplace_back(device, pointer);
    check_cuda(cudaMemset(pointer, 0x5A, bytes), "cudaMemset (peer copy " + what + ")");
    return pointer;
  }
  cudaStream_t stream(int device) {
    check_cuda(cudaSetDevice(device), "cudaSetDevice(" + std::to_string(device) + ") for the peer copy");
    cudaStream_t stream = nullptr;
    check_cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
               "cudaStreamCreateWithFlags (peer copy)");
    streams_.emplace_back(device, stream);
    return stream;
  }
  cudaEvent_t event(int device) {
    check_cuda(cudaSetDevice(device), "cudaSetDevice(" + std::to_string(device) + ") for the peer copy");
    cudaEvent_t event = nullptr;
    check_cuda(cudaEventCreate(&event), "cudaEventCreate (peer copy)");
    events_.emplace_back(device, event);
    return event;
  }

 private:
  std::vector<std::pair<int, void*>> allocations_;
  std::vector<std::pair<int, cudaStream_t>> streams_;
  std::vector<std::pair<int, cudaEvent_t>> events_;
};

// Enables peer access between every pair that has it (the library does the same for its heaps and
// accepts it already enabled). Returns the pairs without it: their copies are staged by the driver.
std::vector<std::string> enable_peer_access(const std::vector<int>& devices) {
  std::vector<std::string> without;
  for (int from : devices) {
    for (int to : devices) {
      if (from == to) continue;
      int can_access = 0;
      check_cuda(cudaDeviceCanAccessPeer(&can_access, from, to),
                 "cudaDeviceCanAccessPeer(" + gpu_name(from) + ", " + gpu_name(to) + ")");
      if (!can_access) {
        without.push_back(std::to_string(from) + "->" + std::to_string(to));
        continue;
      }
      check_cuda(cudaSetDevice(from), "cudaSetDevice(" + std::to_string(from) + ") for peer access");
      const cudaError_t status = cudaDeviceEnablePeerAccess(to, 0);
      if (status == cudaErrorPeerAccessAlreadyEnabled) {
        cudaGetLastError();  // not an error: clear it so that no later check reads it
        continue;
      }
      check_cuda(status, "cudaDeviceEnablePeerAccess(" + gpu_name(from) + " -> " + gpu_name(to) + ")");
    }
  }
  return without;
}

// The bytes per copy: kPeerCopyBytes, less when a GPU's share of its free memory is smaller.
size_t peer_copy_bytes(const std::vector<int>& devices) {
  size_t bytes = kPeerCopyBytes;
  const size_t buffers_per_device = devices.size();  // one source and one destination per peer
  for (int device : devices) {
    check_cuda(cudaSetDevice(device), "cudaSetDevice(" + std::to_string(device) + ") for the peer copy");
    size_t free_bytes = 0, total_bytes = 0;
    check_cuda(cudaMemGetInfo(&free_bytes, &total_bytes),
               "cudaMemGetInfo (peer copy, " + gpu_name(device) + ")");
    bytes = std::min(bytes, free_bytes / kMaxFreeFraction / buffers_per_device / kMiB * kMiB);
    if (bytes < kMinPeerCopyBytes) {
      throw SystemError("switchyard-bench: the peer copy bandwidth needs " +
                        std::to_string(buffers_per_device) + " x " + format_mib(kMinPeerCopyBytes) +
                        " within a quarter of the free memory of " + gpu_name(device) + ", but only " +
                        format_mib(free_bytes) + " of " + format_mib(total_bytes) + " are free");
    }
  }
  return bytes;
}

// The first GPU to the second, alone, timed with events on the source's stream.
double measure_pair(PeerResources& resources, int from, int to, size_t bytes) {
  void* source = resources.allocate(from, bytes, "source");
  void* destination = resources.allocate(to, bytes, "destination");
  const cudaStream_t stream = resources.stream(from);
  const cudaEvent_t start = resources.event(from);
  const cudaEvent_t stop = resources.event(from);
  check_cuda(cudaSetDevice(from), "cudaSetDevice(" + std::to_string(from) + ") for the peer copy");
  auto copy = [&] {
    check_cuda(cudaMemcpyPeerAsync(destination, to, source, from, bytes, stream),
               "cudaMemcpyPeerAsync (" + gpu_name(from) + " -> " + gpu_name(to) + ")");
  };
  for (int warmup = 0; warmup < kPairWarmups; ++warmup) copy();
  check_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize (peer copy warm-up)");
  std::vector<double> seconds;
  for (int repetition = 0; repetition < kPairRepetitions; ++repetition) {
    check_cuda(cudaEventRecord(start, stream), "cudaEventRecord (peer copy start)");
    copy();
    check_cuda(cudaEventRecord(stop, stream), "cudaEventRecord (peer copy stop)");
    check_cuda(cudaEventSynchronize(stop), "cudaEventSynchronize (peer copy)");
    float milliseconds = 0;
    check_cuda(cudaEventElapsedTime(&milliseconds, start, stop), "cudaEventElapsedTime (peer copy)");
    seconds.push_back(static_cast<double>(milliseconds) * 1e-3);
  }
  return static_cast<double>(bytes) / median(seconds);
}

// Every GPU to every other at once: one source per GPU, one destination and one stream per pair
// (the stream on the source's GPU). Events of different GPUs cannot be compared, so the host's clock
// times each round.
double measure_all_pairs(PeerResources& resources, const std::vector<int>& devices, size_t bytes) {
  struct Pair {
    int from, to;
    void* source;
    void* destination;
    cudaStream_t stream;
  };
  std::vector<Pair> pairs;
  for (int from : devices) {
    void* source = resources.allocate(from, bytes, "source");
    for (int to : devices) {
      if (to == from) continue;
      pairs.push_back(
          Pair{from, to, source, resources.allocate(to, bytes, "destination"), resources.stream(from)});
    }
  }
  auto wait_all = [&] {
    for (const Pair& pair : pairs) {
      check_cuda(cudaStreamSynchronize(pair.stream), "cudaStreamSynchronize (all-pairs peer copy)");
    }
  };
  auto round = [&] {
    wait_all();
    const auto start = std::chrono::steady_clock::now();
    // Copy by copy across the pairs, so that every pair has started after the first sweep.
    for (int copy = 0; copy < kCopiesPerRound; ++copy) {
      for (const Pair& pair : pairs) {
        check_cuda(cudaSetDevice(pair.from),
                   "cudaSetDevice(" + std::to_string(pair.from) + ") for the peer copy");
        check_cuda(
            cudaMemcpyPeerAsync(pair.destination, pair.to, pair.source, pair.from, bytes, pair.stream),
            "cudaMemcpyPeerAsync (" + gpu_name(pair.from) + " -> " + gpu_name(pair.to) + ", all pairs)");
      }
    }
    wait_all();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  for (int warmup = 0; warmup < kRoundWarmups; ++warmup) round();
  std::vector<double> seconds;
  for (int repetition = 0; repetition < kRounds; ++repetition) seconds.push_back(round());
  const double round_bytes = static_cast<double>(pairs.size()) * kCopiesPerRound * static_cast<double>(bytes);
  return round_bytes / median(seconds);
}

std::string format_gbps(double bytes_per_second) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f", bytes_per_second / 1e9);
  return text;
}

}  // namespace

PeerCopyBandwidth measure_peer_copy_bandwidth(const std::vector<int>& devices) {
  if (devices.size() < 2) {
    throw std::logic_error("switchyard-bench: the peer copy bandwidth needs two GPUs, got " +
                           std::to_string(devices.size()));
  }
  const std::vector<std::string> without_peer_access = enable_peer_access(devices);
  const size_t bytes = peer_copy_bytes(devices);
  PeerCopyBandwidth result;
  result.devices = static_cast<int>(devices.size());
  {
    PeerResources resources;
    result.pair_bytes_per_second = measure_pair(resources, devices[0], devices[1], bytes);
  }
  {
    PeerResources resources;
    result.all_pairs_bytes_per_second = measure_all_pairs(resources, devices, bytes);
  }
  const size_t gpus = devices.size();
  std::string access = "peer access enabled between every pair";
  if (!without_peer_access.empty()) {
    access = "no peer access for ";
    for (size_t i = 0; i < without_peer_access.size(); ++i)
      access += (i ? ", " : "") + without_peer_access[i];
    access += " (the driver stages those copies)";
  }
  result.method =
      "cudaMemcpyPeerAsync, " + format_mib(bytes) + " per copy, bytes counted once, " + access + "; " +
      gpu_name(devices[0]) + " -> " + gpu_name(devices[1]) + " alone: median of " +
      std::to_string(kPairRepetitions) + ", CUDA events; all " + std::to_string(gpus) + " x " +
      std::to_string(gpus - 1) + " pairs at once: one stream per pair, " + std::to_string(kCopiesPerRound) +
      " copies each per round, wall clock from the first launch " + "to the last completion, median of " +
      std::to_string(kRounds) + " rounds (" +
      format_gbps(result.all_pairs_bytes_per_second / static_cast<double>(gpus)) + " GB/s out of each GPU)";
  return result;
}

#else

PeerCopyBandwidth measure_peer_copy_bandwidth(const std::vector<int>& /*devices*/) {
  throw Unsupported("switchyard-bench: built without the CUDA backend, so there is no peer copy bandwidth");
}

#endif

}  // namespace switchyard::bench
