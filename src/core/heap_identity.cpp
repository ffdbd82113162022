#include "core/heap_identity.hpp"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <random>

#include "switchyard/errors.hpp"

namespace switchyard::detail {

namespace {

constexpr char kHeapMagic[8] = {'S', 'W', 'Y', 'D', 'H', 'E', 'A', 'P'};
constexpr uint32_t kHeapIdentityVersion = 1;

// splitmix64's finaliser: spreads the entropy of every input bit over the whole word.
uint64_t mix(uint64_t value) {
  value += 0x9e3779b97f4a7c15ull;
  value = (value ^ (value >> 30)) * 0xbf58476d1ce4e5b9ull;
  value = (value ^ (value >> 27)) * 0x94d049bb133111ebull;
  return value ^ (value >> 31);
}

}  // namespace

uint64_t new_heap_nonce() {
  static std::atomic<uint64_t> counter{0};
  // NOTES: random_device alone may be deterministic on some platforms; the pid, the clock and a
  // counter keep two heaps of one machine apart even then.
  std::random_device device;
  uint64_t nonce = mix((static_cast<uint64_t>(device()) << 32) ^ device());
  nonce = mix(nonce ^ static_cast<uint64_t>(getpid()));
  nonce = mix(nonce ^ static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()));
  nonce = mix(nonce ^ counter.fetch_add(1));
  return nonce == 0 ? 1 : nonce;
}

HeapIdentity make_heap_identity(uint64_t nonce, int rank, int num_ranks, size_t heap_bytes) {
  HeapIdentity identity{};
  std::memcpy(identity.magic, kHeapMagic, sizeof(kHeapMagic));
  identity.version = kHeapIdentityVersion;
  identity.rank = rank;
  identity.num_ranks = num_ranks;
  identity.nonce = nonce;
  identity.heap_bytes = heap_bytes;
  identity.owner_pid = static_cast<uint64_t>(getpid());
  return identity;
}

uint64_t claim_connection(HeapIdentity& identity, int source, uint64_t claimant) {
  uint64_t expected = 0;
  if (__atomic_compare_exchange_n(&identity.connected_by[source], &expected, claimant, false,
                                  __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
    return 0;
  }
  return expected == claimant ? 0 : expected;
}

void release_connection(HeapIdentity& identity, int source, uint64_t claimant) {
  uint64_t expected = claimant;
  __atomic_compare_exchange_n(&identity.connected_by[source], &expected, 0, false, __ATOMIC_ACQ_REL,
                              __ATOMIC_ACQUIRE);
}

void throw_heap_taken(int source, int peer, const std::string& which) {
  throw InvalidArgument(which + ": expected rank " + std::to_string(peer) +
                        "'s heap to be free for a Buffer of rank " + std::to_string(source) +
                        ", got one that another live Buffer of rank " + std::to_string(source) +
                        " is connected to (two Buffers on one heap would overwrite each "
                        "other's signals); destroy the first, or make a new Buffer on every rank");
}

void claim_connections(const std::vector<HeapIdentity*>& identities, int source, uint64_t claimant) {
  for (size_t peer = 0; peer < identities.size(); ++peer) {
    if (!identities[peer] || static_cast<int>(peer) == source) continue;
    if (claim_connection(*identities[peer], source, claimant) != 0) {
      for (size_t claimed = 0; claimed < peer; ++claimed) {
        if (identities[claimed] && static_cast<int>(claimed) != source) {
          release_connection(*identities[claimed], source, claimant);
        }
      }
      throw_heap_taken(source, static_cast<int>(peer), "all_handles[" + std::to_string(peer) + "]");
    }
  }
}

void release_connections(const std::vector<HeapIdentity*>& identities, int source, uint64_t claimant) {
  for (size_t peer = 0; peer < identities.size(); ++peer) {
    if (identities[peer] && static_cast<int>(peer) != source)
      release_connection(*identities[peer], source, claimant);
  }
}

void check_heap_identity(const HeapIdentity& found, const ExpectedHeap& expected, const std::string& which) {
  const std::string prefix = which + ": the heap behind the handle ";
  if (std::memcmp(found.magic, kHeapMagic, sizeof(kHeapMagic)) != 0) {
    throw InvalidArgument(prefix + "is not a switchyard heap (expected its identity page, got other bytes)");
  }
  if (found.version != kHeapIdentityVersion) {
    throw InvalidArgument(prefix + "has identity version " + std::to_string(found.version) + ", expected " +
                          std::to_string(kHeapIdentityVersion));
  }
  if (found.nonce != expected.nonce) {
    throw InvalidArgument(prefix +
                          "is another heap than the one the handle was made for (nonce mismatch: a "
                          "stale or forged handle)");
  }
  if (found.rank != expected.rank) {
    throw InvalidArgument(prefix + "belongs to rank " + std::to_string(found.rank) + ", expected rank " +
                          std::to_string(expected.rank));
  }
  if (found.num_ranks != expected.num_ranks) {
    throw InvalidArgument(prefix + "was made for " + std::to_string(found.num_ranks) + " ranks, expected " +
                          std::to_string(expected.num_ranks));
  }
  if (found.heap_bytes != expected.heap_bytes) {
    throw InvalidArgument(prefix + "holds " + std::to_string(found.heap_bytes) + " bytes, expected " +
                          std::to_string(expected.heap_bytes));
  }
}

}  // namespace switchyard::detail
