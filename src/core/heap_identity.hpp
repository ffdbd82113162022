#pragma once
// The identity page at the start of every rank's heap allocation, and the check a peer makes before
// it trusts a mapping. A handle is bytes from another rank (or from anyone): its payload names a
// segment, an IPC handle or an address, and nothing about that says the memory behind it is the heap
// the handle's header describes. So each heap begins with this page, and connect() compares it with
// the handle (a random nonce, the rank, the rank count and the size) before it uses any of the heap.
// The heap the engines see starts one page later, so the page never moves their alignment.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/sym_heap.hpp"

namespace switchyard::detail {

// NOTES: one page keeps the engines' heap 4096-aligned, as the allocation is.
constexpr size_t kHeapIdentityBytes = 4096;

struct HeapIdentity {
  char magic[8];  // "SWYDHEAP"
  uint32_t version;
  int32_t rank;
  int32_t num_ranks;
  int32_t reserved;
  uint64_t nonce;       // drawn when the heap is made and carried in its handle
  uint64_t heap_bytes;  // the engines' heap, after this page
  uint64_t owner_pid;
  // CPU shared memory: the peers that have mapped the segment. The one that brings it to
  // num_ranks - 1 unlinks the segment's name, after which the memory lives exactly as long as its
  // mappings, so a rank killed later leaves nothing behind in /dev/shm.
  int32_t peers_mapped;
  int32_t reserved_after_count;
  // Per source rank: the nonce of the heap of the Buffer of that rank that connected to this heap (0:
  // none). A second live Buffer of the same rank would write the same signal words as the first;
  // connect() refuses it. The connecting Buffer clears its slot when it is destroyed.
  uint64_t connected_by[common::kMaxMappedRanks];
};
static_assert(sizeof(HeapIdentity) <= kHeapIdentityBytes, "the identity must fit its page");

// A nonce for a new heap: unpredictable, and never 0 (0 is what a zeroed page holds).
uint64_t new_heap_nonce();

HeapIdentity make_heap_identity(uint64_t nonce, int rank, int num_ranks, size_t heap_bytes);

// What a peer expects to find in the identity page behind a handle.
struct ExpectedHeap {
  uint64_t nonce;
  int rank;
  int num_ranks;
  size_t heap_bytes;
};

// Claims `identity`'s slot of `source` for the Buffer whose heap nonce is `claimant` (a host atomic:
// the identity is host memory, this process's or shared). Returns the nonce already there when
// another Buffer holds it (nothing claimed), else 0.
uint64_t claim_connection(HeapIdentity& identity, int source, uint64_t claimant);
// Gives the slot back if `claimant` still holds it.
void release_connection(HeapIdentity& identity, int source, uint64_t claimant);
// The refusal of a heap whose slot of `source` another live Buffer holds.
[[noreturn]] void throw_heap_taken(int source, int peer, const std::string& which);
// Claims the slot of `source` in every peer's identity that is given (`identities[peer]`, null for
// peers claimed another way and for `source` itself). All or nothing: when one is held by another
// Buffer, the ones claimed are given back and InvalidArgument names that peer's handle.
void claim_connections(const std::vector<HeapIdentity*>& identities, int source, uint64_t claimant);
// Gives back every given slot that `claimant` holds.
void release_connections(const std::vector<HeapIdentity*>& identities, int source, uint64_t claimant);

// Throws InvalidArgument, prefixed by `which` (e.g. "all_handles[2]") and naming the first field
// that differs, unless `found` is the identity of the heap `expected` describes.
void check_heap_identity(const HeapIdentity& found, const ExpectedHeap& expected, const std::string& which);

}  // namespace switchyard::detail
