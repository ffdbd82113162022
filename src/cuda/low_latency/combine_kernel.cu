// The CUDA `low_latency` combine (common/low_latency_protocol.hpp).
//
// Send kernel (expert rank): every block rebuilds the dispatch's expert-major row table from
// layout_range; its warps take the received rows across the grid, one row per warp, and store each
// expert output row into its home rank's combine row for (top-k slot, token): as bf16, or with
// use_logfmt packed as LogFMT-10 (common/logfmt_wire.hpp, cuda/low_latency/logfmt.cuh), only the
// packed bytes. The block that finishes last signals every home rank once per local expert, with the
// row count (release).
//
// Receive kernel (home rank): every block waits for the signals of all experts (acquire, bounded);
// then each thread reduces 8 channels of one token over its valid slots in increasing order with
// fp32 fused multiply-adds from +0, rounded to bf16 once (DESIGN.md), as the CPU engine does.
//
// Across nodes (cuda/low_latency/link.cuh): a row for a home rank of another node is a put with a
// rows-landed add, from the heap: from y itself when y is the combine buffer (zero-copy), else from
// the row's place in the combine buffer, where the warp first copies it (as DeepEP stages it in its
// send buffer), or packs it with use_logfmt (at the combine row's stride; the put then carries the
// packed length). The count signal is a transport add; the receiver waits for a remote expert's
// count, then for its rows to have landed.
#include "common/logfmt_wire.hpp"
#include "cuda/backend/dependent_launch.hpp"
#include "cuda/backend/kernel_preload.hpp"
#include "cuda/low_latency/device.cuh"
#include "cuda/low_latency/kernels.hpp"
#include "cuda/low_latency/link.cuh"
#include "cuda/low_latency/logfmt.cuh"
#include "device/bf16x8.cuh"
#include "device/cuda_check.hpp"
#include "device/ptx.cuh"
#include "transport/nccl_gin.cuh"

