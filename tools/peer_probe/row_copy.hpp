#pragma once
// The probe's one kernel: warps copy rows between two tables of addresses, as the symmetric engine's
// pull (every warp a stream of whole rows, 16-byte loads and stores, 8 in flight per lane) does.
#include <cuda_runtime.h>

#include <cstdint>

namespace switchyard::peer_probe {

// The most ranks a routed copy names (the probe's --ranks bound).
constexpr int kMaxProbeRanks = 64;

// Row i goes to to[i] from from[i]; or, when `from` is null, from owners[routes[i].x] + routes[i].y x
// row_bytes: a route record (owner, row) that a peer wrote into this rank's memory, turned into an
// address with a per-owner base from the launch's parameters, as the symmetric pull looks up its rows
// (route records in the reader's heap, SymHeap::map). Every row is `row_bytes` long (a multiple of 16,
// 16-byte aligned at both ends); the tables are device arrays of `rows` entries.
struct RowCopyJob {
  const uint8_t* const* from;
  uint8_t* const* to;
  int64_t rows;
  uint32_t row_bytes;
  const int2* routes;
  const uint8_t* owners[kMaxProbeRanks];
};

// Launches the copy on `stream` with `blocks` blocks of `threads` threads (a multiple of 32), each
// holding `shared_bytes` of dynamic shared memory it does not use (to occupy SMs as an engine does).
cudaError_t launch_row_copy(const RowCopyJob& job, int blocks, int threads, int shared_bytes,
                            cudaStream_t stream);

// Lets the kernel take `shared_bytes` of dynamic shared memory (above 48 KiB needs the opt-in).
cudaError_t set_row_copy_shared_bytes(int shared_bytes);

}  // namespace switchyard::peer_probe
