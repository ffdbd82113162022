#include "cache_flush.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "cuda_check.hpp"
#include "transfer.hpp"

namespace switchyard::bench {

size_t host_last_level_cache_bytes() {
  long largest = 0;
#if defined(_SC_LEVEL3_CACHE_SIZE)
  largest = std::max(largest, sysconf(_SC_LEVEL3_CACHE_SIZE));
#endif
#if defined(_SC_LEVEL4_CACHE_SIZE)
  largest = std::max(largest, sysconf(_SC_LEVEL4_CACHE_SIZE));
#endif
  return largest > 0 ? static_cast<size_t>(largest) : 0;
}

size_t cpu_cache_flush_bytes() {
  const size_t cache = host_last_level_cache_bytes();
  return cache == 0 ? kCpuMaxFlushBytes : std::min(2 * cache, kCpuMaxFlushBytes);
}

std::string cache_flush_rule(Backend backend) {
  constexpr size_t kMiB = size_t{1} << 20;
  if (backend == Backend::cpu) {
    const size_t cache = host_last_level_cache_bytes();
    const std::string cache_text = cache == 0
                                       ? "the last-level cache size unknown"
                                       : "2 x the " + std::to_string(cache / kMiB) + " MiB last-level cache";
    return "rank 0 writes a " + std::to_string(cpu_cache_flush_bytes() / kMiB) + " MiB scratch buffer (" +
           cache_text + ", at most " + std::to_string(kCpuMaxFlushBytes / kMiB) + " MiB)";
  }
  return "the first rank on each GPU writes a scratch buffer of 2 x its L2 (" +
         std::to_string(2 * backend_cache_bytes(backend, nullptr) / kMiB) + " MiB on the first GPU)";
}

CacheFlush::CacheFlush(Backend backend, Stream stream, bool flushes) : backend_(backend), stream_(stream) {
  if (!flushes) return;
  if (backend == Backend::cpu) {
    bytes_ = cpu_cache_flush_bytes();
    host_scratch_.reset(new unsigned char[bytes_]);
    return;
  }
  bytes_ = 2 * backend_cache_bytes(backend, stream);
  if (bytes_ > 0) {
    device_scratch_ =
        allocate_on_backend(backend, DType::i32, {static_cast<int64_t>((bytes_ + 3) / 4)}, stream);
  }
}

void CacheFlush::run() {
  if (bytes_ == 0) return;
  ++fill_;
  if (backend_ == Backend::cpu) {
    std::memset(host_scratch_.get(), fill_, bytes_);
    return;
  }
#if defined(SWITCHYARD_WITH_CUDA)
  const cudaStream_t stream = cuda_stream(stream_);
  check_cuda(cudaMemsetAsync(device_scratch_.data(), fill_, bytes_, stream), "cudaMemsetAsync (cache flush)");
  check_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize after the cache flush");
#endif
}

}  // namespace switchyard::bench
