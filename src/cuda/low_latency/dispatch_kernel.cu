// The CUDA `low_latency` dispatch (common/low_latency_protocol.hpp).
//
// Send kernel: one block per chunk of consecutive tokens (one token at decode sizes). The block
// counts the rank's rows per expert from topk_idx (all tokens, and those before its chunk: the
// prefix sum that fixes every row's slot, no atomics on the data), then per token: a TMA load of
// the row into shared memory (cast to fp8 there with use_fp8), and one warp per top-k slot stores
// the message into the expert's receive slot in the expert's rank's heap. The block that finishes
// last publishes one signal per (expert, this rank) with the row count (release).
//
// Receive kernel: every block waits for all (local expert, source) signals (acquire, bounded),
// builds the expert-major row table, and its warps copy the rows out, one row per warp, rows
// spread over all warps of the grid.
//
// Across nodes (cuda/low_latency/link.cuh): a token with a slot on another node is first staged in
// this rank's heap (a put reads its source there); each such slot is a put of the message and a put
// of its source fields with a rows-landed add, and the count signal is a transport add. The
// receiver waits for a remote source's count, then for its rows to have landed.
#include <algorithm>

#include "cuda/backend/dependent_launch.hpp"
#include "cuda/backend/kernel_preload.hpp"
#include "cuda/low_latency/device.cuh"
#include "cuda/low_latency/kernels.hpp"
#include "cuda/low_latency/link.cuh"
#include "device/cuda_check.hpp"
#include "device/ptx.cuh"
#include "transport/nccl_gin.cuh"

