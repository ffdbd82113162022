#pragma once
// The copy bandwidth the roofline divides by, measured in the same run as the engines.
#include <cstddef>
#include <string>

#include "switchyard/buffer.hpp"

namespace switchyard::bench {

struct CopyBandwidth {
  double bytes_per_second = 0;  // bytes read + bytes written, per second
  std::string method;           // how it was measured, for the output header
};

// One function per backend; `num_ranks` bounds the copying threads on cpu. On cuda, one
// cudaMemcpyAsync stream on GPU 0, which every rank shares (copy_bandwidth.cpp). Throws Unsupported
// for cuda in a build without the CUDA backend.
CopyBandwidth measure_copy_bandwidth(Backend backend, int num_ranks);
CopyBandwidth measure_cpu_copy_bandwidth(int num_ranks);

}  // namespace switchyard::bench
