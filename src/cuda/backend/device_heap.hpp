#pragma once
// The CUDA backend's symmetric heap: one cudaMalloc region per rank. Peers in this process use the
// pointer (with peer access enabled when they sit on another GPU); peers in other processes open a
// CUDA IPC handle.
#include <cstddef>
#include <memory>
#include <vector>

#include "common/sym_heap.hpp"
#include "core/heap_identity.hpp"
#include "switchyard/buffer.hpp"

namespace switchyard::cuda {

// The heap's allocation (identity page and heap) is a whole number of the GPU's large pages (2 MiB on
// Hopper and Ampere). Measured (bench/NOTES.md, session 18): 8 processes reading random rows of each
// other's 512 MiB allocations through CUDA IPC took 6.4x as long when the allocations were 256 KiB or
// 1 MiB past a 2 MiB multiple as when they were on one; the owner, and threads sharing one address
// space, read at full speed either way. The symmetric dispatch as 8 processes went 7324 -> 1456 us.
constexpr size_t kHeapAllocationGranule = size_t{2} << 20;
// Bytes to allocate for a heap of `heap_bytes` behind its identity page.
size_t heap_allocation_bytes(size_t heap_bytes);

class DeviceHeap {
 public:
  DeviceHeap(size_t bytes, int rank, int num_ranks, int device, HeapSharing sharing);
  ~DeviceHeap();
  DeviceHeap(const DeviceHeap&) = delete;
  DeviceHeap& operator=(const DeviceHeap&) = delete;

  Bytes local_handle() const;
  void connect(const std::vector<Bytes>& payloads);

  const common::SymHeap& view() const { return view_; }
  // Ranks (this one included) whose heap lives on this rank's GPU; known after connect().
  int ranks_on_this_device() const { return ranks_on_this_device_; }

 private:
  // Claims this rank's slot in every peer's identity page; InvalidArgument, nothing claimed, when
  // another live Buffer of this rank holds one.
  void claim_peer_heaps();

  size_t bytes_;
  int rank_;
  int num_ranks_;
  int device_;
  HeapSharing sharing_;
  uint64_t nonce_;
  detail::HeapIdentity identity_{};  // what the identity page holds
  uint8_t* allocation_ = nullptr;    // the identity page (core/heap_identity.hpp), then the heap at base_
  uint8_t* base_ = nullptr;
  std::shared_ptr<void> storage_;                    // owns base_, shared with connected peers (threads)
  std::vector<std::shared_ptr<void>> peer_storage_;  // threads: keeps peers' heaps alive while mapped
  std::vector<void*> opened_;                        // IPC mappings to close
  bool host_claimed_ = false;                        // our slot in every thread peer's host identity
  std::vector<int> device_claimed_;  // peers in other processes whose device page holds our slot
  std::shared_ptr<detail::HeapIdentity> host_identity_;    // threads: the identity's host copy, for peers
  std::vector<detail::HeapIdentity*> peer_host_identity_;  // threads: each peer's (null: read the device)
  common::SymHeap view_{};
  int ranks_on_this_device_ = 1;
};

}  // namespace switchyard::cuda
