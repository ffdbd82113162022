// The CUDA `symmetric` push combine, one kernel, the path across processes and GPUs (the pull combine,
// for ranks as threads on one device, is cuda/symmetric/pull_combine_kernel.cu) (DESIGN.md, "Symmetric
// engine"; the protocol in common/symmetric_protocol.hpp; grid and warp roles in cuda/symmetric/kernels.hpp):
//   1. push: every block walks its share of this rank's expert rows, homes interleaved
//      (cuda/symmetric/tables.cuh), TMA-loads each row of y and TMA-stores it into its home rank's
//      combine buffer at [slot][token], through map();
//   2. the cross-rank barrier (device/cross_rank_barrier.cuh);
//   3. reduce (cuda/symmetric/reduce.cuh): every warp takes (token, 256-channel chunk) items of this
//      rank's tokens and sums the valid slots' rows from its own combine buffer, weighted, in
//      increasing slot order with fmaf from +0, rounding to bf16 once: the CPU engine's arithmetic.
// Rows at home (SymmetricCombineLaunch::rows_at_home, the MoE layer's MoeExpertOutput::home): GEMM 2's
// epilogue wrote every row where step 1 would have put it; step 1 then only checks the dispatch's tables
// (recording a bad token or slot as for a pushed row) and moves nothing.
// The combine of a dispatch that overflowed its expert_capacity is refused on every rank alike (each
// rank's dispatch found the same overflow): nothing is pushed or reduced, the barrier still runs so
// that no peer waits, and the CapacityError is recorded again.
// Rank masks (device/rank_mask.cuh): nothing is pushed to a home this rank does not reach when the
// block starts; the barrier neither signals nor awaits masked ranks (and masks, under
// Config::mask_ranks_on_timeout, one that does not arrive); after it every block reads the mask once
// (the same ranks in every block) and drops the slots of experts on ranks that do not take part, as if
// topk_idx held -1 there. A rank masked in its own view pushes nothing and combines +0.0.
#include "common/numeric.hpp"
#include "cuda/backend/dependent_launch.hpp"
#include "cuda/backend/kernel_preload.hpp"
#include "cuda/symmetric/kernels.hpp"
#include "cuda/symmetric/pipeline.cuh"
#include "cuda/symmetric/reduce.cuh"
#include "cuda/symmetric/tables.cuh"
#include "device/cross_rank_barrier.cuh"
#include "device/cuda_check.hpp"
#include "device/rank_mask.cuh"
#include "device/warp_group.cuh"

