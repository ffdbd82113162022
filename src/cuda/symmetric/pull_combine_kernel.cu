// The CUDA `symmetric` pull combine, one kernel, for ranks that are threads of one process on one
// device (Config::symmetric_combine; the push path, cuda/symmetric/combine_kernel.cu, serves the rest).
// On one device the push moves every row three times (read y, write the home's combine buffer,
// re-read it there); here each home reads every row once, straight from the expert rank's y
// (common/symmetric_protocol.hpp, "pull"):
//   1. announce_y (block 0, thread 0): this rank's y address into its own pull record, then the call's
//      sequence (release). y is complete by stream order, so nothing waits before it;
//   2. gather_records (every block, one thread per rank): acquire every rank's record (bounded) and
//      keep its y address in shared memory;
//   3. reduce (cuda/symmetric/reduce.cuh): the row of (token, slot) is y(expert's rank) + (local expert
//      x C + begin[expert] + position[token, slot]) x H' x 2, from the dispatch's handle; the same slot
//      order and arithmetic as the push path, so the bits are the same;
//   4. release_call (cuda/symmetric/release.cuh; every block, the last one to finish does the rest):
//      release the call into our done word in every peer's heap, then wait (bounded) until every peer
//      has released it into ours: no peer reads our y any more, so the caller may overwrite it once the
//      kernel is done. The last block also advances the call count.
// No combine buffer, no grid sync and no cross-rank barrier. An overflowed dispatch is refused as in
// the push path (nothing reduced), but the records and done words still advance so that no peer waits.
// Rank masks (device/rank_mask.cuh): a block's participants are the ranks whose records it gathered
// and that it still reaches afterwards; slots of the others' experts are dropped (their y is never
// read), and neither done words nor waits go to masked ranks. A rank masked in its own view gathers
// nothing and combines +0.0. Blocks gather on their own: in the call where a timeout masks a peer
// (Config::mask_ranks_on_timeout), a block that finished its gather before another block's wait for
// that peer timed out still reduces the peer's slots (its y was announced, and the peer keeps it until
// our done word), so that call's tokens may differ in whether they include the masked rank's experts.
// From the next call on, every block leaves it out.
#include "cuda/backend/dependent_launch.hpp"
#include "cuda/backend/kernel_preload.hpp"
#include "cuda/symmetric/kernels.hpp"
#include "cuda/symmetric/reduce.cuh"
#include "cuda/symmetric/release.cuh"
#include "device/bounded_wait.cuh"
#include "device/cuda_check.hpp"
#include "device/peer_signal.cuh"
#include "device/ptx.cuh"
#include "device/rank_mask.cuh"
#include "device/warp_group.cuh"

namespace switchyard::cuda {

namespace {

// NOTES: the CUDA backend refuses more ranks than its warp groups serve (cuda_backend.cpp), and a
// home keeps one y address per rank in shared memory.
constexpr int kMaxPullRanks = 32;

__device__ __forceinline__ WaitSite pull_site(common::WaitTarget target, int peer) {
  return WaitSite{common::WaitRole::symmetric_combine, target, -1, peer};
}

// ---- 1. announce ----------------------------------------------------------------------------------

__device__ void announce_y(const KernelContext& context, const SymmetricCombineLaunch& launch,
                           uint64_t sequence) {
  common::SymmetricPullRecord* record = launch.layout.pull_record(context.heap.base);
  record->y = launch.y_rows.where;
  record->y_at = launch.y_rows.at;
  record->rows_per_expert = launch.capacity;
  record->hidden = launch.hidden;
  // Release: the fields above, and y (written before this kernel on this stream), go with it (at the scope
  // that holds every rank: device/peer_signal.cuh).
  st_release_peer(context, &record->sequence, sequence);
}

// ---- 2. gather ------------------------------------------------------------------------------------

// Returns (in every thread of the block) whether every rank it reaches announced this call with our
// shape; `announced` gets those ranks, whose y_of is set.
__device__ bool gather_records(const KernelContext& context, const SymmetricCombineLaunch& launch,
                               uint64_t sequence, const uint8_t** y_of, PeerBits& announced) {
  __shared__ int gathered;
  if (threadIdx.x == 0) gathered = 1;
  announced.clear();
  const common::SymHeap& heap = context.heap;
  for (int rank = threadIdx.x; rank < context.num_ranks; rank += blockDim.x) {
    const common::SymmetricPullRecord* record = heap.map(launch.layout.pull_record(heap.base), rank);
    const PeerWait wait =
        wait_for_peer(context, &record->sequence, sequence, pull_site(common::WaitTarget::pull_record, rank));
    if (wait == PeerWait::left_out) continue;  // masked: its record and y are never read
    if (wait == PeerWait::failed) {
      atomicExch(&gathered, 0);  // an atomic: many threads may clear it (racecheck)
      continue;
    }
    // Read after the acquire: the fields the peer wrote before releasing the sequence.
    const volatile common::SymmetricPullRecord* fields = record;
    if (fields->rows_per_expert != launch.capacity || fields->hidden != launch.hidden) {
      if (blockIdx.x == 0) {
        record_wait_failure(context, pull_site(common::WaitTarget::call_signature, rank), launch.capacity,
                            fields->rows_per_expert, 0, false);
      }
      atomicExch(&gathered, 0);
      continue;
    }
    // A heap offset outside the peer's heap is never followed (a corrupt record): reported as a
    // disagreement on the call.
    const uint64_t y_bytes = static_cast<uint64_t>(launch.local_experts) *
                             static_cast<uint64_t>(launch.capacity) * static_cast<uint64_t>(launch.hidden) *
                             2;
    if (fields->y_at == common::SymmetricRowsAt::heap &&
        !common::symmetric_heap_span_fits(fields->y, y_bytes, heap.bytes)) {
      if (blockIdx.x == 0) {
        record_wait_failure(context, pull_site(common::WaitTarget::call_signature, rank),
                            static_cast<int64_t>(heap.bytes), static_cast<int64_t>(fields->y), 0, false);
      }
      atomicExch(&gathered, 0);
      continue;
    }
    y_of[rank] = common::symmetric_rows(heap, rank, fields->y_at, fields->y);
    announced.add(rank);
  }
  __syncthreads();
  return gathered != 0;
}

// ---- 3. reduce ------------------------------------------------------------------------------------

// Lane j: slot j of `token`, whose row is in the expert's rank's y. A slot of an expert whose rank
// does not take part (`participants`) is dropped. A valid slot that the dispatch did not send (no
// position, or past the expert's rows) is reported (the call's shapes differ) and left out, never read.
struct PeerOutputSlots {
  const KernelContext& context;
  const SymmetricCombineLaunch& launch;
  const uint8_t* const* y_of;
  const PeerBits& participants;
  uint32_t row_bytes;