namespace switchyard::cuda {

namespace {

using low_latency::ExpertMajorTable;
using low_latency::kAcrossNodes;
using low_latency::kCopyDepth;
using low_latency::Session;

constexpr int kSendWarps = 16;
constexpr int kSendThreads = kSendWarps * 32;
constexpr int kReceiveThreads = 512;
// Slots whose rows are loaded together before their multiply-adds (in slot order) run; 8 would
// spill at the 64-register cap.
constexpr int kSlotBatch = 4;
// The same under use_logfmt, where a slot's loads are two dependent rounds (cast bits, then the
// chunk). NOTES: 4 spills 34 B at the cap on one node (2 does not, with half the loads in flight);
// neither is measured yet.
constexpr int kLogfmtSlotBatch = 4;

// ---- send ---------------------------------------------------------------------------------------

// The last block: one signal per (local expert, home rank) in the home rank's heap, with the count
// of rows. Stored within the node; across nodes a transport add, one warp per pair.
template <typename Transport>
__device__ void publish_rows_sent(const KernelContext& context, const LowLatencyCombineLaunch& launch,
                                  const PeerBits& reached, Session<Transport>& session, int half,
                                  uint32_t sequence, const ExpertMajorTable& table) {
  const int num_ranks = context.num_ranks;
  const uint32_t tag = common::low_latency_call_tag(sequence, launch.signature);
  for (int i = threadIdx.x; i < launch.local_experts * num_ranks; i += blockDim.x) {
    const int local = i / num_ranks;
    const int home = i % num_ranks;
    if (!reached.in(home)) continue;  // a masked home awaits nothing
    if constexpr (kAcrossNodes<Transport>) {
      if (!low_latency::in_my_node(context, launch.ranks_per_node, home)) continue;
    }
    uint64_t* signal = context.heap.map(
        launch.layout.combine_signal(context.heap.base, half, context.rank * launch.local_experts + local),
        home);
    st_release_peer(context, signal, common::low_latency_signal(tag, static_cast<uint32_t>(table.count[i])));
  }
  if constexpr (kAcrossNodes<Transport>) {
    for (int i = threadIdx.x / 32; i < launch.local_experts * num_ranks; i += blockDim.x / 32) {
      const int local = i / num_ranks;
      const int home = i % num_ranks;
      if (low_latency::in_my_node(context, launch.ranks_per_node, home) || !reached.in(home)) continue;
      const size_t word =
          launch.layout.combine_signal_offset(half, context.rank * launch.local_experts + local);
      session.signal(home, launch.layout.signal_id(word),
                     common::low_latency_signal(tag, static_cast<uint32_t>(table.count[i])));
    }
    session.flush();
  }
  if (threadIdx.x == 0) launch.state->sequence = sequence;
}

// One warp, a row whose home rank is on another node: a put with a rows-landed add, its source in
// this rank's heap (see the file comment).
template <typename Transport, bool kLogfmt>
__device__ void put_row_across_nodes(const KernelContext& context, const LowLatencyCombineLaunch& launch,
                                     Session<Transport>& session, int half, int home, int global_expert,
                                     int64_t row, int32_t slot, int32_t token) {
  const common::LowLatencyLayout& layout = launch.layout;
  uint32_t row_bytes = static_cast<uint32_t>(launch.hidden) * 2;
  size_t source = 0;
  if constexpr (kLogfmt) {
    // Packed at the combine row's stride (the staging area has room: LowLatencyLayout::staging_bytes);
    // never y's place, which the plan keeps out of the combine buffer with use_logfmt across nodes.
    // NOTES: the put's length is rounded up to 16 bytes (at most 8 more, within both rows' strides),
    // so that it is copied with 16-byte accesses (the loopback transport's byte copy is far slower).
    source = layout.staging_offset() + static_cast<size_t>(row) * layout.combine_row_bytes;
    row_bytes = static_cast<uint32_t>(
        common::align_up(low_latency::pack_logfmt_row(context.heap.base + source,
                                                      launch.y + row * launch.hidden, launch.hidden),
                         common::kLowLatencyAlignment));
    __syncwarp();
  } else if (launch.y_heap_offset >= 0) {
    source = static_cast<size_t>(launch.y_heap_offset) + static_cast<size_t>(row) * row_bytes;
  } else {
    // The combine buffer holds [L, R * max, H'] rows of this call's shape, as y does.
    source = layout.staging_offset() + static_cast<size_t>(row) * row_bytes;
    warp_copy<CopyLoad::read_only, kCopyDepth>(context.heap.base + source, launch.y + row * launch.hidden,
                                               row_bytes);
    __syncwarp();
  }
  session.put_signal(home, layout.combine_row_offset(half, slot, token), source, row_bytes,
                     layout.signal_id(layout.combine_landed_offset(half, global_expert)), 1);
}

// The send stage (kSendThreads a block): rows as bf16, or packed under kLogfmt.
template <typename Transport, bool kLogfmt>
__device__ __forceinline__ void combine_send(const KernelContext& context,
                                             const LowLatencyCombineLaunch& launch,
                                             const Transport& transport) {
  extern __shared__ __align__(128) uint8_t dynamic_shared[];
  __shared__ PeerBits reached;  // whom this call works with (device/rank_mask.cuh)
  const uint32_t sequence = low_latency::load_state_word(&launch.state->sequence) + 1;
  const int half = common::low_latency_half(sequence);
  Session<Transport> session(transport, context.heap, low_latency::grid_warp());
  reached.load(context);  // ends with __syncthreads
  if constexpr (kAcrossNodes<Transport>)
    low_latency::reset_other_half<Transport>(launch.layout, session, half);
  const int num_ranks = context.num_ranks;
  const ExpertMajorTable table = ExpertMajorTable::in(dynamic_shared, launch.local_experts, num_ranks);
  for (int i = threadIdx.x; i < launch.local_experts * num_ranks; i += blockDim.x) {
    // NOTES: clamped, so that a layout_range that is not a finished dispatch's (e.g. one whose
    // dispatch was refused on the device) can never send rows outside the receive areas.
    const int32_t count = __ldg(launch.layout_range + 2 * i + 1);
    table.count[i] =
        count < 0 ? 0 : static_cast<int32_t>(min(static_cast<int64_t>(count), launch.max_tokens_per_rank));
  }
  __syncthreads();
  table.build();

  const int64_t rows_per_expert = num_ranks * launch.max_tokens_per_rank;
  const uint32_t row_bytes = static_cast<uint32_t>(launch.hidden) * 2;
  const int32_t rows = table.total_rows();
  const int warps = static_cast<int>(gridDim.x) * kSendWarps;
  for (int32_t flat = blockIdx.x * kSendWarps + threadIdx.x / 32; flat < rows; flat += warps) {
    const ExpertMajorTable::Row where = table.locate(flat);
    const int64_t row = where.expert * rows_per_expert + where.index;
    // A masked home gets nothing (its count is not sent either: publish_rows_sent).
    if (!reached.in(where.source)) continue;
    const int32_t token = __ldg(launch.src_info + row);
    const int32_t slot = __ldg(launch.src_slot + row);
    if (token < 0 || token >= launch.layout.max_tokens_per_rank || slot < 0 || slot >= launch.layout.topk) {
      if constexpr (kAcrossNodes<Transport>) {
        // Not sent, yet counted in the published count: its add alone, so that the home rank is not
        // left waiting for it.
        if (!low_latency::in_my_node(context, launch.ranks_per_node, where.source)) {
          const int global_expert = context.rank * launch.local_experts + where.expert;
          session.signal(where.source,
                         launch.layout.signal_id(launch.layout.combine_landed_offset(half, global_expert)),
                         1);
        }
      }
      continue;
    }
    if constexpr (kAcrossNodes<Transport>) {
      if (!low_latency::in_my_node(context, launch.ranks_per_node, where.source)) {
        put_row_across_nodes<Transport, kLogfmt>(context, launch, session, half, where.source,
                                                 context.rank * launch.local_experts + where.expert, row,
                                                 slot, token);
        continue;
      }
    }
    uint8_t* target =
        context.heap.map(launch.layout.combine_row(context.heap.base, half, slot, token), where.source);
    if constexpr (kLogfmt) {
      low_latency::pack_logfmt_row(target, launch.y + row * launch.hidden, launch.hidden);
    } else {
      warp_copy<CopyLoad::read_only, kCopyDepth>(target, launch.y + row * launch.hidden, row_bytes);
    }
  }
  // The puts' sources (the combine buffer) may be rewritten by the next combine's send kernel.
  if constexpr (kAcrossNodes<Transport>) session.flush();
  if (low_latency::finish_send_block(context, launch.state)) {
    publish_rows_sent<Transport>(context, launch, reached, session, half, sequence, table);
  }
}

// ---- receive ------------------------------------------------------------------------------------

// Eight channels of one token: out = bf16(sum over valid slots j ascending of w[j] * y_j), with
// fmaf from +0, or from bias0 + bias1 (kBias; DESIGN.md, expert-major combine; common/combine_bias.hpp),
// each row as LogFMT decodes it under kLogfmt. Slots whose expert is on a masked rank are left out, as
// if topk_idx held -1 there, unless kEveryone (no rank is masked): then no slot needs its expert's rank.
// NOTES: kEveryone is a template parameter, not a flag tested in the slot loop: this loop runs for every
// 8 channels of every slot, and with the rank lookup (a division) beside the loads, even behind a
// uniform flag, the compiler no longer issued the kSlotBatch loads together; the receive half took
// 106-123 us against 78-81 before the rank masks, in one bisect run (bench/NOTES.md, session 13).
// Under kLogfmt the rows are packed (common/logfmt_wire.hpp): a slot's loads are the cast bits that
// place the item's block in the row, then the item's chunk of it (cuda/low_latency/logfmt.cuh).
// NOTES: the modes are template parameters of the kernel (`combine`), not branches in the slot loop:
// with the LogFMT decode beside the plain multiply-adds, the plain loop's registers were sized for the
// decode's and it spilled at the 64-register cap (the receive half's time did not move with the fix,
// bench/NOTES.md, session 12).
template <bool kLogfmt, bool kBias, bool kEveryone>
__device__ __forceinline__ int4 reduce_eight(const KernelContext& context,
                                             const LowLatencyCombineLaunch& launch, const PeerBits& reached,
                                             int half, int64_t token, int64_t column) {
  float accumulator[8];
  if constexpr (kBias) {
    const int64_t row = token * launch.hidden;
    start_bf16x8(accumulator, launch.bias0 ? launch.bias0 + row : nullptr,
                 launch.bias1 ? launch.bias1 + row : nullptr, static_cast<uint32_t>(column));
  } else {
#pragma unroll
    for (int i = 0; i < 8; ++i) accumulator[i] = 0.0f;  // = +0.0 + +0.0, the start without biases
  }
  const int blocks = launch.hidden / common::kLogfmtBlock;  // kLogfmt: the item's block and chunk in it
  const int block = static_cast<int>(column / (common::kLogfmtBlock / 8));
  const int chunk = static_cast<int>(column % (common::kLogfmtBlock / 8));
  constexpr int kBatch = kLogfmt ? kLogfmtSlotBatch : kSlotBatch;
  for (int first = 0; first < launch.topk; first += kBatch) {
    int4 values[kBatch];
    uint32_t places[kBatch];  // kLogfmt: low_latency::logfmt_block_place
    low_latency::LogfmtChunk chunks[kBatch];
    float weights[kBatch];
    bool valid[kBatch];
    // Loads first (up to kBatch in flight), then the multiply-adds in slot order.
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int slot = first + u;
      const int64_t expert = slot < launch.topk ? __ldg(launch.topk_idx + token * launch.topk + slot) : -1;
      if constexpr (kEveryone) {
        valid[u] = expert >= 0;
      } else {
        valid[u] = expert >= 0 && expert < launch.num_experts &&
                   reached.in(static_cast<int>(expert) / launch.local_experts);
      }
      if (valid[u]) {
        weights[u] = __ldg(launch.topk_weights + token * launch.topk + slot);
        if constexpr (kLogfmt) {
          places[u] = low_latency::logfmt_block_place(
              launch.layout.combine_row(context.heap.base, half, slot, token), blocks, block);
        } else {
          const int4* row =
              reinterpret_cast<const int4*>(launch.layout.combine_row(context.heap.base, half, slot, token));
          values[u] = ptx::ld_weak_no_allocate_v4(row + column);
        }
      }
    }
    if constexpr (kLogfmt) {
#pragma unroll
      for (int u = 0; u < kBatch; ++u) {
        if (valid[u]) {
          chunks[u] = low_latency::load_logfmt_chunk(
              launch.layout.combine_row(context.heap.base, half, first + u, token), places[u], chunk);
        }
      }
    }
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      if (!valid[u]) continue;
      if constexpr (kLogfmt) {
        float decoded[8];
        low_latency::decode_logfmt_chunk(chunks[u], (places[u] & 1u) != 0, decoded);
#pragma unroll
        for (int i = 0; i < 8; ++i) accumulator[i] = fmaf(weights[u], decoded[i], accumulator[i]);
      } else {
        const int32_t words[4] = {values[u].x, values[u].y, values[u].z, values[u].w};
#pragma unroll
        for (int w = 0; w < 4; ++w) {
          const uint32_t bits = static_cast<uint32_t>(words[w]);
          accumulator[2 * w] = fmaf(weights[u], common::bf16_to_float(static_cast<uint16_t>(bits & 0xffffu)),
                                    accumulator[2 * w]);
          accumulator[2 * w + 1] = fmaf(weights[u], common::bf16_to_float(static_cast<uint16_t>(bits >> 16)),
                                        accumulator[2 * w + 1]);
        }
      }
    }
  }
  int32_t out[4];
#pragma unroll
  for (int w = 0; w < 4; ++w) {
    out[w] =
        static_cast<int32_t>(static_cast<uint32_t>(common::float_to_bf16(accumulator[2 * w])) |
                             (static_cast<uint32_t>(common::float_to_bf16(accumulator[2 * w + 1])) << 16));
  }
  return make_int4(out[0], out[1], out[2], out[3]);
}

