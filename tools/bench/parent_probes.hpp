#pragma once
// What the bench's parent process learns from CUDA without touching it, when ranks may run as
// forked processes: a CUDA context does not survive a fork, so the parent asks a forked child (the
// device count, the copy bandwidths, the L2 size) and forks the ranks later with CUDA untouched.
// In a build without CUDA nothing is forked: there is no context to keep clean.
#include <string>

#include "copy_bandwidth.hpp"
#include "options.hpp"

namespace switchyard::bench {

struct CudaPresence {
  bool available = false;
  int visible_devices = 0;
};

CudaPresence probe_cuda();
// measure_copy_bandwidth and cache_flush_rule, in a forked child when the ranks are processes on cuda.
CopyBandwidth copy_bandwidth_for(const BenchOptions& options);
std::string cache_flush_rule_for(const BenchOptions& options);

}  // namespace switchyard::bench
