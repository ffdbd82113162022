#pragma once
// The `symmetric` engine's TMA copy pipeline: two warps of a block move rows through a ring of
// shared-memory stages.
//   producer (lane 0 of its warp): for each row piece, waits for a free stage, describes the piece
//     in the stage's descriptor and loads it with cp.async.bulk global -> shared (from a local or a
//     mapped peer address), completing on the stage's `full` mbarrier;
//   consumer (its warp): waits for each stage in order, stores the piece with cp.async.bulk
//     shared -> global (a local or a mapped peer address), lets its lanes write the row's extras
//     (scales, top-k ids), and frees the stage on its `empty` mbarrier once the store has read it.
// Several loads and stores are in flight per block at once (as many as there are stages), which is
// what keeps HBM and NVLink busy with one block per SM.
//
// A phase ends with a terminator stage: the consumer then waits until its stores are complete and
// visible, and frees every stage, so the same pipeline (and its mbarrier phases) can run again.
#include "cuda/symmetric/kernels.hpp"
#include "device/bounded_wait.cuh"
#include "device/ptx.cuh"

namespace switchyard::cuda {

// The consumer keeps up to Pipeline::store_read_lag stores reading shared memory before it frees their
// stages (waiting for the newest store each time would serialise store issue); the host picks it per
// call (symmetric_grid, kMaxStoreReadLag in kernels.hpp).
// NOTES: whether the dispatch's pull stores recv_x with an L2 evict_first policy (written once, not read
// again by the kernel), so that the rows being pulled keep L2 to themselves. A tuning knob (plan Step
// 4), off until measured: predicted neutral to +2 % at 4096 tokens (8 ranks read each source row ~7.5
// times on one GPU, so L2 hits on x matter), nothing at 128.
constexpr bool kEvictFirstPullStores = false;

// Waits until at most `pending` (1..kMaxStoreReadLag) of the newest store groups still read shared
// memory (the PTX wait takes its count as an immediate).
template <int kPending = static_cast<int>(kMaxStoreReadLag)>
__device__ __forceinline__ void wait_store_reads(uint32_t pending) {
  if constexpr (kPending <= 1) {
    ptx::bulk_wait_group_read<1>();
  } else {
    if (pending >= static_cast<uint32_t>(kPending)) {
      ptx::bulk_wait_group_read<kPending>();
    } else {
      wait_store_reads<kPending - 1>(pending);
    }
  }
}

enum StageFlags : uint32_t {
  kStageLast = 1u,    // the terminator of a phase: no data
  kStageRowEnd = 2u,  // the last piece of its row: the consumer writes the row's extras
  kStageScales = 4u,  // the row's fp8 scales follow the piece in the stage (at align16(bytes))
};

struct StageDescriptor {
  uint8_t* destination;  // where the consumer stores the piece
  uint32_t bytes;        // piece bytes (multiple of 16)
  uint32_t flags;        // StageFlags
  int64_t row;           // the row (output row or token) the extras are for
};

struct PipelineShared {
  uint64_t full[kMaxPipelineStages];
  uint64_t empty[kMaxPipelineStages];
  StageDescriptor descriptor[kMaxPipelineStages];
};

struct Pipeline {
  PipelineShared* shared;
  uint8_t* stages;  // dynamic shared memory, 128-byte aligned
  uint32_t stage_bytes;
  uint32_t num_stages;
  uint32_t store_read_lag;  // 1..kMaxStoreReadLag, below num_stages (SymmetricGrid::store_read_lag)

  __device__ __forceinline__ uint8_t* stage(uint32_t index) const {
    return stages + static_cast<size_t>(index) * stage_bytes;
  }
};

// One thread initialises the barriers; the block synchronises before either role starts.
__device__ __forceinline__ void init_pipeline(const Pipeline& pipe) {
  for (uint32_t stage = 0; stage < pipe.num_stages; ++stage) {
    ptx::mbarrier_init(&pipe.shared->full[stage], 1);
    ptx::mbarrier_init(&pipe.shared->empty[stage], 1);
  }
  ptx::fence_mbarrier_init();
}

// Bounded wait for an mbarrier phase. The copies it waits for always finish, but a block's other
// role can have given up (then the abort flag is up), and every device spin is bounded.
__device__ __forceinline__ bool wait_mbarrier(uint64_t* barrier, uint32_t parity,
                                              const KernelContext& context, const WaitSite& site) {
  if (ptx::mbarrier_try_wait_parity(barrier, parity)) return true;
  const uint64_t start = ptx::globaltimer_ns();
  for (uint32_t polls = 1;; ++polls) {
    if (ptx::mbarrier_try_wait_parity(barrier, parity)) return true;
    if ((polls & 15) != 0) continue;
    if (rank_aborted(context)) return false;
    const uint64_t waited = ptx::globaltimer_ns() - start;
    if (waited > context.timeout_ns) {
      record_wait_failure(context, site, 1, 0, waited);
      return false;
    }
  }
}

// The producer's side: run by one thread (lane 0 of the producer warp). `issued` persists across
// phases.
struct PipelineProducer {
  Pipeline pipe;
  uint32_t issued;
  WaitSite site;
  bool failed;