  __device__ __forceinline__ TokenSlots operator()(int64_t token) const {
    const int lane = lane_id();
    TokenSlots slots{false, 0.0f, nullptr};
    if (token >= launch.num_tokens || lane >= launch.topk) return slots;
    const int64_t pair = token * launch.topk + lane;
    const int64_t expert = __ldg(launch.topk_idx + pair);
    if (expert < 0) return slots;
    const int target = expert < launch.num_experts ? static_cast<int>(expert / launch.local_experts) : -1;
    if (target >= 0 && !participants.in(target)) return slots;
    const int32_t position = __ldg(launch.position + pair);
    slots.weight = __ldg(launch.topk_weights + pair);
    const int64_t row_in_expert =
        target >= 0 && position >= 0 ? static_cast<int64_t>(__ldg(launch.begin + expert)) + position : -1;
    if (row_in_expert < 0 || row_in_expert >= launch.capacity) {
      record_wait_failure(context, pull_site(common::WaitTarget::call_signature, target), launch.capacity,
                          row_in_expert, 0, false);
      return slots;
    }
    const int64_t local = expert % launch.local_experts;
    slots.valid = true;
    slots.row = y_of[target] + static_cast<size_t>(local * launch.capacity + row_in_expert) * row_bytes;
    return slots;
  }
};

__global__ void __launch_bounds__(kSymmetricThreads, 1)
    symmetric_pull_combine_kernel(const __grid_constant__ KernelContext context,
                                  const __grid_constant__ SymmetricCombineLaunch launch) {
  ptx::wait_for_previous_grid();  // launched by launch_dependent: before any global access
  __shared__ uint32_t call_of_block;
  __shared__ const uint8_t* y_of[kMaxPullRanks];
  __shared__ PeerBits announced;     // the ranks whose records this block gathered
  __shared__ PeerBits participants;  // of those, the ones it still reaches after the gather
  if (threadIdx.x == 0) {
    // Every block reads the count before it finishes; the last block advances it after all have.
    call_of_block = launch.state->calls + 1;
  }
  __syncthreads();
  const uint64_t sequence = call_of_block;

  if (blockIdx.x == 0 && threadIdx.x == 0) announce_y(context, launch, sequence);
  const bool gathered = gather_records(context, launch, sequence, y_of, announced);
  participants.load(context, &announced);

  // Refused after an overflowed dispatch (every rank refuses alike): combined_x is not written.
  const bool overflowed = launch.overflow[0] != 0;
  if (overflowed && blockIdx.x == 0 && threadIdx.x == 0) {
    const int expert = launch.overflow[1];
    const WaitSite site{common::WaitRole::symmetric_combine, common::WaitTarget::expert_capacity, expert,
                        expert / launch.local_experts};
    record_wait_failure(context, site, launch.capacity, launch.overflow[2], 0, false);
  }
  if (gathered && !overflowed) {
    reduce_tokens(
        ReduceShape{launch.num_tokens, launch.hidden, static_cast<int>(gridDim.x), launch.combined_x,
                    launch.bias0, launch.bias1},
        PeerOutputSlots{context, launch, y_of, participants, static_cast<uint32_t>(launch.hidden) * 2});
  }
  // 4. Finish (cuda/symmetric/release.cuh): the call ends only when no peer reads our y any more; the
  // last block counts the call (no barrier here after which block 0 could).
  release_call(context, launch.state, launch.layout, sequence, true, common::WaitRole::symmetric_combine,
               common::WaitTarget::pull_done, true);
}

}  // namespace

void prepare_symmetric_pull_combine_kernel() {
  preload_kernel(symmetric_pull_combine_kernel);
}

int symmetric_pull_combine_blocks_per_sm() {
  int blocks = 0;
  SY_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, symmetric_pull_combine_kernel,
                                                              kSymmetricThreads, 0));
  return blocks;
}

void launch_symmetric_pull_combine(const KernelContext& context, const SymmetricCombineLaunch& launch,
                                   cudaStream_t stream) {
  if (context.num_ranks > kMaxPullRanks) {
    throw Unsupported("topology.num_ranks: the CUDA symmetric pull combine serves up to " +
                      std::to_string(kMaxPullRanks) + " ranks, got " + std::to_string(context.num_ranks));
  }
  launch_dependent(symmetric_pull_combine_kernel, launch.grid.blocks, kSymmetricThreads, 0, stream, context,
                   launch);
}

}  // namespace switchyard::cuda
