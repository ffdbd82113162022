#include "devices.hpp"

#include <algorithm>

#include "cuda_check.hpp"
#include "options.hpp"

namespace switchyard::bench {
namespace {

std::string plural(int count, const std::string& noun) {
  return std::to_string(count) + " " + noun + (count == 1 ? "" : "s");
}

std::string rank_list(const std::vector<int>& device_of_rank) {
  std::string text;
  for (size_t rank = 0; rank < device_of_rank.size(); ++rank) {
    text += (rank == 0 ? "" : " ") + std::to_string(rank) + "->" + std::to_string(device_of_rank[rank]);
  }
  return text;
}

}  // namespace

std::vector<int> DeviceMap::distinct_devices() const {
  std::vector<int> devices = device_of_rank;
  std::sort(devices.begin(), devices.end());
  devices.erase(std::unique(devices.begin(), devices.end()), devices.end());
  return devices;
}

bool DeviceMap::shares_a_device() const {
  return distinct_devices().size() < device_of_rank.size();
}

std::string DeviceMap::request_text() const {
  return requested == kAutoDevices ? "auto" : std::to_string(requested);
}

std::string DeviceMap::describe() const {
  if (empty()) return "none (cpu backend: the ranks are host threads)";
  const int num_ranks = static_cast<int>(device_of_rank.size());
  const int used = static_cast<int>(distinct_devices().size());
  std::string rule;
  if (used == num_ranks) {
    rule = "one GPU per rank";
  } else if (used == 1) {
    rule = "every rank on GPU " + std::to_string(device_of_rank.front()) + ", as threads sharing it";
    if (requested == kAutoDevices) {
      rule += " (auto: " + plural(num_ranks, "rank") + ", more than the visible GPUs";
      if (visible_devices > 1) rule += "; --devices " + std::to_string(visible_devices) + " spreads them";
      rule += ")";
    }
  } else {
    rule = "rank r on GPU r % " + std::to_string(used) + ", ranks sharing each GPU as threads";
  }
  return "--devices " + request_text() + ", " + std::to_string(visible_devices) + " visible: " + rule +
         "; rank->GPU " + rank_list(device_of_rank);
}

DeviceMap map_ranks_to_devices(std::optional<int> requested, int num_ranks, Backend backend,
                               int visible_devices) {
  DeviceMap map;
  map.visible_devices = visible_devices;
  map.requested = requested.value_or(kAutoDevices);
  if (backend == Backend::cpu) {
    if (map.requested != kAutoDevices) {
      throw UsageError(
          "--devices: expected auto with --backend cpu (the ranks are host threads, no GPU), got " +
          std::to_string(map.requested));
    }
    return map;
  }
  int spread_over = 1;
  if (map.requested == kAutoDevices) {
    spread_over = visible_devices >= num_ranks ? num_ranks : 1;
  } else {
    if (map.requested > visible_devices) {
      throw UsageError("--devices: expected at most the " + plural(visible_devices, "CUDA device") +
                       " this process sees (CUDA_VISIBLE_DEVICES limits them), got " +
                       std::to_string(map.requested));
    }
    if (map.requested > num_ranks) {
      throw UsageError("--devices: expected at most --ranks " + std::to_string(num_ranks) +
                       " (every GPU gets a rank), got " + std::to_string(map.requested));
    }
    spread_over = map.requested;
  }
  map.device_of_rank.resize(static_cast<size_t>(num_ranks));
  for (int rank = 0; rank < num_ranks; ++rank) map.device_of_rank[rank] = rank % spread_over;
  return map;
}

int visible_cuda_devices() {
#if defined(SWITCHYARD_WITH_CUDA)
  int count = 0;
  // No device (or no driver) reads as zero devices: --backend cuda is refused elsewhere.
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return count;
#else
  return 0;
#endif
}

}  // namespace switchyard::bench
