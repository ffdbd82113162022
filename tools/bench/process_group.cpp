#include "process_group.hpp"

#include <sys/mman.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <new>
#include <thread>

#include "switchyard/errors.hpp"

namespace switchyard::bench {

// At the start of the shared mapping: lock-free atomics work across processes.
struct ProcessGroupState::Shared {
  std::atomic<int> arrived{0};
  std::atomic<uint64_t> generation{0};
  std::atomic<int> aborted{0};
  char abort_reason[512] = {};
  // Then, in the same mapping: each rank's contribution size, then the slots.
};

namespace {

static_assert(std::atomic<int>::is_always_lock_free && std::atomic<uint64_t>::is_always_lock_free,
              "the process group's atomics must be lock-free to work across processes");

// The shared header and each rank's contribution size, rounded up to a cache line.
size_t header_bytes(int size) {
  return (sizeof(ProcessGroupState::Shared) + sizeof(uint32_t) * static_cast<size_t>(size) + 63) / 64 * 64;
}

}  // namespace

ProcessGroupState::ProcessGroupState(int size, double wait_seconds)
    : size_(size), wait_seconds_(wait_seconds) {
  mapped_bytes_ = header_bytes(size) + kSlotBytes * static_cast<size_t>(size);
  void* memory = mmap(nullptr, mapped_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (memory == MAP_FAILED)
    throw SystemError("switchyard-bench: mmap of the process group's shared state failed");
  shared_ = new (memory) Shared();
}

ProcessGroupState::~ProcessGroupState() {
  if (shared_) munmap(shared_, mapped_bytes_);
}

void ProcessGroupState::abort(const std::string& why) {
  int expected = 0;
  if (shared_->aborted.compare_exchange_strong(expected, 1)) {
    std::strncpy(shared_->abort_reason, why.c_str(), sizeof(shared_->abort_reason) - 1);
    shared_->aborted.store(2);
  }
}

void ProcessGroupState::barrier() {
  auto throw_if_aborted = [&] {
    if (shared_->aborted.load() != 0) {
      while (shared_->aborted.load() == 1) std::this_thread::yield();  // the reason is being written
      throw Error(std::string("switchyard-bench: another rank failed: ") + shared_->abort_reason);
    }
  };
  throw_if_aborted();
  const uint64_t generation = shared_->generation.load();
  if (shared_->arrived.fetch_add(1) + 1 == size_) {
    shared_->arrived.store(0);
    shared_->generation.fetch_add(1);
    return;
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(wait_seconds_);
  // NOTES: spin briefly (ranks usually arrive together), then yield the core: R processes may share
  // two cores.
  for (int spins = 0; shared_->generation.load() == generation; ++spins) {
    throw_if_aborted();
    if (std::chrono::steady_clock::now() > deadline) {
      abort("a rank waited more than " + std::to_string(wait_seconds_) + " s at a barrier");
      throw_if_aborted();
    }
    if (spins > 1000) std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

std::vector<Bytes> ProcessGroupState::allgather(int rank, const Bytes& mine) {
  if (mine.size() > kSlotBytes) {
    throw Error("switchyard-bench: an allgather contribution of " + std::to_string(mine.size()) +
                " bytes exceeds the process group's slot of " + std::to_string(kSlotBytes));
  }
  uint8_t* base = reinterpret_cast<uint8_t*>(shared_);
  uint32_t* slot_sizes = reinterpret_cast<uint32_t*>(base + sizeof(Shared));
  uint8_t* slots = base + header_bytes(size_);
  if (!mine.empty()) std::memcpy(slots + kSlotBytes * static_cast<size_t>(rank), mine.data(), mine.size());
  slot_sizes[rank] = static_cast<uint32_t>(mine.size());
  barrier();  // every slot written (the barrier's atomics order the plain stores before the reads)
  std::vector<Bytes> all(static_cast<size_t>(size_));
  for (int peer = 0; peer < size_; ++peer) {
    const uint8_t* slot = slots + kSlotBytes * static_cast<size_t>(peer);
    all[peer].assign(slot, slot + slot_sizes[peer]);
  }
  barrier();  // every slot read before any rank's next allgather overwrites it
  return all;
}

}  // namespace switchyard::bench
