#include "cuda/rank_device.hpp"

#include <cuda_runtime.h>

#include <cstdlib>
#include <stdexcept>
#include <string>

namespace switchyard::testing {

namespace {

int visible_devices() {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess || count <= 0) {
    cudaGetLastError();  // cudaGetDeviceCount's error is sticky until read
    throw std::runtime_error(std::string(kTestDevicesVariable) +
                             "=spread: expected at least one visible CUDA device, got " +
                             (status != cudaSuccess ? std::string(cudaGetErrorString(status)) : "0 devices"));
  }
  return count;
}

}  // namespace

int device_for_rank(int rank, int num_ranks) {
  if (num_ranks < 1 || rank < 0 || rank >= num_ranks) {
    throw std::invalid_argument("device_for_rank: expected 0 <= rank < num_ranks, got rank " +
                                std::to_string(rank) + " of " + std::to_string(num_ranks));
  }
  const char* text = std::getenv(kTestDevicesVariable);
  const std::string mode = text == nullptr ? "" : text;
  // NOTES: the default asks the runtime nothing, so it behaves exactly as the former constant device 0.
  if (mode.empty() || mode == "0") return 0;
  if (mode == "spread") return rank % visible_devices();
  throw std::invalid_argument(std::string(kTestDevicesVariable) +
                              ": expected unset, \"0\" or \"spread\", got \"" + mode + "\"");
}

int device_of(const Buffer& buffer) {
  return device_for_rank(buffer.rank(), buffer.topology().num_ranks);
}

}  // namespace switchyard::testing