// The block's share of combined_x, in one mode: items (8 channels of one token) strided over the grid.
template <bool kLogfmt, bool kBias, bool kEveryone>
__device__ void receive_items(const KernelContext& context, const LowLatencyCombineLaunch& launch,
                              const PeerBits& reached, int half) {
  const int64_t columns = launch.hidden / 8;
  const int64_t items = launch.num_tokens * columns;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  int4* combined = reinterpret_cast<int4*>(launch.combined_x);
  for (int64_t item = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; item < items;
       item += stride) {
    combined[item] = reduce_eight<kLogfmt, kBias, kEveryone>(context, launch, reached, half, item / columns,
                                                             item % columns);
  }
}

// One lane: whether `expert`'s rows for this (home) rank are all here; false when a wait failed.
// Within the node the count's store follows the rows; across nodes the rows' puts carry their own
// adds (cuda/low_latency/link.cuh).
template <typename Transport>
__device__ __forceinline__ bool wait_for_expert(const KernelContext& context,
                                                const LowLatencyCombineLaunch& launch,
                                                const Session<Transport>& session, int half,
                                                uint32_t sequence, int expert, const WaitSite& site) {
  const uint32_t tag = common::low_latency_call_tag(sequence, launch.signature);
  const low_latency::ShapeRefusal refusal{&launch.state->mismatched_sequence, sequence};
  if constexpr (kAcrossNodes<Transport>) {
    if (!low_latency::in_my_node(context, launch.ranks_per_node, expert / launch.local_experts)) {
      const int64_t count = low_latency::wait_across_nodes<Transport>(
          context, session, launch.layout, launch.layout.combine_signal_offset(half, expert),
          launch.layout.combine_landed_offset(half, expert), tag, site, refusal);
      return count >= 0 || count == low_latency::kPeerMasked;
    }
  }
  const int64_t count = low_latency::wait_for_signal(
      context, launch.layout.combine_signal(context.heap.base, half, expert), tag, site, refusal);
  return count >= 0 || count == low_latency::kPeerMasked;
}

