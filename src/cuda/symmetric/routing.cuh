#pragma once
// The routing role of the `symmetric` dispatch (helper warps, before the barrier): for every
// (token, slot) pair of this rank with an expert, its position among the rows this rank sends to that
// expert, in (token, slot) order (DESIGN.md: rows in source token order). The pair goes to
// route[local expert][this rank][position] in the expert's rank's workspace, through map(), and the
// per-expert totals to count[local expert][this rank] there (zeros included).
//
// A stable counting sort over the N * K pairs, split into contiguous segments: one per routing block
// (block 0 alone, or every block of the rank when nothing else runs before the barrier and the pairs are
// more than block 0's routing warps walk in one batch of loads: symmetric_routing_blocks,
// cuda/symmetric/engine.hpp), and within it one per routing warp:
//   count   each warp counts its segment per expert (a wave of 32 pairs at a time; lanes holding the
//           same expert are grouped with match.any, and the group's leader adds its size); per expert,
//           an exclusive sum over the block's warps, and the block's totals into its exchange row;
//   (a grid sync of the rank when several blocks route)
//   place   per expert, the earlier blocks' totals move each warp's start; each warp walks its segment
//           again, and a pair's position is its warp's start plus the pairs before it in its wave and
//           in earlier waves.
// Bad input (an id outside [-1, E), or more than max_tokens_per_rank rows for one expert) is
// recorded in the error block and refuses the call: every count becomes kRefusedCount, so that no
// rank writes any output.
//
// Rank masks: the sort ranks every pair, masked targets' included, so that each routing block places
// the same positions whatever its copy of the mask; only the writes skip a target the block does not
// reach (device/rank_mask.cuh: routes and counts, so a masked rank's memory is never written, and a
// rank masked itself writes to no one). The receivers leave out what they do not receive, and the
// combine drops the slots of masked experts.
//
// For the pull combine (launch.position set), place also keeps each pair's position locally, and
// after the barrier write_pull_begins adds where this rank's rows start among each expert's rows: the
// home then finds the row of (token, slot) in the expert's rank's y by itself.
#include "common/symmetric_protocol.hpp"
#include "cuda/symmetric/kernels.hpp"
#include "device/bounded_wait.cuh"
#include "device/ptx.cuh"
#include "device/rank_mask.cuh"
#include "device/warp_group.cuh"

namespace switchyard::cuda {

// Named barrier of the routing warps (0 is __syncthreads).
constexpr int kRoutingBarrierId = 1;

__device__ __forceinline__ void routing_warps_sync(int num_routing_warps) {
  asm volatile("bar.sync %0, %1;" ::"r"(kRoutingBarrierId), "r"(num_routing_warps * 32) : "memory");
}

// Walks pairs [first, end) of the flattened top-k ids, 32 at a time, and calls
// visit(pair, expert, peers) on every lane: expert -1 for none (or past the end), `peers` the lanes
// of this wave holding the same expert. Ids outside [-1, E) count as -1; with `report`, they are
// recorded and `refused` is raised.
template <typename Visit>
__device__ __forceinline__ void walk_pairs(const KernelContext& context,
                                           const SymmetricDispatchLaunch& launch, int64_t first, int64_t end,
                                           bool report, int* refused, Visit&& visit) {
  const int lane = lane_id();
  for (int64_t base = first; base < end; base += 32 * kRoutingBatch) {
    int64_t ids[kRoutingBatch];
#pragma unroll
    for (int u = 0; u < kRoutingBatch; ++u) {
      const int64_t pair = base + u * 32 + lane;
      ids[u] = pair < end ? __ldg(launch.topk_idx + pair) : -1;
    }
#pragma unroll
    for (int u = 0; u < kRoutingBatch; ++u) {
      int32_t expert = static_cast<int32_t>(ids[u]);
      if (ids[u] < -1 || ids[u] >= launch.num_experts) {
        expert = -1;
        if (report) {
          const WaitSite site{common::WaitRole::symmetric_dispatch, common::WaitTarget::invalid_expert, -1,
                              -1};
          record_wait_failure(context, site, launch.num_experts, ids[u], 0, false);
          atomicExch(refused, 1);
        }
      }
      const uint32_t peers = __match_any_sync(0xffffffffu, expert);
      visit(base + u * 32 + lane, expert, peers);
      __syncwarp();
    }
  }
}

// Where the routing blocks of a rank meet: row b holds routing block b's per-expert counts, then
// whether it found a bad id ([routing_blocks][E + 1] int32, the handle's; every entry is written each
// call before it is read, so it needs no reset).
struct RoutingExchange {
  int32_t* rows;
  int routing_blocks;

