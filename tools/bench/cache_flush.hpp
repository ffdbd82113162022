#pragma once
// Evicts the caches before every timed phase, so that each phase reads its inputs from memory and
// nothing the previous iteration left (inputs, outputs, the poison written just before) is still
// cached: a scratch buffer of twice the cache is written, outside the timed window, by one rank per
// cache. cuda: 2 x the L2 of the rank's GPU (cudaDevAttrL2CacheSize), by the first rank on each GPU,
// on its stream. cpu: 2 x the last-level cache, capped at kCpuMaxFlushBytes (64 MiB when the size is
// unknown), by rank 0, since the rank threads share it.
#include <cstddef>
#include <memory>
#include <string>

#include "switchyard/buffer.hpp"
#include "switchyard/tensor.hpp"

namespace switchyard::bench {

constexpr size_t kCpuMaxFlushBytes = size_t{64} << 20;

class CacheFlush {
 public:
  // `flushes`: this rank writes the scratch buffer (the first rank on its cache); the others do nothing.
  CacheFlush(Backend backend, Stream stream, bool flushes);
  // Writes the scratch buffer and waits until it is written.
  void run();
  size_t bytes() const { return bytes_; }

 private:
  Backend backend_;
  Stream stream_;
  size_t bytes_ = 0;
  Tensor device_scratch_;                          // cuda
  std::unique_ptr<unsigned char[]> host_scratch_;  // cpu
  unsigned char fill_ = 0;  // changes every run, so that no write can be skipped as redundant
};

// The bytes CacheFlush writes on cpu: 2 x the last-level cache (sysconf), at most kCpuMaxFlushBytes.
size_t cpu_cache_flush_bytes();
// One phrase for the output: what is written, by whom ("a 64 MiB scratch buffer ... is written").
std::string cache_flush_rule(Backend backend);
// The last-level cache sysconf reports, 0 when unknown.
size_t host_last_level_cache_bytes();

}  // namespace switchyard::bench
