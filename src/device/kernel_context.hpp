#pragma once
// What every `normal` kernel of one rank is launched with: the heap view, the call's heap layout and
// the bounded-wait policy. Shared by host (launch) and device code.
#include "common/device_error.hpp"
#include "common/normal_protocol.hpp"
#include "common/rank_mask.hpp"
#include "common/sym_heap.hpp"

namespace switchyard::cuda {

struct KernelContext {
  common::SymHeap heap;
  common::NormalHeapLayout layout;
  int rank;
  int num_ranks;
  int num_channels;
  uint32_t chunk_tokens;
  uint64_t timeout_ns;
  common::DeviceErrorBlock* error;  // host-mapped: written with plain stores, read by the host
  int32_t* error_claim;             // device memory: the first failing thread claims the block here
  int32_t* abort_flag;              // device memory of this rank: set once any of its waits fails
  // Barriers this rank has opened, counted on the device: a replayed CUDA graph must not reuse the
  // epoch it was captured with.
  uint64_t* barrier_epoch;
  int32_t call_index;  // the host's count of this buffer's calls (diagnostics only)
  // The expert-major engines: peers this rank leaves out (Buffer::update_mask), and whether a wait that
  // times out masks its peer instead of failing (Config::mask_ranks_on_timeout).
  common::RankMaskView mask;
  bool mask_on_timeout;
  // Every rank's heap is on this GPU, so signals between ranks need only GPU scope (device/peer_signal.cuh).
  bool peers_on_this_gpu;
};

}  // namespace switchyard::cuda
