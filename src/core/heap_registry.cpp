#include "core/heap_registry.hpp"

#include <iterator>
#include <map>
#include <mutex>

namespace switchyard::detail {

namespace {

struct Entry {
  std::weak_ptr<void> heap;
  std::weak_ptr<HeapIdentity> identity;
  std::shared_ptr<void> held_until_connected;
  int remaining_connections = 0;
};

std::mutex registry_mutex;
std::map<const void*, Entry>& registry() {
  static std::map<const void*, Entry> heaps;
  return heaps;
}

}  // namespace

void register_thread_heap(const void* base, const std::shared_ptr<void>& owner,
                          const std::shared_ptr<HeapIdentity>& identity, int expected_connections) {
  std::lock_guard<std::mutex> lock(registry_mutex);
  auto& heaps = registry();
  // Drop entries whose heaps are gone, so the map stays as small as the live buffers.
  for (auto it = heaps.begin(); it != heaps.end();)
    it = it->second.heap.expired() ? heaps.erase(it) : std::next(it);
  Entry& entry = heaps[base];
  entry.heap = owner;
  entry.identity = identity;
  entry.remaining_connections = expected_connections;
  entry.held_until_connected = expected_connections > 0 ? owner : nullptr;
}

ThreadHeap connect_thread_heap(const void* base) {
  std::lock_guard<std::mutex> lock(registry_mutex);
  auto found = registry().find(base);
  if (found == registry().end()) return {};
  Entry& entry = found->second;
  ThreadHeap heap{entry.heap.lock(), entry.identity.lock()};
  if (!heap.storage || !heap.identity) return {};
  if (--entry.remaining_connections <= 0) entry.held_until_connected.reset();
  return heap;
}

}  // namespace switchyard::detail