namespace switchyard::cuda {

namespace {

using low_latency::ExpertMajorTable;
using low_latency::kAcrossNodes;
using low_latency::kCopyDepth;
using low_latency::Session;

constexpr int kSendWarps = 8;
constexpr int kSendThreads = kSendWarps * 32;
// NOTES: every send block reads all of topk_idx to count rows, so the block count is capped to keep
// that O(N * K * blocks) work small; past it, blocks take several consecutive tokens.
constexpr int64_t kMaxSendBlocks = 512;
// NOTES: core allows k <= 32: one lane per slot.
constexpr int kMaxSlots = 32;
constexpr int kReceiveWarps = 16;
constexpr int kReceiveThreads = kReceiveWarps * 32;

// The dispatch sender's dynamic shared memory: two per-expert counters, the staged message, and
// with fp8 the bf16 row the cast reads (without fp8 the row is loaded straight into the message).
struct SendSharedLayout {
  uint32_t staging_offset;
  uint32_t row_offset;
  uint32_t total_bytes;
};

__host__ __device__ inline SendSharedLayout send_shared_layout(const LowLatencyDispatchLaunch& launch) {
  SendSharedLayout shared{};
  const size_t counters =
      common::align_up(2 * sizeof(int32_t) * static_cast<size_t>(launch.num_experts), 128);
  const size_t staging = common::align_up(launch.message.source_offset(), 128);
  const size_t row = launch.use_fp8 ? common::align_up(static_cast<size_t>(launch.hidden) * 2, 128) : 0;
  shared.staging_offset = static_cast<uint32_t>(counters);
  shared.row_offset = static_cast<uint32_t>(counters + staging);
  shared.total_bytes = static_cast<uint32_t>(counters + staging + row);
  return shared;
}

int64_t tokens_per_send_block(int64_t num_tokens) {
  return num_tokens <= kMaxSendBlocks ? 1 : common::ceil_div(num_tokens, kMaxSendBlocks);
}

// ---- send ---------------------------------------------------------------------------------------

// Counts this rank's rows per expert: `total` over all tokens, `sent_before` over the tokens before
// `first_token`. topk_idx lives on the device, where the host could not check it, so it is checked
// here before anything is written: ids outside [-1, E), or more rows for one expert than the
// receive area holds, refuse the call. Returns the verdict in every thread.
__device__ bool count_routing(const KernelContext& context, const LowLatencyDispatchLaunch& launch,
                              const PeerBits& reached, int64_t first_token, int32_t* sent_before,
                              int32_t* total) {
  for (int expert = threadIdx.x; expert < launch.num_experts; expert += blockDim.x) {
    sent_before[expert] = 0;
    total[expert] = 0;
  }
  __syncthreads();
  const int64_t pairs = launch.num_tokens * launch.topk;
  const int64_t pairs_before = first_token * launch.topk;
  bool refused = false;
  constexpr int kLoadsInFlight = 4;
  for (int64_t first = threadIdx.x; first < pairs; first += kLoadsInFlight * blockDim.x) {
    int64_t experts[kLoadsInFlight];
#pragma unroll
    for (int u = 0; u < kLoadsInFlight; ++u) {
      const int64_t i = first + u * blockDim.x;
      experts[u] = i < pairs ? __ldg(launch.topk_idx + i) : -1;
    }
#pragma unroll
    for (int u = 0; u < kLoadsInFlight; ++u) {
      const int64_t expert = experts[u];
      if (expert < -1 || expert >= launch.num_experts) {
        // Every block sees the same ids; block 0 reports them.
        if (!refused && blockIdx.x == 0) {
          const WaitSite site{common::WaitRole::low_latency_dispatch_sender,
                              common::WaitTarget::invalid_expert, -1, -1};
          record_wait_failure(context, site, launch.num_experts, expert, 0, /*abort_rank=*/false);
        }
        refused = true;
        continue;
      }
      // A slot routed to a masked rank is dropped (Buffer::update_mask).
      if (expert < 0 || !reached.in(static_cast<int>(expert / launch.local_experts))) continue;
      atomicAdd(&total[expert], 1);
      if (first + u * blockDim.x < pairs_before) atomicAdd(&sent_before[expert], 1);
    }
  }
  __syncthreads();
  for (int expert = threadIdx.x; expert < launch.num_experts; expert += blockDim.x) {
    // A token naming an expert in several slots sends one row per slot.
    if (total[expert] > launch.max_tokens_per_rank) {
      if (!refused && blockIdx.x == 0) {
        const WaitSite site{common::WaitRole::low_latency_dispatch_sender, common::WaitTarget::capacity, -1,
                            expert / launch.local_experts};
        record_wait_failure(context, site, launch.max_tokens_per_rank, total[expert], 0,
                            /*abort_rank=*/false);
      }
      refused = true;
    }
  }
  return __syncthreads_or(refused) != 0;
}

__device__ __forceinline__ void load_row(const LowLatencyDispatchLaunch& launch, int64_t token,
                                         void* destination, uint64_t* barrier) {
  const uint32_t bytes = static_cast<uint32_t>(launch.hidden) * 2;
  ptx::mbarrier_arrive_expect_tx(barrier, bytes);
  ptx::tma_load_1d(destination, launch.x + token * launch.hidden, bytes, barrier);
}

// A local TMA load, not a wait on a peer: it always completes.
__device__ __forceinline__ void wait_row(uint64_t* barrier, uint32_t& phase) {
  while (!ptx::mbarrier_try_wait_parity(barrier, phase)) {
  }
  phase ^= 1;
}

// Warp 0: the expert and receive slot of each top-k slot of `token`. A slot's position is the
// number of this rank's rows for that expert before it: rows of earlier tokens (`sent_before`,
// advanced here), then earlier slots of this token that name the same expert.
__device__ void place_slots(const LowLatencyDispatchLaunch& launch, const PeerBits& reached, int64_t token,
                            int32_t* sent_before, int32_t* slot_expert, int32_t* slot_position) {
  const int lane = lane_id();
  int64_t expert = lane < launch.topk ? __ldg(launch.topk_idx + token * launch.topk + lane) : -1;
  if (expert >= 0 && !reached.in(static_cast<int>(expert / launch.local_experts))) expert = -1;
  const uint32_t same = __match_any_sync(low_latency::kFullWarp, expert);
  const uint32_t same_before = same & ((1u << lane) - 1u);
  int32_t position = -1;
  if (expert >= 0) position = sent_before[expert] + __popc(same_before);
  __syncwarp();
  if (expert >= 0 && same_before == 0) sent_before[expert] += __popc(same);
  if (lane < launch.topk) {
    slot_expert[lane] = static_cast<int32_t>(expert);
    slot_position[lane] = position;
  }
}

// Casts the bf16 row in shared memory into the staged message: e4m3 values and one scale per 128
// channels, as common::cast_row_to_fp8. The 16 lanes that hold a 128-channel block (8 channels
// each) share its amax by shuffles.
__device__ void cast_row_to_fp8(const LowLatencyDispatchLaunch& launch, const int4* bf16_row,
                                uint8_t* staging) {
  const uint32_t vectors = static_cast<uint32_t>(launch.hidden) / 8;
  const int lane = lane_id();
  float* scales = launch.message.scales(staging);
  uint2* fp8_row = reinterpret_cast<uint2*>(launch.message.row(staging));
  for (uint32_t base = (threadIdx.x / 32) * 32; base < vectors; base += blockDim.x) {
    // Whole warps iterate (hidden is a multiple of 128: a warp covers two blocks, or the first one).
    const uint32_t i = base + lane;
    const bool active = i < vectors;
    const int4 values = active ? bf16_row[i] : make_int4(0, 0, 0, 0);
    float amax = amax_of_eight(values);
#pragma unroll
    for (int offset = 8; offset >= 1; offset /= 2) {
      amax = fmaxf(amax, __shfl_xor_sync(low_latency::kFullWarp, amax, offset));
    }
    const float scale = common::fp8_block_scale(amax, launch.round_scale);
    if (active) {
      fp8_row[i] = cast_eight_to_fp8(values, 1.0f / scale);
      if (i % 16 == 0) scales[i / 16] = scale;
    }
  }
  // The padding after the scales travels with the message: defined bytes, not stale shared memory.
  const uint32_t num_scales = launch.message.num_scales;
  const uint32_t padded =
      static_cast<uint32_t>(common::align_up(num_scales, common::kLowLatencyAlignment / sizeof(float)));
  for (uint32_t i = num_scales + threadIdx.x; i < padded; i += blockDim.x) scales[i] = 0.0f;
}

// Across nodes, whether `token` has a slot on another node (every thread, from shared memory).
__device__ bool token_leaves_node(const KernelContext& context, const LowLatencyDispatchLaunch& launch,
                                  const int32_t* slot_expert) {
  for (int slot = 0; slot < launch.topk; ++slot) {
    const int expert = slot_expert[slot];
    if (expert >= 0 &&
        !low_latency::in_my_node(context, launch.ranks_per_node, expert / launch.local_experts)) {
      return true;
    }
  }
  return false;
}

// Across nodes, the whole block: the staged message (row and scales) from shared memory into this
// rank's send area for `token`, the source of its puts. Ends with __syncthreads.
__device__ void stage_message_in_heap(const KernelContext& context, const LowLatencyDispatchLaunch& launch,
                                      int64_t token, const uint8_t* staging) {
  const int4* from = reinterpret_cast<const int4*>(staging);
  int4* to = reinterpret_cast<int4*>(context.heap.base + launch.layout.send_message_offset(token));
  const uint32_t vectors = static_cast<uint32_t>(launch.message.source_offset()) / 16;
  for (uint32_t i = threadIdx.x; i < vectors; i += blockDim.x) to[i] = from[i];
  __syncthreads();
}

// One warp, a slot whose expert is on another node: the message (put from the send area), then its
// source fields with a rows-landed add (which lands after both puts).
template <typename Transport>
__device__ void put_slot_across_nodes(const KernelContext& context, const LowLatencyDispatchLaunch& launch,
                                      Session<Transport>& session, int half, int64_t token, int slot,
                                      int expert, int32_t position) {
  const common::LowLatencyLayout& layout = launch.layout;
  const int destination = expert / launch.local_experts;
  const int local = expert % launch.local_experts;
  const size_t slot_offset = layout.dispatch_slot_offset(half, local, context.rank, position);
  const size_t source_offset = launch.message.source_offset();
  session.put(destination, slot_offset, layout.send_message_offset(token), source_offset);
  const size_t record_offset = layout.send_source_offset(token, slot);
  if (lane_id() == 0) {
    *reinterpret_cast<int4*>(context.heap.base + record_offset) =
        make_int4(static_cast<int32_t>(token), slot, 0, 0);
  }
  __syncwarp();
  session.put_signal(destination, slot_offset + source_offset, record_offset, common::kLowLatencyAlignment,
                     layout.signal_id(layout.dispatch_landed_offset(half, local, context.rank)), 1);
}

// One warp per top-k slot: the staged message into the slot's receive area on the expert's rank,
// then the source fields (token, slot).
template <typename Transport>
__device__ void send_slots(const KernelContext& context, const LowLatencyDispatchLaunch& launch,
                           Session<Transport>& session, int half, int64_t token, const uint8_t* staging,
                           const int32_t* slot_expert, const int32_t* slot_position) {
  const uint32_t message_bytes = static_cast<uint32_t>(launch.message.source_offset());
  for (int slot = threadIdx.x / 32; slot < launch.topk; slot += kSendWarps) {
    const int expert = slot_expert[slot];
    if (expert < 0) continue;
    const int destination = expert / launch.local_experts;
    if constexpr (kAcrossNodes<Transport>) {
      if (!low_latency::in_my_node(context, launch.ranks_per_node, destination)) {
        put_slot_across_nodes<Transport>(context, launch, session, half, token, slot, expert,
                                         slot_position[slot]);
        continue;
      }
    }
    uint8_t* message =
        context.heap.map(launch.layout.dispatch_slot(context.heap.base, half, expert % launch.local_experts,
                                                     context.rank, slot_position[slot]),
                         destination);
    warp_copy<CopyLoad::shared, kCopyDepth>(message, staging, message_bytes);
    if (lane_id() == 0) {
      *reinterpret_cast<int4*>(launch.message.src_token(message)) =
          make_int4(static_cast<int32_t>(token), slot, 0, 0);
    }
  }
}

// The last block: one signal per (expert, this rank) in the expert's rank's heap, with the count of
// rows (0 for a refused call, so that peers are not left waiting). Stored within the node; across
// nodes a transport add, one warp per expert.
template <typename Transport>
__device__ void publish_counts(const KernelContext& context, const LowLatencyDispatchLaunch& launch,
                               const PeerBits& reached, Session<Transport>& session, int half,
                               uint32_t sequence, const int32_t* total, bool refused) {
  const uint32_t tag = common::low_latency_call_tag(sequence, launch.signature);
  for (int expert = threadIdx.x; expert < launch.num_experts; expert += blockDim.x) {
    if (!reached.in(expert / launch.local_experts)) continue;  // nothing to, or awaited by, a masked rank
    if constexpr (kAcrossNodes<Transport>) {
      if (!low_latency::in_my_node(context, launch.ranks_per_node, expert / launch.local_experts)) continue;
    }
    const uint32_t count = refused ? 0u : static_cast<uint32_t>(total[expert]);
    uint64_t* signal = context.heap.map(
        launch.layout.dispatch_signal(context.heap.base, half, expert % launch.local_experts, context.rank),
        expert / launch.local_experts);
    st_release_peer(context, signal, common::low_latency_signal(tag, count));
  }
  if constexpr (kAcrossNodes<Transport>) {
    for (int expert = threadIdx.x / 32; expert < launch.num_experts; expert += blockDim.x / 32) {
      const int destination = expert / launch.local_experts;
      if (low_latency::in_my_node(context, launch.ranks_per_node, destination) || !reached.in(destination))
        continue;
      const uint32_t count = refused ? 0u : static_cast<uint32_t>(total[expert]);
      const size_t word =
          launch.layout.dispatch_signal_offset(half, expert % launch.local_experts, context.rank);
      session.signal(destination, launch.layout.signal_id(word), common::low_latency_signal(tag, count));
    }
    session.flush();
  }
  if (threadIdx.x == 0) {
    if (refused) launch.state->refused_sequence = sequence;
    launch.state->sequence = sequence;
  }
}

// The send stage (kSendThreads a block).
template <typename Transport>
__device__ __forceinline__ void dispatch_send(const KernelContext& context,
                                              const LowLatencyDispatchLaunch& launch,
                                              const Transport& transport, int64_t tokens_per_block) {
  extern __shared__ __align__(128) uint8_t dynamic_shared[];
  __shared__ __align__(8) uint64_t row_barrier;
  __shared__ int32_t slot_expert[kMaxSlots];
  __shared__ int32_t slot_position[kMaxSlots];
  __shared__ PeerBits reached;  // whom this call works with (device/rank_mask.cuh)
  const SendSharedLayout layout = send_shared_layout(launch);
  int32_t* sent_before = reinterpret_cast<int32_t*>(dynamic_shared);
  int32_t* total = sent_before + launch.num_experts;
  uint8_t* staging = dynamic_shared + layout.staging_offset;
  // Without fp8 the bf16 row is the message's row: loaded straight into the staging buffer.
  uint8_t* row = launch.use_fp8 ? dynamic_shared + layout.row_offset : staging;

  const uint32_t sequence = low_latency::load_state_word(&launch.state->sequence) + 1;
  const int half = common::low_latency_half(sequence);
  const int64_t first_token = static_cast<int64_t>(blockIdx.x) * tokens_per_block;
  const int64_t end_token = min(launch.num_tokens, first_token + tokens_per_block);
  Session<Transport> session(transport, context.heap, low_latency::grid_warp());
  if constexpr (kAcrossNodes<Transport>)
    low_latency::reset_other_half<Transport>(launch.layout, session, half);

  if (threadIdx.x == 0) {
    ptx::mbarrier_init(&row_barrier, 1);
    ptx::fence_mbarrier_init();
  }
  reached.load(context);  // ends with __syncthreads
  // The first row loads while the routing is counted.
  if (threadIdx.x == 0 && first_token < end_token) load_row(launch, first_token, row, &row_barrier);
  uint32_t phase = 0;

  const bool refused = count_routing(context, launch, reached, first_token, sent_before, total);
  if (refused) {
    if (first_token < end_token) wait_row(&row_barrier, phase);  // the load must land before the block exits
  } else {
    for (int64_t token = first_token; token < end_token; ++token) {
      if (threadIdx.x < 32) place_slots(launch, reached, token, sent_before, slot_expert, slot_position);
      wait_row(&row_barrier, phase);
      if (launch.use_fp8) {
        cast_row_to_fp8(launch, reinterpret_cast<const int4*>(row), staging);
        __syncthreads();
        // The bf16 row has been read: the next one loads during the sends.
        if (threadIdx.x == 0 && token + 1 < end_token) {
          ptx::fence_proxy_async_shared();
          load_row(launch, token + 1, row, &row_barrier);
        }
      } else {
        __syncthreads();
      }
      if constexpr (kAcrossNodes<Transport>) {
        if (token_leaves_node(context, launch, slot_expert))
          stage_message_in_heap(context, launch, token, staging);
      }
      send_slots<Transport>(context, launch, session, half, token, staging, slot_expert, slot_position);
      __syncthreads();
      if (!launch.use_fp8 && threadIdx.x == 0 && token + 1 < end_token) {
        ptx::fence_proxy_async_shared();
        load_row(launch, token + 1, row, &row_barrier);
      }
    }
  }
  // The puts' sources (send area, source fields) may be rewritten by the next send kernel.
  if constexpr (kAcrossNodes<Transport>) session.flush();
  if (low_latency::finish_send_block(context, launch.state)) {
    publish_counts<Transport>(context, launch, reached, session, half, sequence, total, refused);
  }
}

// ---- receive ------------------------------------------------------------------------------------

// One lane: the count of (local expert, source), once its rows are in this rank's slots; -1 when a
// wait failed. Within the node the count's store follows the rows; across nodes the rows' puts
// carry their own adds (cuda/low_latency/link.cuh).
template <typename Transport>
__device__ __forceinline__ int64_t wait_for_count(const KernelContext& context,
                                                  const LowLatencyDispatchLaunch& launch,
                                                  const Session<Transport>& session, int half,
                                                  uint32_t sequence, int local, int source,
                                                  const WaitSite& site) {
  const uint32_t tag = common::low_latency_call_tag(sequence, launch.signature);
  const low_latency::ShapeRefusal refusal{&launch.state->mismatched_sequence, sequence};
  if constexpr (kAcrossNodes<Transport>) {
    if (!low_latency::in_my_node(context, launch.ranks_per_node, source)) {
      return low_latency::wait_across_nodes<Transport>(
          context, session, launch.layout, launch.layout.dispatch_signal_offset(half, local, source),
          launch.layout.dispatch_landed_offset(half, local, source), tag, site, refusal);
    }
  }
  return low_latency::wait_for_signal(
      context, launch.layout.dispatch_signal(context.heap.base, half, local, source), tag, site, refusal);
}

// Every (local expert, source) count of this call, into the table; false (in every thread) when a
// wait failed. NOTES: only warp 0 polls (the signals arrive together, so waiting for them in turn
// costs little), which keeps the polling of all ranks' blocks off the memory system the senders use.
template <typename Transport>
__device__ bool wait_for_counts(const KernelContext& context, const LowLatencyDispatchLaunch& launch,
                                const Session<Transport>& session, int half, uint32_t sequence,
                                const ExpertMajorTable& table, const PeerBits& reached) {
  const int num_ranks = context.num_ranks;
  bool arrived = true;
  const int waiters = threadIdx.x < 32 ? launch.local_experts * num_ranks : 0;
  for (int i = threadIdx.x; i < waiters; i += 32) {
    const int local = i / num_ranks;
    const int source = i % num_ranks;
    const WaitSite site{common::WaitRole::low_latency_dispatch_receiver, common::WaitTarget::expert_signal,
                        -1, source};
    // A masked source (or this rank masked in its own view) sends nothing and is not awaited: the
    // block's snapshot `reached` says so; a peer masked during its wait ends the wait (link.cuh).
    const bool left_out = !reached.in(source);
    // Not timed when left out: nothing is awaited.
    int64_t count = left_out ? low_latency::kPeerMasked
                             : low_latency::timed_wait(launch.wait_recv_cost_stats, source, [&]() -> int64_t {
                                 return arrived ? wait_for_count<Transport>(context, launch, session, half,
                                                                            sequence, local, source, site)
                                                : -1;
                               });
    if (count == low_latency::kPeerMasked) {
      count = 0;
    } else if (count < 0) {
      arrived = false;
      count = 0;
    }
    if (count > launch.max_tokens_per_rank) {
      // Only if ranks disagree on max_tokens_per_rank (senders refuse more): never read past it.
      if (blockIdx.x == 0) {
        const WaitSite over{common::WaitRole::low_latency_dispatch_receiver, common::WaitTarget::capacity, -1,
                            source};
        record_wait_failure(context, over, launch.max_tokens_per_rank, count, 0, /*abort_rank=*/false);
      }
      count = launch.max_tokens_per_rank;
    }
    table.count[i] = static_cast<int32_t>(count);
  }
  if (__syncthreads_and(arrived) == 0) return false;
  // A source masked during the waits (a timeout of this or another block) is left out whole, also
  // where its count had arrived. NOTES: blocks reread the mask at slightly different moments, so in
  // the call during which a timeout masks a peer their tables may still differ on that peer's rows
  // (Config::mask_ranks_on_timeout says so); every row stays within its expert's bounds either way.
  for (int i = threadIdx.x; i < launch.local_experts * num_ranks; i += blockDim.x) {
    if (context.mask.masked(i % num_ranks)) table.count[i] = 0;
  }
  __syncthreads();
  return true;
}

// Block 0: recv_count and layout_range.
__device__ void write_layout(const LowLatencyDispatchLaunch& launch, const ExpertMajorTable& table) {
  for (int local = threadIdx.x; local < table.local_experts; local += blockDim.x) {
    launch.recv_count[local] = table.expert_start[local + 1] - table.expert_start[local];
  }
  for (int i = threadIdx.x; i < table.local_experts * table.num_ranks; i += blockDim.x) {
    launch.layout_range[2 * i] = table.begin[i];
    launch.layout_range[2 * i + 1] = table.count[i];
    if (launch.kept_layout_range) {
      launch.kept_layout_range[2 * i] = table.begin[i];
      launch.kept_layout_range[2 * i + 1] = table.count[i];
    }
  }
}

// src_info (and the handle's src_slot and kept src_info) are -1 past each expert's received rows.
__device__ void mark_unused_rows(const LowLatencyDispatchLaunch& launch, const ExpertMajorTable& table,
                                 int64_t rows_per_expert) {
  const int64_t rows = table.local_experts * rows_per_expert;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; row < rows; row += stride) {
    const int local = static_cast<int>(row / rows_per_expert);
    if (row % rows_per_expert >= table.expert_start[local + 1] - table.expert_start[local]) {
      launch.src_info[row] = -1;
      if (launch.kept_src_info) launch.kept_src_info[row] = -1;
      launch.src_slot[row] = -1;
    }
  }
}

// One warp: the message in `slot` into receive row `row` (row, scales, source).
__device__ void copy_out(const LowLatencyDispatchLaunch& launch, const uint8_t* slot, int64_t row) {
  const common::LowLatencyDispatchMessage& message = launch.message;
  uint8_t* mutable_slot = const_cast<uint8_t*>(slot);
  warp_copy<CopyLoad::no_allocate, kCopyDepth>(launch.recv_x + row * message.row_bytes,
                                               message.row(mutable_slot), message.row_bytes);
  const int lane = lane_id();
  const int num_scales = static_cast<int>(message.num_scales);
  const float* scales = message.scales(mutable_slot);
  if (launch.use_ue8m0) {
    const int words = common::ue8m0_words(num_scales);
    for (int word = lane; word < words; word += 32) {
      uint32_t packed = 0;
      for (int byte = 0; byte < common::kUe8m0PerWord; ++byte) {
        const int index = word * common::kUe8m0PerWord + byte;
        if (index < num_scales)
          packed |= static_cast<uint32_t>(common::ue8m0_exponent(scales[index])) << (8 * byte);
      }
      static_cast<int32_t*>(launch.recv_x_scales)[row * words + word] = static_cast<int32_t>(packed);
    }
  } else {
    for (int i = lane; i < num_scales; i += 32)
      static_cast<float*>(launch.recv_x_scales)[row * num_scales + i] = scales[i];
  }
  if (lane == 0) {
    const int2 source = *reinterpret_cast<const int2*>(message.src_token(mutable_slot));
    launch.src_info[row] = source.x;
    if (launch.kept_src_info) launch.kept_src_info[row] = source.x;
    launch.src_slot[row] = source.y;
  }
}

// The receive stage (kReceiveThreads a block).
template <typename Transport>
__device__ __forceinline__ void dispatch_receive(const KernelContext& context,
                                                 const LowLatencyDispatchLaunch& launch,
                                                 const Transport& transport) {
  extern __shared__ __align__(128) uint8_t dynamic_shared[];
  const uint32_t sequence = low_latency::load_state_word(&launch.state->sequence);
  // A refused call (bad topk_idx on this rank) writes no outputs; the host reports it.
  // NOTES: across nodes the peers' count adds must still be waited for: one landing after this
  // rank's next send kernel zeroed the word would spoil the call after next.
  const bool refused = low_latency::load_state_word(&launch.state->refused_sequence) == sequence;
  if (!kAcrossNodes<Transport> && refused) return;
  const int half = common::low_latency_half(sequence);
  const ExpertMajorTable table =
      ExpertMajorTable::in(dynamic_shared, launch.local_experts, context.num_ranks);
  const Session<Transport> session(transport, context.heap, low_latency::grid_warp());
  __shared__ PeerBits reached;  // whom this call waits for (device/rank_mask.cuh)
  reached.load(context);
  if (!wait_for_counts<Transport>(context, launch, session, half, sequence, table, reached) || refused)
    return;
  table.build();
  if (blockIdx.x == 0) write_layout(launch, table);
  const int64_t rows_per_expert = context.num_ranks * launch.max_tokens_per_rank;
  mark_unused_rows(launch, table, rows_per_expert);

  const int32_t rows = table.total_rows();
  const int warps = static_cast<int>(gridDim.x) * kReceiveWarps;
  for (int32_t flat = blockIdx.x * kReceiveWarps + threadIdx.x / 32; flat < rows; flat += warps) {
    const ExpertMajorTable::Row where = table.locate(flat);
    const uint8_t* slot =
        launch.layout.dispatch_slot(context.heap.base, half, where.expert, where.source, where.position);
    copy_out(launch, slot, where.expert * rows_per_expert + where.index);
  }
}

// Both stages fit one register cap: kSendThreads x 2 * kMinBlocksPerSm and kReceiveThreads x
// kMinBlocksPerSm are the same threads per SM.
static_assert(kSendThreads * 2 == kReceiveThreads, "the dispatch's stages share one launch bound");

// The dispatch, one stage per launch (low_latency::Stage).
template <typename Transport>
__global__ void __launch_bounds__(kReceiveThreads, low_latency::kMinBlocksPerSm)
    dispatch(const __grid_constant__ KernelContext context,
             const __grid_constant__ LowLatencyDispatchLaunch launch,
             const __grid_constant__ Transport transport, low_latency::Stage stage,
             int64_t tokens_per_block) {
  ptx::wait_for_previous_grid();  // launched by launch_dependent: before any global access
  if (stage == low_latency::Stage::send) {
    dispatch_send(context, launch, transport, tokens_per_block);
  } else {
    dispatch_receive(context, launch, transport);
  }
}

}  // namespace