// The receive stage (kReceiveThreads a block), in one mode (kLogfmt: use_logfmt; kBias: bias0 or bias1
// given): see reduce_eight.
template <typename Transport, bool kLogfmt, bool kBias>
__device__ __forceinline__ void combine_receive(const KernelContext& context,
                                                const LowLatencyCombineLaunch& launch,
                                                const Transport& transport) {
  __shared__ PeerBits reached;  // whom this call works with (device/rank_mask.cuh)
  const uint32_t sequence = low_latency::load_state_word(&launch.state->sequence);
  const int half = common::low_latency_half(sequence);
  const Session<Transport> session(transport, context.heap, low_latency::grid_warp());
  // Warp 0 waits for every expert's signal (see the dispatch receiver's wait_for_counts), but for
  // those of ranks this rank does not reach (masked, or this rank masked in its own view: it awaits
  // nothing), as the block's snapshot says; a peer masked during its wait ends the wait (link.cuh).
  reached.load(context);
  bool arrived = true;
  const int waiters = threadIdx.x < 32 ? launch.num_experts : 0;
  for (int expert = threadIdx.x; expert < waiters && arrived; expert += 32) {
    const int source = expert / launch.local_experts;
    if (!reached.in(source)) continue;
    const WaitSite site{common::WaitRole::low_latency_combine_receiver, common::WaitTarget::expert_signal, -1,
                        source};
    arrived = low_latency::timed_wait(launch.wait_recv_cost_stats, source, [&] {
      return wait_for_expert<Transport>(context, launch, session, half, sequence, expert, site);
    });
  }
  if (!__syncthreads_and(arrived)) return;
  reached.load(context);  // again after the waits: a peer they masked is left out of the reduction
  if (reached.covers(context.num_ranks)) {
    receive_items<kLogfmt, kBias, true>(context, launch, reached, half);
  } else {
    receive_items<kLogfmt, kBias, false>(context, launch, reached, half);
  }
}

