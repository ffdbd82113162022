#include "cpu/backend/host_heap.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "core/heap_identity.hpp"
#include "core/heap_registry.hpp"
#include "switchyard/errors.hpp"

namespace switchyard::cpu {

// What a CPU handle carries after core's header.
struct HostHeapPayload {
  uint64_t pid;
  uint64_t address;   // of the engines' heap; valid in the owner's process only
  uint64_t nonce;     // the heap's identity page holds the same
  char shm_name[64];  // empty for HeapSharing::threads
};

namespace {

constexpr size_t kHeapAlignment = 4096;

std::string errno_text() {
  return std::strerror(errno);
}

}  // namespace

HostHeap::HostHeap(size_t bytes, int rank, int num_ranks, HeapSharing sharing)
    : bytes_(bytes),
      rank_(rank),
      num_ranks_(num_ranks),
      sharing_(sharing),
      nonce_(detail::new_heap_nonce()),
      peer_mappings_(num_ranks, nullptr) {
  const size_t allocation = detail::kHeapIdentityBytes + bytes_;
  uint8_t* allocation_base = nullptr;
  if (sharing_ == HeapSharing::threads) {
    void* pointer = nullptr;
    if (posix_memalign(&pointer, kHeapAlignment, allocation) != 0) {
      throw SystemError("cpu heap: could not allocate " + std::to_string(allocation) + " bytes");
    }
    allocation_base = static_cast<uint8_t*>(pointer);
    std::memset(allocation_base, 0, allocation);  // barrier words start at 0
    storage_ = std::shared_ptr<void>(pointer, [](void* p) { std::free(p); });
  } else {
    static std::atomic<uint64_t> counter{0};
    shm_name_ = "/switchyard-" + std::to_string(getpid()) + "-" + std::to_string(counter++) + "-r" +
                std::to_string(rank_);
    int fd = shm_open(shm_name_.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0) throw SystemError("cpu heap: shm_open(" + shm_name_ + ") failed: " + errno_text());
    if (ftruncate(fd, static_cast<off_t>(allocation)) != 0) {
      std::string why = errno_text();
      close(fd);
      shm_unlink(shm_name_.c_str());
      throw SystemError("cpu heap: ftruncate(" + shm_name_ + ", " + std::to_string(allocation) +
                        ") failed: " + why);
    }
    void* pointer = mmap(nullptr, allocation, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (pointer == MAP_FAILED) {
      shm_unlink(shm_name_.c_str());
      throw SystemError("cpu heap: mmap of " + shm_name_ + " failed: " + errno_text());
    }
    allocation_base = static_cast<uint8_t*>(pointer);  // ftruncate zero-fills
    name_linked_ = true;
  }
  identity_ = reinterpret_cast<detail::HeapIdentity*>(allocation_base);
  *identity_ = detail::make_heap_identity(nonce_, rank, num_ranks, bytes_);
  base_ = allocation_base + detail::kHeapIdentityBytes;
  if (sharing_ == HeapSharing::threads) {
    // The identity page lives in the heap's own allocation: it shares the heap's lifetime.
    detail::register_thread_heap(base_, storage_, std::shared_ptr<detail::HeapIdentity>(storage_, identity_),
                                 num_ranks - 1);
  }
  view_.base = base_;
  view_.bytes = bytes_;
  view_.rank = rank;
  view_.num_ranks = num_ranks;
}

HostHeap::~HostHeap() {
  // Every peer heap is still mapped (held, with threads): give the slots back for a later Buffer.
  if (claimed_) detail::release_connections(peer_identities(), rank_, nonce_);
  if (sharing_ == HeapSharing::threads) return;  // storage_ frees it once no peer maps it
  const size_t allocation = detail::kHeapIdentityBytes + bytes_;
  for (int peer = 0; peer < static_cast<int>(peer_mappings_.size()); ++peer) {
    if (peer_mappings_[peer]) munmap(peer_mappings_[peer], allocation);
  }
  munmap(identity_, allocation);
  // A peer normally unlinked the name at connect; this covers a buffer that never got that far.
  if (name_linked_) shm_unlink(shm_name_.c_str());
}

Bytes HostHeap::local_handle() const {
  HostHeapPayload payload{};
  payload.pid = static_cast<uint64_t>(getpid());
  payload.address = reinterpret_cast<uint64_t>(base_);
  payload.nonce = nonce_;
  std::strncpy(payload.shm_name, shm_name_.c_str(), sizeof(payload.shm_name) - 1);
  Bytes bytes(sizeof(payload));
  std::memcpy(bytes.data(), &payload, sizeof(payload));
  return bytes;
}

void HostHeap::connect(const std::vector<Bytes>& payloads) {
  std::vector<HostHeapPayload> peers(payloads.size());
  for (int peer = 0; peer < static_cast<int>(payloads.size()); ++peer) {
    const std::string which = "all_handles[" + std::to_string(peer) + "]";
    if (payloads[peer].size() != sizeof(HostHeapPayload)) {
      throw InvalidArgument(which + ": expected a cpu heap handle of " +
                            std::to_string(sizeof(HostHeapPayload)) + " payload bytes, got " +
                            std::to_string(payloads[peer].size()));
    }
    std::memcpy(&peers[peer], payloads[peer].data(), sizeof(HostHeapPayload));
    peers[peer].shm_name[sizeof(peers[peer].shm_name) - 1] = '\0';
    const detail::ExpectedHeap expected{peers[peer].nonce, peer, num_ranks_, bytes_};
    uint8_t* peer_base = nullptr;
    if (peer == rank_) {
      detail::check_heap_identity(*identity_, expected, which);
      peer_base = base_;
    } else if (sharing_ == HeapSharing::threads) {
      peer_base = connect_thread_peer(peers[peer], expected, which);
    } else {
      peer_base = map_process_peer(peer, peers[peer], expected, which);
    }
    view_.peer_offset[peer] =
        static_cast<int64_t>(reinterpret_cast<uintptr_t>(peer_base) - reinterpret_cast<uintptr_t>(base_));
  }
  claim_peer_heaps();
  if (sharing_ == HeapSharing::processes) release_segment_names(peers);
}

std::vector<detail::HeapIdentity*> HostHeap::peer_identities() const {
  std::vector<detail::HeapIdentity*> identities(num_ranks_);
  for (int peer = 0; peer < num_ranks_; ++peer) {
    identities[peer] =
        reinterpret_cast<detail::HeapIdentity*>(view_.peer_base(peer) - detail::kHeapIdentityBytes);
  }
  return identities;
}

void HostHeap::claim_peer_heaps() {
  detail::claim_connections(peer_identities(), rank_, nonce_);
  claimed_ = true;
}

uint8_t* HostHeap::connect_thread_peer(const HostHeapPayload& payload, const detail::ExpectedHeap& expected,
                                       const std::string& which) {
  if (payload.pid != static_cast<uint64_t>(getpid())) {
    throw InvalidArgument(
        which + ": expected a handle from this process (HeapSharing::threads), got one from pid " +
        std::to_string(payload.pid) + "; use HeapSharing::processes for one process per rank");
  }
  uint8_t* peer_base = reinterpret_cast<uint8_t*>(payload.address);
  // The registry is asked first: only the address of a live heap of this process may be read.
  detail::ThreadHeap heap = detail::connect_thread_heap(peer_base);
  if (!heap.storage) {
    throw InvalidArgument(which +
                          ": expected the handle of a live buffer of this process, got one whose heap "
                          "is unknown (not made by Buffer::local_handle in this process)");
  }
  detail::check_heap_identity(*heap.identity, expected, which);
  peer_storage_.push_back(std::move(heap.storage));
  return peer_base;
}

uint8_t* HostHeap::map_process_peer(int peer, const HostHeapPayload& payload,
                                    const detail::ExpectedHeap& expected, const std::string& which) {
  const size_t allocation = detail::kHeapIdentityBytes + bytes_;
  const std::string name(payload.shm_name);
  if (name.rfind("/switchyard-", 0) != 0) {
    throw InvalidArgument(which + ": expected a switchyard shared-memory heap name (/switchyard-...), got '" +
                          name + "'");
  }
  int fd = shm_open(name.c_str(), O_RDWR, 0600);
  if (fd < 0) {
    throw InvalidArgument(which + ": expected a live shared-memory heap '" + name +
                          "', got shm_open error: " + errno_text());
  }
  // NOTES: a mapping longer than its file raises SIGBUS on first touch, so the size is checked first.
  struct stat status {};
  if (fstat(fd, &status) != 0) {
    std::string why = errno_text();
    close(fd);
    throw SystemError("cpu heap: fstat of peer heap " + name + " failed: " + why);
  }
  if (static_cast<uint64_t>(status.st_size) != allocation) {
    close(fd);
    throw InvalidArgument(which + ": expected the shared-memory heap '" + name + "' to hold " +
                          std::to_string(allocation) + " bytes (its identity page and the heap), got " +
                          std::to_string(status.st_size));
  }
  void* pointer = mmap(nullptr, allocation, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (pointer == MAP_FAILED)
    throw SystemError("cpu heap: mmap of peer heap " + name + " failed: " + errno_text());
  // A connect that was refused earlier may have mapped this peer already: that mapping goes first.
  if (peer_mappings_[peer]) munmap(peer_mappings_[peer], allocation);
  peer_mappings_[peer] = pointer;  // unmapped by the destructor, also when the check below throws
  detail::check_heap_identity(*static_cast<const detail::HeapIdentity*>(pointer), expected, which);
  return static_cast<uint8_t*>(pointer) + detail::kHeapIdentityBytes;
}

void HostHeap::release_segment_names(const std::vector<HostHeapPayload>& peers) {
  // Only once every peer's heap has passed its check: a connect that throws counts nothing.
  for (int peer = 0; peer < num_ranks_; ++peer) {
    if (peer == rank_) continue;
    auto* identity = static_cast<detail::HeapIdentity*>(peer_mappings_[peer]);
    const int32_t mapped = __atomic_add_fetch(&identity->peers_mapped, 1, __ATOMIC_ACQ_REL);
    if (mapped == num_ranks_ - 1) shm_unlink(peers[peer].shm_name);
  }
  // Alone, no peer will ever map this heap.
  if (num_ranks_ == 1 && name_linked_) {
    shm_unlink(shm_name_.c_str());
    name_linked_ = false;
  }
}

}  // namespace switchyard::cpu