template <typename Transport>
void launch_low_latency_dispatch_send(const KernelContext& context, const LowLatencyDispatchLaunch& launch,
                                      const Transport& transport, cudaStream_t stream) {
  const int64_t tokens_per_block = tokens_per_send_block(launch.num_tokens);
  // At least one block: with no tokens the call still signals its (zero) counts.
  const int64_t blocks = std::max<int64_t>(1, common::ceil_div(launch.num_tokens, tokens_per_block));
  launch_dependent(dispatch<Transport>, static_cast<unsigned>(blocks), kSendThreads,
                   send_shared_layout(launch).total_bytes, stream, context, launch, transport,
                   low_latency::Stage::send, tokens_per_block);
}

template <typename Transport>
void launch_low_latency_dispatch_receive(const KernelContext& context, const LowLatencyDispatchLaunch& launch,
                                         const Transport& transport, const LowLatencyGrid& grid,
                                         cudaStream_t stream) {
  const size_t shared_bytes = ExpertMajorTable::shared_bytes(launch.local_experts, context.num_ranks);
  launch_dependent(dispatch<Transport>, grid.receive_blocks, kReceiveThreads, shared_bytes, stream, context,
                   launch, transport, low_latency::Stage::receive, /*tokens_per_block=*/int64_t{0});
}

