#pragma once
// Heaps of ranks that are threads of this process, by base address. A buffer that connects to a
// peer's heap holds a reference to it, so a heap outlives every buffer that maps it: a rank that
// fails and destroys its Buffer early can never turn its peers' in-flight writes into
// use-after-free. Until all `expected_connections` peers have connected, the registry itself holds
// a reference too, so a peer may still connect after the owner is gone (its calls then time out
// naming the missing rank). Across processes the mapping itself keeps the memory alive.
#include <memory>

namespace switchyard::detail {

void register_thread_heap(const void* base, const std::shared_ptr<void>& owner, int expected_connections);
// The owning reference for `base` (counted as one connection), or null when no heap of this
// process is registered there.
std::shared_ptr<void> connect_thread_heap(const void* base);

}  // namespace switchyard::detail
