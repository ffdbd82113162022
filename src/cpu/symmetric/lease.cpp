#include "cpu/symmetric/lease.hpp"

namespace switchyard::cpu {

namespace {

constexpr uint64_t kLeaseReaders = 0xffff;
constexpr uint64_t kLeaseWithdrawn = uint64_t{1} << 16;
constexpr int kLeaseCallShift = 17;

}  // namespace

uint64_t open_lease(uint64_t sequence) {
  return sequence << kLeaseCallShift;
}

bool take_lease(uint64_t* lease, uint64_t sequence) {
  uint64_t word = __atomic_load_n(lease, __ATOMIC_ACQUIRE);
  for (;;) {
    if ((word >> kLeaseCallShift) != sequence || (word & kLeaseWithdrawn) != 0) return false;
    if (__atomic_compare_exchange_n(lease, &word, word + 1, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
      return true;
  }
}

void return_lease(uint64_t* lease) {
  __atomic_fetch_sub(lease, 1, __ATOMIC_RELEASE);
}

void withdraw_lease(uint64_t* lease) {
  __atomic_fetch_or(lease, kLeaseWithdrawn, __ATOMIC_ACQ_REL);
  while ((__atomic_load_n(lease, __ATOMIC_ACQUIRE) & kLeaseReaders) != 0) {
    // Holders are reading (no waits inside a lease): this ends.
  }
}

}  // namespace switchyard::cpu
