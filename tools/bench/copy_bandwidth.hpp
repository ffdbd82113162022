#pragma once
// The copy bandwidths the bounds divide by, measured in the same run as the engines: the local
// copy (within one device's memory) and, with ranks on several GPUs, the peer copy between them.
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "options.hpp"

namespace switchyard::bench {

// Copies between GPUs (cudaMemcpyPeerAsync), counting each byte once: it crosses a link once.
struct PeerCopyBandwidth {
  double pair_bytes_per_second = 0;       // the first GPU to the second, alone
  double all_pairs_bytes_per_second = 0;  // every GPU to every other at once, all bytes together
  int devices = 0;
  std::string method;
};

struct CopyBandwidth {
  // Local copies: bytes read + bytes written, per second, summed over the devices the ranks use
  // (each measured alone; one device on cpu and when all ranks share a GPU).
  double bytes_per_second = 0;
  int devices = 1;
  std::string method;                     // how it was measured, for the output header
  std::optional<PeerCopyBandwidth> peer;  // only when the ranks use several GPUs
};

// On cpu, memcpy with min(R, cores) threads. On cuda, a device-to-device copy on each GPU that
// options.devices uses, and the peer copies between them when there are several. Throws Unsupported
// for cuda in a build without the CUDA backend.
CopyBandwidth measure_copy_bandwidth(const BenchOptions& options);
CopyBandwidth measure_cpu_copy_bandwidth(int num_ranks);
// cudaMemcpyPeerAsync between `devices` (at least two), peer access enabled (peer_bandwidth.cpp).
PeerCopyBandwidth measure_peer_copy_bandwidth(const std::vector<int>& devices);

}  // namespace switchyard::bench
