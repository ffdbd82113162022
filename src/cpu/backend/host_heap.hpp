#pragma once
// The CPU backend's symmetric heap: plain host memory when ranks are threads of one process,
// POSIX shared memory (its name carried in the handle) when ranks are processes.
#include <memory>
#include <string>
#include <vector>

#include "common/sym_heap.hpp"
#include "core/heap_identity.hpp"
#include "switchyard/buffer.hpp"

namespace switchyard::cpu {

struct HostHeapPayload;

class HostHeap {
 public:
  HostHeap(size_t bytes, int rank, int num_ranks, HeapSharing sharing);
  ~HostHeap();
  HostHeap(const HostHeap&) = delete;
  HostHeap& operator=(const HostHeap&) = delete;

  Bytes local_handle() const;
  // Maps every peer's heap. `payloads[p]` is the backend part of peer p's handle.
  void connect(const std::vector<Bytes>& payloads);

  uint8_t* base() const { return base_; }
  size_t bytes() const { return bytes_; }
  const common::SymHeap& view() const { return view_; }

 private:
  // A peer of this process: its heap must be live in the registry and carry the handle's identity.
  uint8_t* connect_thread_peer(const HostHeapPayload& payload, const detail::ExpectedHeap& expected,
                               const std::string& which);
  // A peer in another process: its segment must have this heap's size and the handle's identity.
  uint8_t* map_process_peer(int peer, const HostHeapPayload& payload, const detail::ExpectedHeap& expected,
                            const std::string& which);
  // Every rank's identity page, this one's included (after connect; all host memory).
  std::vector<detail::HeapIdentity*> peer_identities() const;
  // Claims this rank's slot in every peer's identity page; InvalidArgument, nothing claimed, when
  // another live Buffer of this rank holds one.
  void claim_peer_heaps();
  // Unlinks each segment name that every peer has now mapped.
  void release_segment_names(const std::vector<HostHeapPayload>& peers);

  size_t bytes_;
  int rank_;
  int num_ranks_;
  HeapSharing sharing_;
  uint64_t nonce_;
  detail::HeapIdentity* identity_ = nullptr;  // the allocation's first page; base_ follows it
  uint8_t* base_ = nullptr;
  bool name_linked_ = false;                         // processes: shm_name_ still names the segment
  bool claimed_ = false;                             // this rank's slot in every peer's identity page is ours
  std::shared_ptr<void> storage_;                    // threads: owns base_, shared with connected peers
  std::vector<std::shared_ptr<void>> peer_storage_;  // threads: keeps peers' heaps alive while mapped
  std::string shm_name_;
  std::vector<void*>
      peer_mappings_;  // mmap'd peer allocations (identity page first) to unmap (processes only)
  common::SymHeap view_{};
};

}  // namespace switchyard::cpu
