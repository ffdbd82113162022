#pragma once
// Acquire/release accessors on plain memory words, named after their memory semantics so the
// ordering is visible at the call site. System scope: peers may be other threads, processes or
// GPUs. Host code uses the GCC/Clang __atomic builtins (valid on shared memory mapped by several
// processes); device code uses the PTX equivalents.
#include "common/host_device.hpp"

namespace switchyard::common {

SY_HD uint64_t ld_acquire_sys(const uint64_t* address) {
#if defined(__CUDA_ARCH__)
  uint64_t value;
  asm volatile("ld.acquire.sys.u64 %0, [%1];" : "=l"(value) : "l"(address) : "memory");
  return value;
#else
  return __atomic_load_n(address, __ATOMIC_ACQUIRE);
#endif
}

SY_HD void st_release_sys(uint64_t* address, uint64_t value) {
#if defined(__CUDA_ARCH__)
  asm volatile("st.release.sys.u64 [%0], %1;" ::"l"(address), "l"(value) : "memory");
#else
  __atomic_store_n(address, value, __ATOMIC_RELEASE);
#endif
}

SY_HD void red_add_release_sys(uint64_t* address, uint64_t value) {
#if defined(__CUDA_ARCH__)
  asm volatile("red.release.sys.add.u64 [%0], %1;" ::"l"(address), "l"(value) : "memory");
#else
  __atomic_fetch_add(address, value, __ATOMIC_RELEASE);
#endif
}

SY_HD uint64_t ld_relaxed_sys(const uint64_t* address) {
#if defined(__CUDA_ARCH__)
  uint64_t value;
  asm volatile("ld.relaxed.sys.u64 %0, [%1];" : "=l"(value) : "l"(address) : "memory");
  return value;
#else
  return __atomic_load_n(address, __ATOMIC_RELAXED);
#endif
}

// The 32-bit words of a host-mapped mailbox (common/posted_counts.hpp).
SY_HD int32_t ld_acquire_sys(const int32_t* address) {
#if defined(__CUDA_ARCH__)
  int32_t value;
  asm volatile("ld.acquire.sys.s32 %0, [%1];" : "=r"(value) : "l"(address) : "memory");
  return value;
#else
  return __atomic_load_n(address, __ATOMIC_ACQUIRE);
#endif
}

SY_HD void st_release_sys(int32_t* address, int32_t value) {
#if defined(__CUDA_ARCH__)
  asm volatile("st.release.sys.s32 [%0], %1;" ::"l"(address), "r"(value) : "memory");
#else
  __atomic_store_n(address, value, __ATOMIC_RELEASE);
#endif
}

}  // namespace switchyard::common
