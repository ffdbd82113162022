#pragma once
// The CPU backend's symmetric heap: plain host memory when ranks are threads of one process,
// POSIX shared memory (its name carried in the handle) when ranks are processes.
#include <memory>
#include <string>
#include <vector>

#include "common/sym_heap.hpp"
#include "switchyard/buffer.hpp"

namespace switchyard::cpu {

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
  size_t bytes_;
  int rank_;
  HeapSharing sharing_;
  uint8_t* base_ = nullptr;
  std::shared_ptr<void> storage_;                  // threads: owns base_, shared with connected peers
  std::vector<std::shared_ptr<void>> peer_storage_;  // threads: keeps peers' heaps alive while mapped
  std::string shm_name_;
  std::vector<uint8_t*> peer_mappings_;  // mmap'd peer heaps to unmap (processes only)
  common::SymHeap view_{};
};

}  // namespace switchyard::cpu
