#pragma once
// One thin wrapper per PTX instruction the kernels use, named after its memory semantics.
#include <cstdint>

namespace switchyard::cuda::ptx {

__device__ __forceinline__ uint64_t globaltimer_ns() {
  uint64_t now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  return now;
}

// ---- programmatic dependent launch (cuda/backend/dependent_launch.hpp) ----
// Returns once the grid this one was launched behind has completed and its memory is visible to this grid;
// at once for a grid launched the ordinary way. Every kernel launched by launch_dependent calls it before its
// first global access (a load of an input, or a store the previous kernel could still read).
__device__ __forceinline__ void wait_for_previous_grid() {
  asm volatile("griddepcontrol.wait;" ::: "memory");
}

// Lets the grid launched behind this one as a programmatic dependent start now rather than when this grid
// ends; that grid's wait_for_previous_grid() still waits for this grid's completion. The engines never
// trigger early (their dependents start at their end); tests use it to prove the wait holds.
__device__ __forceinline__ void allow_dependents_to_start() {
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}

__device__ __forceinline__ uint32_t smem_address(const void* pointer) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(pointer));
}

// ---- a block's warps handing progress to each other through shared memory (CTA scope) ----
// NOTES: atomics rather than ld.acquire / st.release: compute-sanitizer's racecheck reports a plain (even
// acquire) load of a word another warp stores as a hazard; atomic accesses are not hazards to it.
__device__ __forceinline__ uint64_t atom_load_acquire_cta_shared_u64(const uint64_t* address) {
  uint64_t value;
  asm volatile("atom.acquire.cta.shared::cta.or.b64 %0, [%1], 0;"
               : "=l"(value)
               : "r"(smem_address(address))
               : "memory");
  return value;
}

__device__ __forceinline__ void atom_store_release_cta_shared_u64(uint64_t* address, uint64_t value) {
  asm volatile("atom.release.cta.shared::cta.exch.b64 _, [%0], %1;" ::"r"(smem_address(address)), "l"(value)
               : "memory");
}

// ---- mbarrier (completion of TMA loads) ----
__device__ __forceinline__ void mbarrier_init(uint64_t* barrier, uint32_t arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_address(barrier)), "r"(arrivals)
               : "memory");
}

__device__ __forceinline__ void fence_mbarrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

__device__ __forceinline__ void mbarrier_arrive_expect_tx(uint64_t* barrier, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_address(barrier)),
               "r"(bytes)
               : "memory");
}

__device__ __forceinline__ bool mbarrier_try_wait_parity(uint64_t* barrier, uint32_t phase) {
  uint32_t done;
  asm volatile(
      "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}"
      : "=r"(done)
      : "r"(smem_address(barrier)), "r"(phase)
      : "memory");
  return done != 0;
}

// ---- TMA 1D bulk copies ----
// global -> shared, completing `bytes` on the mbarrier. Addresses 16-byte aligned, bytes % 16 == 0.
__device__ __forceinline__ void tma_load_1d(void* smem_destination, const void* global_source, uint32_t bytes,
                                            uint64_t* barrier) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
          smem_address(smem_destination)),
      "l"(global_source), "r"(bytes), "r"(smem_address(barrier))
      : "memory");
}

// shared -> global, tracked by the bulk async-group of the issuing thread.
__device__ __forceinline__ void tma_store_1d(void* global_destination, const void* smem_source,
                                             uint32_t bytes) {
  asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(global_destination),
               "r"(smem_address(smem_source)), "r"(bytes)
               : "memory");
}

__device__ __forceinline__ void tma_store_commit() {
  asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}

// Waits until the stores issued so far have finished reading shared memory (it may be reused).
__device__ __forceinline__ void tma_store_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
}

// Waits until the stores issued so far are complete (visible in global memory).
__device__ __forceinline__ void tma_store_wait_all() {
  asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
}

// Waits until all but the most recent bulk async-group have finished reading shared memory.
__device__ __forceinline__ void tma_store_wait_read_all_but_one() {
  asm volatile("cp.async.bulk.wait_group.read 1;" ::: "memory");
}

// Orders this thread's generic-proxy writes to shared memory before later async-proxy (TMA) reads
// of it, e.g. a TMA store of what the thread just wrote.
__device__ __forceinline__ void fence_proxy_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

// Orders generic-proxy accesses to global memory (e.g. a peer's stores we acquired) with later
// async-proxy (TMA) accesses.
__device__ __forceinline__ void fence_proxy_async_global() {
  asm volatile("fence.proxy.async.global;" ::: "memory");
}

// ---- vector loads ----
// Weak (no ordering of their own: what they read was published before an acquire the caller made).
// Read-only data through the non-coherent path, not allocated in L1: inputs read once.
__device__ __forceinline__ int4 ld_weak_nc_v4(const int4* pointer) {
  int4 value;
  asm volatile("ld.global.nc.L1::no_allocate.v4.s32 {%0, %1, %2, %3}, [%4];"
               : "=r"(value.x), "=r"(value.y), "=r"(value.z), "=r"(value.w)
               : "l"(pointer));
  return value;
}

