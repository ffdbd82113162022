#pragma once
// Ranks that are threads of one process share its CUDA context on a GPU, and with it the context's
// hardware work queues: CUDA_DEVICE_MAX_CONNECTIONS of them (8 unless the variable is set before the
// context is created; at most 32). Streams are spread over the queues and each queue runs its work in
// order. When more ranks than queues launch kernels that spin on each other, a rank's next kernel can
// wait in a queue behind another rank's spinning kernel, which waits for that very rank: a deadlock
// until the bounded waits give up (bench/NOTES.md, 2026-11-29, session 4: every topology of 9 or 10
// ranks stalled, and 8 ranks with 4 queues). Processes (MPS) have a context, and queues, each.
// Header-only, host-only: the CUDA backend checks at connect, and tests check the rule without a GPU.
#include <cstdlib>
#include <string>

#include "switchyard/errors.hpp"

namespace switchyard::cuda {

constexpr const char* kDeviceConnectionsVariable = "CUDA_DEVICE_MAX_CONNECTIONS";
constexpr int kDefaultDeviceConnections = 8;
constexpr int kMaxDeviceConnections = 32;

// The queues a context gets for the variable's text (null: unset). CUDA ignores a value it cannot
// use and clamps large ones.
inline int device_connections(const char* text) {
  if (text == nullptr) return kDefaultDeviceConnections;
  char* end = nullptr;
  const long value = std::strtol(text, &end, 10);
  if (end == text || *end != '\0' || value < 1) return kDefaultDeviceConnections;
  return value > kMaxDeviceConnections ? kMaxDeviceConnections : static_cast<int>(value);
}

// Throws Unsupported when `ranks` threads of this process share GPU `device` with fewer queues than
// ranks. `text`: the variable as the process has it (it must have been set before CUDA started).
inline void check_rank_threads_fit_connections(int ranks, int device, const char* text) {
  const int queues = device_connections(text);
  if (ranks <= queues) return;
  throw Unsupported(
      "topology: " + std::to_string(ranks) + " ranks as threads of this process share GPU " +
      std::to_string(device) + ", whose CUDA context has " + std::to_string(queues) + " hardware queues (" +
      kDeviceConnectionsVariable + "=" + (text ? text : "unset") +
      "; 8 unless set before CUDA starts, at most 32), and ranks whose kernels wait on each other "
      "need one each: set " +
      kDeviceConnectionsVariable +
      "=32 in the environment before the first CUDA call, or run a process per rank");
}

}  // namespace switchyard::cuda
