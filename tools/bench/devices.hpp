#pragma once
// Which CUDA device each rank uses (--devices). Ranks are threads of this process: either one GPU
// per rank (the library enables peer access between them) or several ranks sharing a GPU, each on
// its own stream, as on the one-GPU machine.
#include <optional>
#include <string>
#include <vector>

#include "switchyard/buffer.hpp"

namespace switchyard::bench {

// --devices auto: one GPU per rank when this process sees at least as many GPUs as ranks, else every
// rank on GPU 0 (the ranks-as-threads model of one GPU).
constexpr int kAutoDevices = 0;

struct DeviceMap {
  std::vector<int> device_of_rank;  // CUDA ordinal per rank; empty on cpu
  int visible_devices = 0;          // CUDA devices this process sees
  int requested = kAutoDevices;     // --devices: kAutoDevices, or N

  bool empty() const { return device_of_rank.empty(); }
  // The rank's CUDA device (0 on cpu, where nothing reads it).
  int device(int rank) const { return device_of_rank.empty() ? 0 : device_of_rank.at(rank); }
  // The devices some rank uses, ascending.
  std::vector<int> distinct_devices() const;
  // True when some device holds more than one rank (NCCL refuses that).
  bool shares_a_device() const;
  bool same_device(int rank_a, int rank_b) const { return device(rank_a) == device(rank_b); }
  // "auto", or the N of --devices N.
  std::string request_text() const;
  // One line for the output header: the rule that applied and every rank's device.
  std::string describe() const;
};

// Resolves --devices for `num_ranks` ranks. On cpu only auto is accepted (the map stays empty). On
// cuda, `requested` N spreads the ranks over GPUs 0 .. N-1, rank r on GPU r % N; N must be at most
// the visible devices and at most the ranks. Throws UsageError naming --devices otherwise.
DeviceMap map_ranks_to_devices(std::optional<int> requested, int num_ranks, Backend backend,
                               int visible_devices);

// CUDA devices this process sees (cudaGetDeviceCount); 0 in a build without CUDA or without a GPU.
int visible_cuda_devices();

}  // namespace switchyard::bench