  // Claims the next stage (waiting until the consumer freed its previous use).
  __device__ __forceinline__ bool claim(const KernelContext& context, uint32_t& stage) {
    stage = issued % pipe.num_stages;
    const uint32_t use = issued / pipe.num_stages;
    if (use > 0 && !wait_mbarrier(&pipe.shared->empty[stage], (use - 1) & 1, context, site)) {
      failed = true;
      return false;
    }
    ++issued;
    return true;
  }

  // Loads `bytes` from `source` (and `scale_bytes` from `scales` after it) into the next stage,
  // for the consumer to store at `destination`.
  __device__ __forceinline__ bool push(const KernelContext& context, const void* source, uint8_t* destination,
                                       uint32_t bytes, uint32_t flags, int64_t row,
                                       const void* scales = nullptr, uint32_t scale_bytes = 0) {
    uint32_t stage;
    if (failed || !claim(context, stage)) return false;
    StageDescriptor& descriptor = pipe.shared->descriptor[stage];
    descriptor.destination = destination;
    descriptor.bytes = bytes;
    descriptor.flags = flags | (scale_bytes > 0 ? kStageScales : 0u);
    descriptor.row = row;
    uint64_t* full = &pipe.shared->full[stage];
    // Release (the descriptor) and the byte count the loads below complete.
    ptx::mbarrier_arrive_expect_tx(full, bytes + scale_bytes);
    uint8_t* buffer = pipe.stage(stage);
    // Scales that follow the piece at the source (a published fp8 token's, SymmetricToken) come in the
    // same load: one TMA operation per row instead of two.
    if (scale_bytes > 0 &&
        static_cast<const uint8_t*>(scales) == static_cast<const uint8_t*>(source) + bytes) {
      ptx::tma_load_1d(buffer, source, bytes + scale_bytes, full);
    } else {
      ptx::tma_load_1d(buffer, source, bytes, full);
      if (scale_bytes > 0) ptx::tma_load_1d(buffer + bytes, scales, scale_bytes, full);
    }
    return true;
  }

  // Ends the phase: the consumer drains and frees every stage.
  __device__ __forceinline__ bool finish(const KernelContext& context) {
    uint32_t stage;
    if (failed || !claim(context, stage)) return false;
    pipe.shared->descriptor[stage].flags = kStageLast;
    ptx::mbarrier_arrive(&pipe.shared->full[stage]);
    return true;
  }
};

// The consumer's side: run by a whole warp. `consumed` and `freed` persist across phases.
struct PipelineConsumer {
  Pipeline pipe;
  uint32_t consumed;
  uint32_t freed;
  WaitSite site;
  // Stores of the next run_phase carry an L2 evict_first policy (kEvictFirstPullStores).
  bool evict_first_stores = false;

  __device__ __forceinline__ void free_stage() {
    ptx::mbarrier_arrive(&pipe.shared->empty[freed % pipe.num_stages]);
    ++freed;
  }

  // Consumes stages until the phase's terminator. `extras(descriptor, stage)` runs on every lane
  // for the last piece of each row. Returns false if a wait failed (this rank is aborting).
  template <typename Extras>
  __device__ __forceinline__ bool run_phase(const KernelContext& context, Extras&& extras) {
    const int lane = static_cast<int>(threadIdx.x % 32);
    const uint64_t policy = evict_first_stores && lane == 0 ? ptx::create_policy_evict_first() : 0;
    for (;;) {
      const uint32_t stage = consumed % pipe.num_stages;
      const uint32_t parity = (consumed / pipe.num_stages) & 1;
      // Every lane waits: each then sees the stage's bytes (written by the TMA load) itself.
      const bool ok = wait_mbarrier(&pipe.shared->full[stage], parity, context, site);
      if (!__all_sync(0xffffffffu, ok)) return false;
      const StageDescriptor descriptor = pipe.shared->descriptor[stage];
      ++consumed;
      if (descriptor.flags & kStageLast) {
        if (lane == 0) {
          // Complete (not only read out): the phase's writes must be visible before the barrier
          // that follows it, and to the generic proxy that releases them.
          ptx::tma_store_wait_all();
          ptx::fence_proxy_async_global();
          while (freed < consumed) free_stage();
        }
        freed = __shfl_sync(0xffffffffu, freed, 0);
        return true;
      }
      uint8_t* buffer = pipe.stage(stage);
      if (lane == 0) {
        if (evict_first_stores) {
          ptx::tma_store_1d_hinted(descriptor.destination, buffer, descriptor.bytes, policy);
        } else {
          ptx::tma_store_1d(descriptor.destination, buffer, descriptor.bytes);
        }
        ptx::tma_store_commit();
      }
      if (descriptor.flags & kStageRowEnd) extras(descriptor, buffer);
      // The lanes' reads of the stage happen before it is freed (up to store_read_lag stages later;
      // fewer with fewer stages: the producer waits for the oldest stage while we wait for it).
      __syncwarp();
      const uint32_t lag =
          pipe.num_stages - 1 < pipe.store_read_lag ? pipe.num_stages - 1 : pipe.store_read_lag;
      if (lane == 0 && consumed - freed > lag) {
        wait_store_reads(lag);
        free_stage();
      }
      freed = __shfl_sync(0xffffffffu, freed, 0);
    }
  }
};

// Lanes of a warp do nothing for a row.
struct NoExtras {
  __device__ __forceinline__ void operator()(const StageDescriptor&, const uint8_t*) const {}
};

}  // namespace switchyard::cuda
