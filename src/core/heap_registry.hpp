#pragma once
// Heaps of ranks that are threads of this process, by base address. A buffer that connects to a
// peer's heap holds a reference to it, so a heap outlives every buffer that maps it: a rank that
// fails and destroys its Buffer early can never turn its peers' in-flight writes into
// use-after-free. Until all `expected_connections` peers have connected, the registry itself holds
// a reference too, so a peer may still connect after the owner is gone (its calls then time out
// naming the missing rank). Across processes the mapping itself keeps the memory alive.
// Each heap is registered with its identity page as host memory (core/heap_identity.hpp): the CPU
// heap's own first page, the CUDA heap's host copy, so that a peer of this process checks and claims
// it without a device copy (one would run while connected peers already spin in their kernels).
#include <memory>

#include "core/heap_identity.hpp"

namespace switchyard::detail {

void register_thread_heap(const void* base, const std::shared_ptr<void>& owner,
                          const std::shared_ptr<HeapIdentity>& identity, int expected_connections);

struct ThreadHeap {
  std::shared_ptr<void> storage;           // keeps the heap alive while mapped
  std::shared_ptr<HeapIdentity> identity;  // its identity, in host memory
};
// The heap registered at `base` (counted as one connection), or nulls when no heap of this process is
// registered there.
ThreadHeap connect_thread_heap(const void* base);

}  // namespace switchyard::detail