namespace switchyard::cuda {

namespace {

struct CombineCall {
  int half;
  int num_ranks;
  int blocks;
  uint32_t row_bytes;  // H' * 2
  bool rows_at_home;   // SymmetricCombineLaunch::rows_at_home: check the rows, move none
};

// ---- 1. push ------------------------------------------------------------------------------------

// The dispatch's layout_range gives each (local expert, home) pair's rows; none for a home not in
// `homes`. Returns false (in every thread) if it is not a layout this call can use (a refused dispatch
// leaves it unwritten).
__device__ bool load_push_tables(const KernelContext& context, const SymmetricCombineLaunch& launch,
                                 const CombineCall& call, const PeerBits& homes, const RowTables& tables) {
  __shared__ int unusable;
  if (threadIdx.x == 0) unusable = 0;
  __syncthreads();
  const int pairs = launch.local_experts * call.num_ranks;
  for (int pair = threadIdx.x; pair < pairs; pair += blockDim.x) {
    int32_t count = launch.layout_range[2 * pair + 1];
    if (count < 0 || count > launch.max_tokens_per_rank) {
      if (blockIdx.x == 0) {
        const WaitSite site{common::WaitRole::symmetric_combine, common::WaitTarget::call_signature, -1,
                            pair % call.num_ranks};
        record_wait_failure(context, site, launch.max_tokens_per_rank, count, 0, false);
      }
      atomicExch(&unusable, 1);  // an atomic: many threads may raise it
      count = 0;
    }
    tables.count[pair] = homes.in(pair % call.num_ranks) ? count : 0;
  }
  __syncthreads();
  // NOTES (session 47): without the sliced walk; this kernel sits at its 128-register limit, where the
  // slices' code made ptxas spill 18 bytes.
  tables.build</*kSliceExperts=*/false>(launch.capacity);
  return unusable == 0;
}

// Producer: this block's share of every home's rows, homes interleaved; lanes look up 32 rows at
// once, lane 0 loads them.
__device__ void push_producer(const KernelContext& context, const SymmetricCombineLaunch& launch,
                              const CombineCall& call, const RowTables& tables, PipelineProducer& producer) {
  const int lane = lane_id();
  const common::SymHeap& heap = context.heap;
  const int64_t rows_per_expert = launch.capacity;
  const uint8_t* y = reinterpret_cast<const uint8_t*>(launch.y);
  for (int step = 0; step < call.num_ranks; ++step) {
    const int home = walk_peer(step, context.rank, call.num_ranks);
    const int32_t rows = tables.rows_of(home);
    for (int64_t base = walk_first_row(home, call.blocks); base < rows;
         base += 32 * static_cast<int64_t>(call.blocks)) {
      const int64_t j = base + static_cast<int64_t>(lane) * call.blocks;
      bool valid = j < rows;
      int64_t row = 0;
      uint8_t* target = nullptr;
      if (valid) {
        const int local = tables.expert_of(home, static_cast<int32_t>(j));
        const int32_t position = static_cast<int32_t>(j) - tables.first_row_of(home, local);
        row = local * rows_per_expert + tables.begin[local * call.num_ranks + home] + position;
        const int32_t token = launch.src_info[row];
        const int32_t slot = launch.src_slot[row];
        if (token < 0 || token >= launch.max_tokens_per_rank || slot < 0 || slot >= launch.topk) {
          const WaitSite site{common::WaitRole::symmetric_combine, common::WaitTarget::call_signature, -1,
                              home};
          record_wait_failure(context, site, launch.max_tokens_per_rank, token, 0, false);
          valid = false;
        } else {
          target = heap.map(launch.layout.combine_row(heap.base, call.half, slot, token), home);
        }
      }
      // Rows already home (written by the expert phase, common/symmetric_home_rows.hpp): checked above,
      // where a bad token or slot is recorded as for a pushed row, and not moved.
      if (call.rows_at_home) continue;
      const uint32_t mask = __ballot_sync(0xffffffffu, valid);
      int failed = 0;
      for (int i = 0; i < 32; ++i) {
        if (((mask >> i) & 1u) == 0) continue;
        const int64_t row_i = __shfl_sync(0xffffffffu, row, i);
        uint8_t* target_i =
            reinterpret_cast<uint8_t*>(__shfl_sync(0xffffffffu, reinterpret_cast<uintptr_t>(target), i));
        if (lane == 0 && !failed) {
          for (uint32_t offset = 0; offset < call.row_bytes && !failed; offset += launch.grid.piece_bytes) {
            const uint32_t left = call.row_bytes - offset;
            const uint32_t bytes = left < launch.grid.piece_bytes ? left : launch.grid.piece_bytes;
            failed = !producer.push(context, y + row_i * call.row_bytes + offset, target_i + offset, bytes,
                                    0u, row_i);
          }
        }
      }
      if (__shfl_sync(0xffffffffu, failed, 0)) return;
    }
  }
  if (lane == 0) producer.finish(context);
}

// ---- 3. reduce ----------------------------------------------------------------------------------

// Lane j: slot j of `token`, whose row is in this rank's combine buffer at [slot][token]; left out
// when its expert's rank does not take part (`experts`).
struct CombineBufferSlots {
  const KernelContext& context;
  const SymmetricCombineLaunch& launch;
  const PeerBits& experts;
  int half;

