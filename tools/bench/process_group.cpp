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

// How long a rank at a barrier polls (yielding) before it sleeps between looks: longer than a timed
// phase's usual wait for the last rank (the cache eviction, a stream drain), far shorter than a reference
// check's.
constexpr std::chrono::milliseconds kSpinBeforeSleeping{20};

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
  const auto start = std::chrono::steady_clock::now();
  const auto deadline = start + std::chrono::duration<double>(wait_seconds_);
  const auto stop_spinning = start + kSpinBeforeSleeping;
  // NOTES: the ranks leave together only if every waiter is awake when the last one arrives: each waiter
  // polls, yielding its core at every turn (R processes may share two cores), for kSpinBeforeSleeping, and
  // sleeps between looks only after that. Until session 34 it slept after a thousand polls (a few us), and
  // sleep_for(20 us) oversleeps by the kernel's timer slack (50 us): the ranks left a barrier up to ~70 us
  // apart, and the first ones' timed phases then waited on the device for the last (the normal notify's
  // %globaltimer stamps, s34 c1: 8 processes' notify entries spread over 0-72 us).
  for (int looks = 0; shared_->generation.load() == generation; ++looks) {
    throw_if_aborted();
    const auto now = std::chrono::steady_clock::now();
    if (now > deadline) {
      abort("a rank waited more than " + std::to_string(wait_seconds_) + " s at a barrier");
      throw_if_aborted();
    }
    if (now < stop_spinning) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
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