template void launch_low_latency_dispatch_send<SingleNode>(const KernelContext&,
                                                           const LowLatencyDispatchLaunch&, const SingleNode&,
                                                           cudaStream_t);
template void launch_low_latency_dispatch_receive<SingleNode>(const KernelContext&,
                                                              const LowLatencyDispatchLaunch&,
                                                              const SingleNode&, const LowLatencyGrid&,
                                                              cudaStream_t);
template void launch_low_latency_dispatch_send<transport::LoopbackDevice>(const KernelContext&,
                                                                          const LowLatencyDispatchLaunch&,
                                                                          const transport::LoopbackDevice&,
                                                                          cudaStream_t);
template void launch_low_latency_dispatch_receive<transport::LoopbackDevice>(const KernelContext&,
                                                                             const LowLatencyDispatchLaunch&,
                                                                             const transport::LoopbackDevice&,
                                                                             const LowLatencyGrid&,
                                                                             cudaStream_t);

// nccl_gin: the same kernels over NCCL's GIN device session (transport/nccl_gin.cuh), compiled wherever the
// build has NCCL's device API so that the kernels keep to the transport's interface; the host does not
// launch them yet (cuda/backend/nccl_gin_choice.cpp refuses the transport: docs/ARCHITECTURE.md, "Not yet").
#if SWITCHYARD_WITH_NCCL_GIN
template void launch_low_latency_dispatch_send<transport::NcclGinDevice>(const KernelContext&,
                                                                         const LowLatencyDispatchLaunch&,
                                                                         const transport::NcclGinDevice&,
                                                                         cudaStream_t);
template void launch_low_latency_dispatch_receive<transport::NcclGinDevice>(const KernelContext&,
                                                                            const LowLatencyDispatchLaunch&,
                                                                            const transport::NcclGinDevice&,
                                                                            const LowLatencyGrid&,
                                                                            cudaStream_t);
#endif

namespace {

template <typename Transport>
void prepare_dispatch_kernels_for(int max_shared_bytes) {
  preload_kernel(dispatch<Transport>);
  SY_CUDA_CHECK(cudaFuncSetAttribute(dispatch<Transport>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     max_shared_bytes));
}

}  // namespace

void prepare_low_latency_dispatch_kernels(int max_shared_bytes) {
  prepare_dispatch_kernels_for<SingleNode>(max_shared_bytes);
  prepare_dispatch_kernels_for<transport::LoopbackDevice>(max_shared_bytes);
}

}  // namespace switchyard::cuda