static_assert(kSendThreads == kReceiveThreads, "the combine's stages share one launch bound");

// The combine, one stage per launch (low_latency::Stage), one kernel per mode. The send stage packs
// the rows under kLogfmt and is otherwise the same in every mode; a call launches both stages of its
// mode's kernel.
template <typename Transport, bool kLogfmt, bool kBias>
__global__ void __launch_bounds__(kReceiveThreads, low_latency::kMinBlocksPerSm)
    combine(const __grid_constant__ KernelContext context,
            const __grid_constant__ LowLatencyCombineLaunch launch,
            const __grid_constant__ Transport transport, low_latency::Stage stage) {
  ptx::wait_for_previous_grid();  // launched by launch_dependent: before any global access
  if (stage == low_latency::Stage::send) {
    combine_send<Transport, kLogfmt>(context, launch, transport);
  } else {
    combine_receive<Transport, kLogfmt, kBias>(context, launch, transport);
  }
}

template <typename Transport>
using CombineKernel = void (*)(KernelContext, LowLatencyCombineLaunch, Transport, low_latency::Stage);

// The kernel of the call's mode (see reduce_eight).
template <typename Transport>
CombineKernel<Transport> combine_kernel_for(const LowLatencyCombineLaunch& launch) {
  const bool biased = launch.bias0 != nullptr || launch.bias1 != nullptr;
  if (launch.use_logfmt) return biased ? combine<Transport, true, true> : combine<Transport, true, false>;
  return biased ? combine<Transport, false, true> : combine<Transport, false, false>;
}

}  // namespace