  __device__ __forceinline__ int32_t* row(int block, int num_experts) const {
    return rows + static_cast<size_t>(block) * (num_experts + 1);
  }
};

// The pairs a routing block sorts: contiguous, in pair order, so positions stay in (token, slot) order.
__device__ __forceinline__ void routing_segment(const SymmetricDispatchLaunch& launch, int routing_block,
                                                int routing_blocks, int routing_warp, int64_t& first,
                                                int64_t& end) {
  const int num_warps = launch.grid.routing_warps;
  const int64_t pairs = launch.num_tokens * launch.topk;
  const int64_t segment =
      common::ceil_div(common::ceil_div(pairs, static_cast<int64_t>(routing_blocks) * num_warps), 32) * 32;
  first = (static_cast<int64_t>(routing_block) * num_warps + routing_warp) * segment;
  end = first + segment < pairs ? first + segment : pairs;
  if (first > end) first = end;
}

// Step 1 of the routing, every routing warp of every routing block: count this warp's pairs per
// expert, then (per expert) turn the block's per-warp counts into where each warp starts within the
// block, and publish the block's totals (and whether it found a bad id) in its exchange row. Bad ids
// are recorded here. `table`: shared memory for (routing_warps + 1) * E counters.
__device__ void count_routes(const KernelContext& context, const SymmetricDispatchLaunch& launch,
                             int32_t* table, int routing_block, const RoutingExchange& exchange,
                             int routing_warp, int* refused) {
  const int num_warps = launch.grid.routing_warps;
  const int num_experts = launch.num_experts;
  const int lane = lane_id();
  int64_t first, end;
  routing_segment(launch, routing_block, exchange.routing_blocks, routing_warp, first, end);
  int32_t* mine = table + static_cast<size_t>(routing_warp) * num_experts;  // this warp's counters
  for (int expert = lane; expert < num_experts; expert += 32) mine[expert] = 0;
  __syncwarp();
  walk_pairs(context, launch, first, end, true, refused, [&](int64_t, int32_t expert, uint32_t peers) {
    if (expert >= 0 && lane == __ffs(peers) - 1) mine[expert] += __popc(peers);
  });
  routing_warps_sync(num_warps);
  int32_t* published = exchange.row(routing_block, num_experts);
  for (int expert = routing_warp * 32 + lane; expert < num_experts; expert += num_warps * 32) {
    int32_t running = 0;
    for (int warp = 0; warp < num_warps; ++warp) {
      int32_t& counter = table[static_cast<size_t>(warp) * num_experts + expert];
      const int32_t count = counter;
      counter = running;
      running += count;
    }
    published[expert] = running;
  }
  if (routing_warp == 0 && lane == 0) published[num_experts] = *reinterpret_cast<volatile int*>(refused);
}

// Step 2, after every routing block's exchange row is visible (the same block's, after a sync of its
// routing warps; other blocks', after a grid sync): each warp's counters move past the earlier blocks'
// rows, the totals and the capacity are checked (the call is refused if any block found a bad id or an
// expert gets more than max_tokens_per_rank rows), and each pair's position goes to
// route[local expert][this rank][position] in the expert's rank's workspace, through map(). Routing block
// 0 then writes the counts there (zeros included, or kRefusedCount for a refused call). Only into the
// workspaces of `targets`.
__device__ void place_routes(const KernelContext& context, const SymmetricDispatchLaunch& launch, int half,
                             int32_t* table, int routing_block, const RoutingExchange& exchange,
                             int routing_warp, const PeerBits& targets, int* refused) {
  const int num_warps = launch.grid.routing_warps;
  const int num_experts = launch.num_experts;
  const int lane = lane_id();
  int32_t* totals = table + static_cast<size_t>(num_warps) * num_experts;
  for (int expert = routing_warp * 32 + lane; expert < num_experts; expert += num_warps * 32) {
    int32_t before = 0, total = 0;
    for (int block = 0; block < exchange.routing_blocks; ++block) {
      // L2, not L1: written by other blocks of this kernel (ordered by the grid sync).
      const int32_t count = __ldcg(exchange.row(block, num_experts) + expert);
      if (block < routing_block) before += count;
      total += count;
    }
    for (int warp = 0; warp < num_warps; ++warp)
      table[static_cast<size_t>(warp) * num_experts + expert] += before;
    totals[expert] = total;
    if (total > launch.max_tokens_per_rank) {
      // Every routing block finds it; block 0 records it. The peer field holds the expert (for a
      // debugger; the message names the counts).
      if (routing_block == 0) {
        const WaitSite site{common::WaitRole::symmetric_dispatch, common::WaitTarget::capacity, -1, expert};
        record_wait_failure(context, site, launch.max_tokens_per_rank, total, 0, false);
      }
      atomicExch(refused, 1);
    }
  }
  for (int block = routing_warp * 32 + lane; block < exchange.routing_blocks; block += num_warps * 32) {
    if (__ldcg(exchange.row(block, num_experts) + num_experts) != 0) atomicExch(refused, 1);
  }
  routing_warps_sync(num_warps);

  int64_t first, end;
  routing_segment(launch, routing_block, exchange.routing_blocks, routing_warp, first, end);
  int32_t* mine = table + static_cast<size_t>(routing_warp) * num_experts;
  const common::SymmetricLayout& region = launch.layout;
  const common::SymHeap& heap = context.heap;
  walk_pairs(context, launch, first, end, false, refused, [&](int64_t pair, int32_t expert, uint32_t peers) {
    int32_t position = 0;
    if (expert >= 0) position = mine[expert] + __popc(peers & ptx::lanemask_lt());
    if (launch.position != nullptr && pair < end) {
      launch.position[pair] = expert >= 0 && position < launch.max_tokens_per_rank ? position : -1;
    }
    __syncwarp();
    if (expert < 0) return;
    if (lane == __ffs(peers) - 1) mine[expert] += __popc(peers);
    if (position >= launch.max_tokens_per_rank) return;  // refused above; stay inside the workspace
    const int target = expert / launch.local_experts;
    if (!targets.in(target)) return;
    const int local = expert % launch.local_experts;
    const common::SymmetricRoute route{static_cast<int32_t>(pair / launch.topk),
                                       static_cast<int32_t>(pair % launch.topk)};
    *heap.map(region.route(heap.base, half, local, context.rank, position), target) = route;
  });
  if (routing_block != 0) return;
  routing_warps_sync(num_warps);

  // Counts, zeros included, so the expert's rank never reads a stale one.
  const bool refuse = *reinterpret_cast<volatile int*>(refused) != 0;
  for (int expert = routing_warp * 32 + lane; expert < num_experts; expert += num_warps * 32) {
    const int target = expert / launch.local_experts;
    const int local = expert % launch.local_experts;
    if (!targets.in(target)) continue;
    *heap.map(region.count(heap.base, half, local, context.rank), target) =
        refuse ? kRefusedCount : totals[expert];
  }
}

// After the barrier: the rows that participating sources before this rank route to `expert`, read from
// the expert's rank's workspace through map() (every source wrote its counts there before arriving);
// 0 for the experts of a rank that does not take part (their slots are dropped, its memory never read).
// Both the pull combine's begins and the fp8 push's (cuda/symmetric/push.cuh) are this.
__device__ __forceinline__ int32_t rows_before_this_rank(const KernelContext& context,
                                                         const SymmetricDispatchLaunch& launch, int half,
                                                         const PeerBits& participants, int expert) {
  const common::SymHeap& heap = context.heap;
  const int target = expert / launch.local_experts;
  const int local = expert % launch.local_experts;
  if (!participants.in(target)) return 0;
  // The sources' counts lie side by side in the target's workspace: each group's loads are issued before
  // any is summed, one round trip to the target's heap a group rather than one a source (NOTES, session 39).
  constexpr int kGroup = 8;
  const int32_t* counts = heap.map(launch.layout.count(heap.base, half, local, 0), target);
  int32_t rows = 0;
  for (int first = 0; first < context.rank; first += kGroup) {
    int32_t count[kGroup];
#pragma unroll
    for (int i = 0; i < kGroup; ++i) {
      const int source = first + i;
      count[i] = source < context.rank && participants.in(source) ? counts[source] : 0;
    }
    // A count out of range is its target's to report (load_count); it adds nothing here.
#pragma unroll
    for (int i = 0; i < kGroup; ++i) {
      if (count[i] > 0 && count[i] <= launch.max_tokens_per_rank) rows += count[i];
    }
  }
  return rows;
}

// After the barrier, block 0's helper warps (`helper` 0..helpers-1), for the pull combine: begin[e] =
// rows_before_this_rank(e), so that the home finds the row of (token, slot) in the expert's rank's y.
__device__ void write_pull_begins(const KernelContext& context, const SymmetricDispatchLaunch& launch,
                                  int half, const PeerBits& participants, int helper, int helpers) {
  for (int expert = helper; expert < launch.num_experts; expert += helpers) {
    launch.begin[expert] = rows_before_this_rank(context, launch, half, participants, expert);
  }
}

}  // namespace switchyard::cuda
