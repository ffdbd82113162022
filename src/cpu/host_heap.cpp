#include "cpu/host_heap.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "core/heap_registry.hpp"
#include "switchyard/errors.hpp"

namespace switchyard::cpu {

namespace {

// What a CPU handle carries after core's header.
struct HostHeapPayload {
  uint64_t pid;
  uint64_t address;    // valid in the owner's process only
  char shm_name[64];   // empty for HeapSharing::threads
};

constexpr size_t kHeapAlignment = 4096;

std::string errno_text() { return std::strerror(errno); }

}  // namespace

HostHeap::HostHeap(size_t bytes, int rank, int num_ranks, HeapSharing sharing)
    : bytes_(bytes), rank_(rank), sharing_(sharing), peer_mappings_(num_ranks, nullptr) {
  if (sharing_ == HeapSharing::threads) {
    void* pointer = nullptr;
    if (posix_memalign(&pointer, kHeapAlignment, bytes_) != 0) {
      throw SystemError("cpu heap: could not allocate " + std::to_string(bytes_) + " bytes");
    }
    base_ = static_cast<uint8_t*>(pointer);
    std::memset(base_, 0, bytes_);  // barrier words start at 0
    storage_ = std::shared_ptr<void>(pointer, [](void* p) { std::free(p); });
    detail::register_thread_heap(base_, storage_, num_ranks - 1);
  } else {
    static std::atomic<uint64_t> counter{0};
    shm_name_ = "/switchyard-" + std::to_string(getpid()) + "-" + std::to_string(counter++) + "-r" +
                std::to_string(rank_);
    int fd = shm_open(shm_name_.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0) throw SystemError("cpu heap: shm_open(" + shm_name_ + ") failed: " + errno_text());
    if (ftruncate(fd, static_cast<off_t>(bytes_)) != 0) {
      std::string why = errno_text();
      close(fd);
      shm_unlink(shm_name_.c_str());
      throw SystemError("cpu heap: ftruncate(" + shm_name_ + ", " + std::to_string(bytes_) + ") failed: " + why);
    }
    void* pointer = mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (pointer == MAP_FAILED) {
      shm_unlink(shm_name_.c_str());
      throw SystemError("cpu heap: mmap of " + shm_name_ + " failed: " + errno_text());
    }
    base_ = static_cast<uint8_t*>(pointer);  // ftruncate zero-fills
  }
  view_.base = base_;
  view_.bytes = bytes_;
  view_.rank = rank;
  view_.num_ranks = num_ranks;
}

HostHeap::~HostHeap() {
  if (sharing_ == HeapSharing::threads) return;  // storage_ frees it once no peer maps it
  for (int peer = 0; peer < static_cast<int>(peer_mappings_.size()); ++peer) {
    if (peer_mappings_[peer]) munmap(peer_mappings_[peer], bytes_);
  }
  munmap(base_, bytes_);
  shm_unlink(shm_name_.c_str());
}

Bytes HostHeap::local_handle() const {
  HostHeapPayload payload{};
  payload.pid = static_cast<uint64_t>(getpid());
  payload.address = reinterpret_cast<uint64_t>(base_);
  std::strncpy(payload.shm_name, shm_name_.c_str(), sizeof(payload.shm_name) - 1);
  Bytes bytes(sizeof(payload));
  std::memcpy(bytes.data(), &payload, sizeof(payload));
  return bytes;
}

void HostHeap::connect(const std::vector<Bytes>& payloads) {
  const uint64_t my_pid = static_cast<uint64_t>(getpid());
  for (int peer = 0; peer < static_cast<int>(payloads.size()); ++peer) {
    std::string which = "all_handles[" + std::to_string(peer) + "]";
    if (payloads[peer].size() != sizeof(HostHeapPayload)) {
      throw InvalidArgument(which + ": expected a cpu heap handle of " + std::to_string(sizeof(HostHeapPayload)) +
                            " payload bytes, got " + std::to_string(payloads[peer].size()));
    }
    HostHeapPayload payload{};
    std::memcpy(&payload, payloads[peer].data(), sizeof(payload));
    uint8_t* peer_base = nullptr;
    if (peer == rank_) {
      peer_base = base_;
    } else if (sharing_ == HeapSharing::threads) {
      if (payload.pid != my_pid) {
        throw InvalidArgument(which + ": expected a handle from this process (HeapSharing::threads), got one from pid " +
                              std::to_string(payload.pid) + "; use HeapSharing::processes for one process per rank");
      }
      peer_base = reinterpret_cast<uint8_t*>(payload.address);
      std::shared_ptr<void> storage = detail::connect_thread_heap(peer_base);
      if (!storage) {
        throw InvalidArgument(which + ": expected the handle of a live buffer of this process, got one whose heap "
                              "is unknown (not made by Buffer::local_handle in this process)");
      }
      peer_storage_.push_back(std::move(storage));
    } else {
      payload.shm_name[sizeof(payload.shm_name) - 1] = '\0';
      int fd = shm_open(payload.shm_name, O_RDWR, 0600);
      if (fd < 0) {
        throw InvalidArgument(which + ": expected a live shared-memory heap '" + std::string(payload.shm_name) +
                              "', got shm_open error: " + errno_text());
      }
      void* pointer = mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      close(fd);
      if (pointer == MAP_FAILED) throw SystemError("cpu heap: mmap of peer heap " + std::string(payload.shm_name) + " failed: " + errno_text());
      peer_base = static_cast<uint8_t*>(pointer);
      peer_mappings_[peer] = peer_base;
    }
    view_.peer_offset[peer] = static_cast<int64_t>(reinterpret_cast<uintptr_t>(peer_base) -
                                                   reinterpret_cast<uintptr_t>(base_));
  }
}

}  // namespace switchyard::cpu