template <typename Transport>
void launch_low_latency_combine_send(const KernelContext& context, const LowLatencyCombineLaunch& launch,
                                     const Transport& transport, const LowLatencyGrid& grid,
                                     cudaStream_t stream) {
  const size_t shared_bytes = ExpertMajorTable::shared_bytes(launch.local_experts, context.num_ranks);
  launch_dependent(combine_kernel_for<Transport>(launch), grid.send_blocks, kSendThreads, shared_bytes,
                   stream, context, launch, transport, low_latency::Stage::send);
}

template <typename Transport>
void launch_low_latency_combine_receive(const KernelContext& context, const LowLatencyCombineLaunch& launch,
                                        const Transport& transport, const LowLatencyGrid& grid,
                                        cudaStream_t stream) {
  launch_dependent(combine_kernel_for<Transport>(launch), grid.receive_blocks, kReceiveThreads, 0, stream,
                   context, launch, transport, low_latency::Stage::receive);
}

template void launch_low_latency_combine_send<SingleNode>(const KernelContext&,
                                                          const LowLatencyCombineLaunch&, const SingleNode&,
                                                          const LowLatencyGrid&, cudaStream_t);
template void launch_low_latency_combine_receive<SingleNode>(const KernelContext&,
                                                             const LowLatencyCombineLaunch&,
                                                             const SingleNode&, const LowLatencyGrid&,
                                                             cudaStream_t);
template void launch_low_latency_combine_send<transport::LoopbackDevice>(const KernelContext&,
                                                                         const LowLatencyCombineLaunch&,
                                                                         const transport::LoopbackDevice&,
                                                                         const LowLatencyGrid&, cudaStream_t);
template void launch_low_latency_combine_receive<transport::LoopbackDevice>(const KernelContext&,
                                                                            const LowLatencyCombineLaunch&,
                                                                            const transport::LoopbackDevice&,
                                                                            const LowLatencyGrid&,
                                                                            cudaStream_t);

// nccl_gin: the same kernels over NCCL's GIN device session (transport/nccl_gin.cuh), compiled wherever the
// build has NCCL's device API so that the kernels keep to the transport's interface; the host does not
// launch them yet (cuda/backend/nccl_gin_choice.cpp refuses the transport: docs/ARCHITECTURE.md, "Not yet").
#if SWITCHYARD_WITH_NCCL_GIN
template void launch_low_latency_combine_send<transport::NcclGinDevice>(const KernelContext&,
                                                                        const LowLatencyCombineLaunch&,
                                                                        const transport::NcclGinDevice&,
                                                                        const LowLatencyGrid&, cudaStream_t);
template void launch_low_latency_combine_receive<transport::NcclGinDevice>(const KernelContext&,
                                                                           const LowLatencyCombineLaunch&,
                                                                           const transport::NcclGinDevice&,
                                                                           const LowLatencyGrid&,
                                                                           cudaStream_t);
#endif

namespace {

template <typename Transport>
void prepare_combine_kernels_for(int max_shared_bytes) {
  for (const CombineKernel<Transport> kernel :
       {combine<Transport, false, false>, combine<Transport, false, true>, combine<Transport, true, false>,
        combine<Transport, true, true>}) {
    preload_kernel(kernel);
    SY_CUDA_CHECK(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, max_shared_bytes));
  }
}

}  // namespace

void prepare_low_latency_combine_kernels(int max_shared_bytes) {
  prepare_combine_kernels_for<SingleNode>(max_shared_bytes);
  prepare_combine_kernels_for<transport::LoopbackDevice>(max_shared_bytes);
}

}  // namespace switchyard::cuda