  __device__ __forceinline__ TokenSlots operator()(int64_t token) const {
    const int lane = lane_id();
    TokenSlots slots{false, 0.0f, nullptr};
    if (token < launch.num_tokens && lane < launch.topk) {
      const int64_t expert = __ldg(launch.topk_idx + token * launch.topk + lane);
      slots.valid = expert >= 0 && experts.in(static_cast<int>(expert / launch.local_experts));
      slots.weight = __ldg(launch.topk_weights + token * launch.topk + lane);
      slots.row = launch.layout.combine_row(context.heap.base, half, lane, token);
    }
    return slots;
  }
};

__global__ void __launch_bounds__(kSymmetricThreads, 1)
    symmetric_combine_kernel(const __grid_constant__ KernelContext context,
                             const __grid_constant__ SymmetricCombineLaunch launch) {
  ptx::wait_for_previous_grid();  // launched by launch_dependent: before any global access
  extern __shared__ __align__(128) uint8_t dynamic_shared[];
  __shared__ PipelineShared pipeline_shared;
  __shared__ uint32_t call_of_block;
  __shared__ PeerBits homes;    // whom this block pushes to before the barrier
  __shared__ PeerBits experts;  // whose experts' slots it reduces after it
  const int warp = static_cast<int>(threadIdx.x / 32);
  const SymmetricGrid& grid = launch.grid;
  const Pipeline pipe{&pipeline_shared, dynamic_shared + grid.table_bytes, grid.stage_bytes,
                      static_cast<uint32_t>(grid.stages), grid.store_read_lag};
  if (threadIdx.x == 0) {
    // Every block reads the count before the barrier; block 0 advances it only after.
    call_of_block = launch.state->calls + 1;
    init_pipeline(pipe);
  }
  __syncthreads();
  const uint32_t sequence = call_of_block;
  homes.load(context);
  CombineCall call;
  call.half = common::symmetric_half(sequence);
  call.num_ranks = context.num_ranks;
  call.blocks = grid.blocks;
  call.row_bytes = static_cast<uint32_t>(launch.hidden) * 2;
  call.rows_at_home = launch.rows_at_home;
  const WaitSite pipeline_site{common::WaitRole::symmetric_combine, common::WaitTarget::grid_arrival, -1, -1};

  // 1. Push (nothing if the dispatch's layout is unusable or overflowed; the barrier still runs, peers
  // wait on it).
  const RowTables tables =
      RowTables::carve(reinterpret_cast<int32_t*>(dynamic_shared), call.num_ranks, launch.local_experts);
  const bool overflowed = launch.overflow[0] != 0;
  if (overflowed && blockIdx.x == 0 && threadIdx.x == 0) {
    const int expert = launch.overflow[1];
    const WaitSite site{common::WaitRole::symmetric_combine, common::WaitTarget::expert_capacity, expert,
                        expert / launch.local_experts};
    record_wait_failure(context, site, launch.capacity, launch.overflow[2], 0, false);
  }
  const bool usable = load_push_tables(context, launch, call, homes, tables) && !overflowed;
  if (usable && warp == kProducerWarp) {
    PipelineProducer producer{pipe, 0, pipeline_site, false};
    push_producer(context, launch, call, tables, producer);
  } else if (usable && warp == kConsumerWarp) {
    PipelineConsumer consumer{pipe, 0, 0, pipeline_site};
    consumer.run_phase(context, NoExtras{});
  }

  // 2. The barrier: every row for our tokens is in our combine buffer after it.
  const CrossRankBarrier barrier{
      GridBarrier{&launch.state->grid_arrivals, static_cast<uint32_t>(grid.blocks)},
      CrossRankSignals{launch.layout.signal(context.heap.base, 0), context.num_ranks},
      &launch.state->barriers};
  if (!cross_rank_barrier(barrier, context, common::WaitRole::symmetric_combine)) return;
  if (blockIdx.x == 0 && threadIdx.x == 0) launch.state->calls = sequence;

  // 3. Reduce (refused after an overflowed dispatch: combined_x is not written), over the experts of
  // the ranks that take part: fixed here, after the barrier's waits, so that a rank masked there is
  // dropped from the whole reduction.
  experts.load(context, &homes);
  if (!overflowed) {
    reduce_tokens(ReduceShape{launch.num_tokens, launch.hidden, call.blocks, launch.combined_x, launch.bias0,
                              launch.bias1},
                  CombineBufferSlots{context, launch, experts, call.half});
  }
}

}  // namespace

void prepare_symmetric_combine_kernel() {
  preload_kernel(symmetric_combine_kernel);
  SY_CUDA_CHECK(cudaFuncSetAttribute(symmetric_combine_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(kSymmetricSharedBytes)));
}

int symmetric_combine_blocks_per_sm() {
  int blocks = 0;
  SY_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, symmetric_combine_kernel,
                                                              kSymmetricThreads, kSymmetricSharedBytes));
  return blocks;
}

void launch_symmetric_combine(const KernelContext& context, const SymmetricCombineLaunch& launch,
                              cudaStream_t stream) {
  launch_dependent(symmetric_combine_kernel, launch.grid.blocks, kSymmetricThreads, kSymmetricSharedBytes,
                   stream, context, launch);
}

}  // namespace switchyard::cuda
