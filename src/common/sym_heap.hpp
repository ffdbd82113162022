#pragma once
// A rank's view of the symmetric heap: every rank allocates a region of the same size and layout,
// so a peer's copy of any object is at the local address plus that peer's offset.
#include "common/host_device.hpp"

namespace switchyard::common {

// Ranks of one load/store domain that a SymHeap can map. NOTES: an NVL72 rack is the largest such
// domain today; the table is passed by value to kernels (1 KiB).
constexpr int kMaxMappedRanks = 128;

struct SymHeap {
  uint8_t* base = nullptr;
  size_t bytes = 0;
  int rank = 0;
  int num_ranks = 1;
  int64_t peer_offset[kMaxMappedRanks] = {};

  // The address in `peer`'s heap of the object at `local` in ours.
  template <typename T>
  SY_HD T* map(T* local, int peer) const {
    // NOTES: integer arithmetic, since the two heaps are unrelated allocations.
    return reinterpret_cast<T*>(reinterpret_cast<uintptr_t>(local) +
                                static_cast<uintptr_t>(peer_offset[peer]));
  }
  SY_HD uint8_t* peer_base(int peer) const { return map(base, peer); }
};

}  // namespace switchyard::common