// Read-only data through the non-coherent path, allocated in L1: a row that the block's other warps
// read again soon (a token the dispatch sends to several ranks, one warp group per rank).
__device__ __forceinline__ int4 ld_nc_v4(const int4* pointer) {
  int4 value;
  asm volatile("ld.global.nc.v4.s32 {%0, %1, %2, %3}, [%4];"
               : "=r"(value.x), "=r"(value.y), "=r"(value.z), "=r"(value.w)
               : "l"(pointer));
  return value;
}

__device__ __forceinline__ void fence_acq_rel_sys() {
  asm volatile("fence.acq_rel.sys;" ::: "memory");
}

// Its GPU-scope twin: orders this thread's writes for every thread of this GPU (device/peer_signal.cuh uses
// it where every rank's heap is on this GPU).
__device__ __forceinline__ void fence_acq_rel_gpu() {
  asm volatile("fence.acq_rel.gpu;" ::: "memory");
}

// ---- the symmetric engine's: signal words, counters, mbarriers and hinted TMA ----

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
  asm volatile("atom.release.gpu.global.add.u64 %0, [%1], %2;"
               : "=l"(old)
               : "l"(address), "l"(value)
               : "memory");
  return old;
}

// The pull combine's exit count: releases this block's work (its loads are consumed) and, for the last
// block, acquires every other block's.
__device__ __forceinline__ uint64_t atom_add_acq_rel_gpu_u64(uint64_t* address, uint64_t value) {
  uint64_t old;
  asm volatile("atom.acq_rel.gpu.global.add.u64 %0, [%1], %2;"
               : "=l"(old)
               : "l"(address), "l"(value)
               : "memory");
  return old;
}

__device__ __forceinline__ uint64_t ld_acquire_gpu_u64(const uint64_t* address) {
  uint64_t value;
  asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(value) : "l"(address) : "memory");
  return value;
}

__device__ __forceinline__ void st_release_gpu_u64(uint64_t* address, uint64_t value) {
  asm volatile("st.release.gpu.global.u64 [%0], %1;" ::"l"(address), "l"(value) : "memory");
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
__device__ __forceinline__ void tma_store_1d_hinted(void* global_destination, const void* smem_source,
                                                    uint32_t bytes, uint64_t policy) {
  asm volatile("cp.async.bulk.global.shared::cta.bulk_group.L2::cache_hint [%0], [%1], %2, %3;" ::"l"(
                   global_destination),
               "r"(smem_address(smem_source)), "r"(bytes), "l"(policy)
               : "memory");
}

// A weak, coherent 16-byte load that skips L1: data a peer wrote before the signal the caller
// acquired (possibly during this kernel), read once.
__device__ __forceinline__ int4 ld_weak_no_allocate_v4(const void* pointer) {
  int4 value;
  asm volatile("ld.global.L1::no_allocate.v4.s32 {%0, %1, %2, %3}, [%4];"
               : "=r"(value.x), "=r"(value.y), "=r"(value.z), "=r"(value.w)
               : "l"(pointer)
               : "memory");
  return value;
}
// The same, 8, 4 and 2 bytes wide (LogFMT-10's packed rows: cuda/low_latency/logfmt.cuh).
__device__ __forceinline__ uint2 ld_weak_no_allocate_v2(const void* pointer) {
  uint2 value;
  asm volatile("ld.global.L1::no_allocate.v2.u32 {%0, %1}, [%2];"
               : "=r"(value.x), "=r"(value.y)
               : "l"(pointer)
               : "memory");
  return value;
}
__device__ __forceinline__ uint32_t ld_weak_no_allocate_u32(const void* pointer) {
  uint32_t value;
  asm volatile("ld.global.L1::no_allocate.u32 %0, [%1];" : "=r"(value) : "l"(pointer) : "memory");
  return value;
}
__device__ __forceinline__ uint32_t ld_weak_no_allocate_u16(const void* pointer) {
  uint16_t value;
  asm volatile("ld.global.L1::no_allocate.u16 %0, [%1];" : "=h"(value) : "l"(pointer) : "memory");
  return value;
}

__device__ __forceinline__ uint32_t lanemask_lt() {
  uint32_t mask;
  asm("mov.u32 %0, %%lanemask_lt;" : "=r"(mask));
  return mask;
}

// ---- clusters: a peer CTA's shared memory (distributed shared memory) ----
// This CTA's rank in its cluster.
__device__ __forceinline__ uint32_t cluster_cta_rank() {
  uint32_t rank;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
  return rank;
}

// The shared::cluster address of `smem_address` (this CTA's shared window) in the CTA of rank `cta`.
__device__ __forceinline__ uint32_t map_shared_to_cta(uint32_t smem_address, uint32_t cta) {
  uint32_t mapped;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(mapped) : "r"(smem_address), "r"(cta));
  return mapped;
}

// A 4-byte asynchronous store into a cluster peer's shared memory that completes its 4 bytes on
// `cluster_barrier`, an mbarrier in the same peer (both addresses from map_shared_to_cta): the peer's
// threads that see the barrier's phase complete see the data, as with a TMA load, without a fence here.
__device__ __forceinline__ void st_async_cluster_f32(uint32_t cluster_address, float x,
                                                     uint32_t cluster_barrier) {
  asm volatile(
      "st.async.shared::cluster.mbarrier::complete_tx::bytes.f32 [%0], %1, [%2];" ::"r"(cluster_address),
      "f"(x), "r"(cluster_barrier)
      : "memory");
}

}  // namespace switchyard::cuda::ptx
