// Linked (as an object, so the linker keeps it) only into the suites that run ranks as threads.
//
// They run up to 10 ranks as threads on one GPU, each needing its own hardware queue of the process's
// CUDA context (src/cuda/device_connections.hpp); the driver reads the variable when the context is
// created, so it is set before main. A value the caller set is kept.
//
// Not in the one-process-per-rank tests: a process there holds one rank and needs one queue, and under
// MPS every client's queues come out of the server's share of the GPU: 4 clients with 32 queues each
// already fail in cudaSetDevice with "out of memory" (session 5, run 1).
#include <cstdlib>

namespace switchyard::testing {
namespace {

[[maybe_unused]] const bool kDeviceConnectionsSet = [] {
  return setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 0) == 0;
}();

}  // namespace
}  // namespace switchyard::testing
