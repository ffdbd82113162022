#pragma once
// The PTX wrappers the `symmetric` engine adds to cuda/ptx.cuh, one per instruction, named after
// their memory semantics (scope and order) so the ordering is visible at the call site.
#include <cstdint>

#include "cuda/ptx.cuh"

namespace switchyard::cuda::ptx {

// ---- signal words and counters ----
__device__ __forceinline__ int32_t ld_acquire_sys_s32(const int32_t* address) {
  int32_t value;
  asm volatile("ld.acquire.sys.global.s32 %0, [%1];" : "=r"(value) : "l"(address) : "memory");
  return value;
}

__device__ __forceinline__ void red_add_release_sys_s32(int32_t* address, int32_t value) {
  asm volatile("red.release.sys.global.add.s32 [%0], %1;" ::"l"(address), "r"(value) : "memory");
}

__device__ __forceinline__ uint64_t atom_add_release_gpu_u64(uint64_t* address, uint64_t value) {
  uint64_t old;
  asm volatile("atom.release.gpu.global.add.u64 %0, [%1], %2;" : "=l"(old) : "l"(address), "l"(value) : "memory");
  return old;
}

// The pull combine's exit count: releases this block's work (its loads are consumed) and, for the last
// block, acquires every other block's.
__device__ __forceinline__ uint64_t atom_add_acq_rel_gpu_u64(uint64_t* address, uint64_t value) {
  uint64_t old;
  asm volatile("atom.acq_rel.gpu.global.add.u64 %0, [%1], %2;" : "=l"(old) : "l"(address), "l"(value) : "memory");
  return old;
}

__device__ __forceinline__ uint64_t ld_acquire_gpu_u64(const uint64_t* address) {
  uint64_t value;
  asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(value) : "l"(address) : "memory");
  return value;
}

// ---- mbarrier ----
// A plain arrival (no transaction bytes): the pipeline's terminator and its "stage free" signal.
__device__ __forceinline__ void mbarrier_arrive(uint64_t* barrier) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_address(barrier)) : "memory");
}

// ---- bulk async-group (TMA stores) ----
// Waits until at most `kPending` of the most recent bulk groups are still reading shared memory.
template <int kPending>
__device__ __forceinline__ void bulk_wait_group_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(kPending) : "memory");
}

// ---- L2 cache hints (TMA stores) ----
// A policy that marks the lines it covers first to be evicted from L2: data written once and not read
// again by this kernel (recv_x; the expert GEMM reads it later, from HBM anyway at 4096 tokens).
__device__ __forceinline__ uint64_t create_policy_evict_first() {
  uint64_t policy;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
  return policy;
}

// tma_store_1d with an L2 cache policy (create_policy_evict_first).
__device__ __forceinline__ void tma_store_1d_hinted(void* global_destination, const void* smem_source, uint32_t bytes,
                                                    uint64_t policy) {
  asm volatile("cp.async.bulk.global.shared::cta.bulk_group.L2::cache_hint [%0], [%1], %2, %3;" ::"l"(
                   global_destination),
               "r"(smem_address(smem_source)), "r"(bytes), "l"(policy)
               : "memory");
}

// ---- vector loads ----
// Coherent 16-byte load that skips L1: data written by peers in this kernel (acquired first) and
// read once.
__device__ __forceinline__ int4 ld_v4_no_allocate(const void* pointer) {
  int4 value;
  asm volatile("ld.global.L1::no_allocate.v4.s32 {%0, %1, %2, %3}, [%4];"
               : "=r"(value.x), "=r"(value.y), "=r"(value.z), "=r"(value.w)
               : "l"(pointer)
               : "memory");
  return value;
}

__device__ __forceinline__ uint32_t lanemask_lt() {
  uint32_t mask;
  asm("mov.u32 %0, %%lanemask_lt;" : "=r"(mask));
  return mask;
}

}  // namespace switchyard::cuda::ptx
