// The CUDA `symmetric` dispatch, one kernel (DESIGN.md, "Symmetric engine"; the protocol in
// common/symmetric_protocol.hpp; grid and warp roles in cuda/symmetric/kernels.hpp):
//   1. publish: block 0 writes this rank's source record (x's address when zero-copy, else 0); this
//      rank's rows go into its input buffer (bf16 publish: the TMA pipeline; fp8: every warp, after
//      the routing, casts them, or copies rows the caller cast with their scales; bf16 zero-copy:
//      nothing, the receivers read x in place), and helper warps (block 0's with the bf16 publish,
//      every block's otherwise) route its tokens into the experts' ranks' workspaces
//      (cuda/symmetric/routing.cuh);
//   2. the cross-rank barrier (device/cross_rank_barrier.cuh);
//   3. pull: every block walks its share of the rows routed here, peers interleaved
//      (cuda/symmetric/tables.cuh), and TMA-loads each from its source's input buffer at the mapped
//      address, then TMA-stores it into the expert-major output (or, with SymmetricPull::warps, every
//      warp copies its share of the block's rows with 16-byte loads and stores); the helper warps write
//      recv_count, layout_range and src_info past the received rows. With an expert_capacity C, only each
//      expert's first C rows are pulled, and block 0's helpers first look for an expert of any rank
//      that received more (every rank finds the same one, and records it as a CapacityError);
//   4. release (cuda/symmetric/release.cuh): every block counts itself out once its loads are
//      consumed; the last one releases the call into its done word in every peer's heap and, after a
//      zero-copy call, waits until every peer released it into ours: then nobody reads x any more.
// Rank masks (device/rank_mask.cuh): the routing writes only into the workspaces of ranks this rank
// reaches when the block starts; the barrier neither signals nor awaits masked ranks (and masks, under
// Config::mask_ranks_on_timeout, one that does not arrive); after it every block reads the mask once
// (the same ranks in every block: the barrier's masking is done before its closing grid sync) and
// leaves out every source that does not take part: its counts count as 0, its record and rows are
// never read. A rank masked in its own view writes nothing to peers and receives nothing. Only an
// update_mask on another stream during the call can make blocks disagree; outputs stay in bounds.
#include <climits>

#include "common/fp8_cast.hpp"
#include "cuda/backend/dependent_launch.hpp"
#include "cuda/backend/kernel_preload.hpp"
#include "cuda/symmetric/kernels.hpp"
#include "cuda/symmetric/pipeline.cuh"
#include "cuda/symmetric/push.cuh"
#include "cuda/symmetric/release.cuh"
#include "cuda/symmetric/routing.cuh"
#include "cuda/symmetric/stamps.cuh"
#include "cuda/symmetric/tables.cuh"
#include "device/cross_rank_barrier.cuh"
#include "device/cuda_check.hpp"
#include "device/fp8_cast.cuh"
#include "device/rank_mask.cuh"
#include "device/warp_copy.cuh"
#include "device/warp_group.cuh"

namespace switchyard::cuda {

namespace {

// What every role of a block knows about the call.
struct DispatchCall {
  int half;
  int num_ranks;
  int blocks;
  bool fp8;
  uint32_t row_bytes;    // bytes of a row in the input buffer and in recv_x
  uint32_t scale_bytes;  // bytes of a row's scales as loaded (16-aligned; 0 without fp8)
};

// Loads one row into the pipeline, in pieces of at most piece_bytes; the last piece carries the
// scales (if any) and the row's extras.
__device__ __forceinline__ bool push_row(PipelineProducer& producer, const KernelContext& context,
                                         const uint8_t* source, uint8_t* destination, uint32_t row_bytes,
                                         uint32_t piece_bytes, int64_t row, const void* scales,
                                         uint32_t scale_bytes) {
  for (uint32_t offset = 0; offset < row_bytes; offset += piece_bytes) {
    const uint32_t bytes = row_bytes - offset < piece_bytes ? row_bytes - offset : piece_bytes;
    const bool last = offset + bytes >= row_bytes;
    if (!producer.push(context, source + offset, destination + offset, bytes, last ? kStageRowEnd : 0u, row,
                       last ? scales : nullptr, last ? scale_bytes : 0u)) {
      return false;
    }
  }
  return true;
}

// ---- 1. publish -----------------------------------------------------------------------------------

// Producer (bf16): this block's tokens t = block, block + B, ... from x into the input buffer.
__device__ void publish_producer(const KernelContext& context, const SymmetricDispatchLaunch& launch,
                                 const DispatchCall& call, PipelineProducer& producer) {
  if (lane_id() != 0) return;
  const common::SymHeap& heap = context.heap;
  const uint8_t* x = reinterpret_cast<const uint8_t*>(launch.x);
  for (int64_t token = blockIdx.x; token < launch.num_tokens; token += call.blocks) {
    uint8_t* published = launch.token.row(launch.layout.input_token(heap.base, call.half, token));
    if (!push_row(producer, context, x + token * call.row_bytes, published, call.row_bytes,
                  launch.grid.piece_bytes, token, nullptr, 0)) {
      return;
    }
  }
  producer.finish(context);
}

// Block 0, thread 0, before the barrier (whose release carries it to the receivers): where the
// receivers find this call's rows. x is complete by stream order.
__device__ void announce_source(const KernelContext& context, const SymmetricDispatchLaunch& launch,
                                uint64_t sequence, int half) {
  common::SymmetricSourceRecord* record = launch.layout.source_record(context.heap.base, half);
  record->x = launch.x_rows.where;
  record->x_at = launch.x_rows.at;
  record->row_stride = launch.x_row_stride;
  record->signature = launch.signature;
  record->recv_at = launch.push ? launch.recv_rows.at : common::SymmetricRowsAt::input_buffer;
  record->recv_x = launch.recv_rows.where;
  record->recv_x_scales = launch.recv_scales;
  record->recv_capacity = launch.capacity;
  record->sequence = sequence;
}

// Consumer extras (bf16 publish): the token's top-k ids next to its row.
struct PublishTopk {
  const KernelContext& context;
  const SymmetricDispatchLaunch& launch;
  int half;
  __device__ __forceinline__ void operator()(const StageDescriptor& descriptor, const uint8_t*) const {
    const int64_t token = descriptor.row;
    int64_t* ids = launch.token.topk_idx(launch.layout.input_token(context.heap.base, half, token));
    for (int slot = lane_id(); slot < launch.topk; slot += 32)
      ids[slot] = __ldg(launch.topk_idx + token * launch.topk + slot);
  }
};

// fp8 publish: one warp per token casts its row per 128 channels (a half-warp per block, 8 channels
// per lane), with common/fp8_cast.hpp's arithmetic (the hardware cast, device/fp8_cast.cuh), and writes
// row, scales and top-k ids.
__device__ void publish_fp8_rows(const KernelContext& context, const SymmetricDispatchLaunch& launch,
                                 const DispatchCall& call, int caster, int num_casters) {
  // NOTES: 4 loads of 16 bytes in flight per lane (8 blocks of 128 channels per warp).
  constexpr int kUnroll = 4;
  const int lane = lane_id();
  const int half_lane = lane % 16;
  const int num_blocks = launch.hidden / common::kFp8CastBlock;
  for (int64_t token = caster; token < launch.num_tokens; token += num_casters) {
    const uint16_t* row = launch.x + token * launch.hidden;
    uint8_t* published = launch.layout.input_token(context.heap.base, call.half, token);
    uint8_t* fp8_row = launch.token.row(published);
    float* scales = launch.token.scales(published);
    for (int first = 0; first < num_blocks; first += 2 * kUnroll) {
      int4 values[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int block = first + 2 * u + lane / 16;
        values[u] = make_int4(0, 0, 0, 0);
        if (block < num_blocks) {
          values[u] = ptx::ld_weak_nc_v4(
              reinterpret_cast<const int4*>(row + block * common::kFp8CastBlock + half_lane * 8));
        }
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int block = first + 2 * u + lane / 16;
        float amax = amax_of_eight(values[u]);
        // The half-warp's 128 channels (xor offsets below 16 stay within the half).
#pragma unroll
        for (int offset = 8; offset > 0; offset /= 2)
          amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, offset));
        if (block >= num_blocks) continue;
        const float scale = common::fp8_block_scale(amax, launch.round_scale);
        *reinterpret_cast<uint2*>(fp8_row + block * common::kFp8CastBlock + half_lane * 8) =
            cast_eight_to_fp8(values[u], 1.0f / scale);
        if (half_lane == 0) scales[block] = scale;
      }
    }
    int64_t* ids = launch.token.topk_idx(published);
    for (int slot = lane; slot < launch.topk; slot += 32)
      ids[slot] = __ldg(launch.topk_idx + token * launch.topk + slot);
  }
}

// Pre-cast fp8 publish (ExpertMajorDispatchArgs::x_scales): one warp per token copies the caller's row
// (16-byte vectors, several in flight), its scales and its top-k ids into the published token, bit for
// bit. A role of its own rather than a branch inside publish_fp8_rows: nothing is cast, so it needs
// neither the half-warp per 128-channel block nor the amax shuffles, only a straight copy, and the cast
// path stays as it was.
__device__ void publish_precast_rows(const KernelContext& context, const SymmetricDispatchLaunch& launch,
                                     const DispatchCall& call, int copier, int num_copiers) {
  // NOTES: 2 loads of 16 bytes in flight per lane (every warp of the grid copies its own tokens): deeper
  // raised the whole kernel's registers (ptxas, sm_90a: 72 without this role and with 2; 84 with 4; 96
  // with 8), which every other role would then carry.
  constexpr int kCopyDepth = 2;
  const int lane = lane_id();
  const int num_scales = static_cast<int>(launch.token.num_scales);
  // row_bytes = hidden, a multiple of 128; x and the input buffer are 16-byte aligned.
  const uint8_t* x = reinterpret_cast<const uint8_t*>(launch.x);
  for (int64_t token = copier; token < launch.num_tokens; token += num_copiers) {
    uint8_t* published = launch.layout.input_token(context.heap.base, call.half, token);
    warp_copy<CopyLoad::read_only, kCopyDepth>(launch.token.row(published), x + token * call.row_bytes,
                                               call.row_bytes);
    float* scales = launch.token.scales(published);
    const float* token_scales = launch.x_scales + token * num_scales;
    for (int block = lane; block < num_scales; block += 32) scales[block] = __ldg(token_scales + block);
    int64_t* ids = launch.token.topk_idx(published);
    for (int slot = lane; slot < launch.topk; slot += 32)
      ids[slot] = __ldg(launch.topk_idx + token * launch.topk + slot);
  }
}

// ---- 3. pull ------------------------------------------------------------------------------------

// One (local expert, source) pair's count that the source wrote here (0 for a source that does not take
// part: stale, never read) into tables.count. Returns false when the call is refused: the source refused its
// input, or the count is out of range (calls with different shapes; reported).
__device__ __forceinline__ bool load_count(const KernelContext& context,
                                           const SymmetricDispatchLaunch& launch, const DispatchCall& call,
                                           const PeerBits& participants, const RowTables& tables, int pair) {
  const int local = pair / call.num_ranks;
  const int source = pair % call.num_ranks;
  int32_t count =
      participants.in(source) ? *launch.layout.count(context.heap.base, call.half, local, source) : 0;
  bool going = true;
  if (count == kRefusedCount) {
    going = false;
    count = 0;
  } else if (count < 0 || count > launch.max_tokens_per_rank) {
    if (blockIdx.x == 0) {
      const WaitSite site{common::WaitRole::symmetric_dispatch, common::WaitTarget::call_signature, -1,
                          source};
      record_wait_failure(context, site, launch.max_tokens_per_rank, count, 0, false);
    }
    going = false;
    count = 0;
  }
  tables.count[pair] = count;
  return going;
}

// Where each source's rows are this call, from its record (acquired at the barrier): its x (zero-copy)
// or null (in its input buffer). A record of another call means the ranks disagree on the call count,
// one with another signature that they disagree on the call's shape: reported, and that source's rows
// are not read.
// After the barrier (whose acquire orders it after the source's writes): a source's record, copied into
// registers with independent 8-byte loads through L2, so that the fields cost one round trip to the
// source's heap rather than one per dependent read.
__device__ __forceinline__ common::SymmetricSourceRecord copy_source_record(
    const common::SymmetricSourceRecord* record) {
  static_assert(sizeof(common::SymmetricSourceRecord) % sizeof(unsigned long long) == 0,
                "a source record is read in 8-byte words");
  constexpr int kWords = sizeof(common::SymmetricSourceRecord) / sizeof(unsigned long long);
  unsigned long long words[kWords];
  const auto* from = reinterpret_cast<const unsigned long long*>(record);
#pragma unroll
  for (int i = 0; i < kWords; ++i) words[i] = __ldcg(from + i);
  common::SymmetricSourceRecord copy;
  memcpy(&copy, words, sizeof(copy));
  return copy;
}

struct SourceRows {
  const uint8_t* x[kMaxZeroCopyRanks];
  int64_t row_stride[kMaxZeroCopyRanks];
  PushTargets push;  // with launch.push: every receiver's outputs (each source is a receiver too)
};

// One source's record into `sources` (its x, and with the push its announced outputs; null for a source
// that does not take part). Returns false when the record refuses the call (reported): another call,
// another shape, or an announcement this rank cannot follow.
__device__ __forceinline__ bool load_source(const KernelContext& context,
                                            const SymmetricDispatchLaunch& launch, uint64_t sequence,
                                            int half, const PeerBits& participants, int source,
                                            SourceRows& sources) {
  const common::SymHeap& heap = context.heap;
  sources.x[source] = nullptr;
  if (launch.push) sources.push.recv_x[source] = nullptr;
  if (!participants.in(source)) return true;  // none of its rows is pulled (its memory may be gone)
  const common::SymmetricSourceRecord record =
      copy_source_record(heap.map(launch.layout.source_record(heap.base, half), source));
  // Another call, or this call with another shape: the rows here are not laid out as this rank reads them.
  if (record.sequence != sequence || record.signature != launch.signature) {
    if (blockIdx.x == 0) {
      const WaitSite site{common::WaitRole::symmetric_dispatch, common::WaitTarget::call_signature, -1,
                          source};
      record_wait_failure(context, site, static_cast<int64_t>(sequence),
                          static_cast<int64_t>(record.sequence), 0, false);
    }
    return false;
  }
  // A heap offset outside the source's heap is never followed (a corrupt record): reported as a
  // disagreement on the call, and none of its rows is read.
  if (record.x_at == common::SymmetricRowsAt::heap &&
      (record.row_stride <= 0 ||
       !common::symmetric_heap_span_fits(record.x,
                                         static_cast<uint64_t>(launch.layout.max_tokens_per_rank) *
                                             static_cast<uint64_t>(record.row_stride),
                                         heap.bytes))) {
    if (blockIdx.x == 0) {
      const WaitSite site{common::WaitRole::symmetric_dispatch, common::WaitTarget::call_signature, -1,
                          source};
      record_wait_failure(context, site, static_cast<int64_t>(heap.bytes), static_cast<int64_t>(record.x), 0,
                          false);
    }
    return false;
  }
  // The push writes into every receiver's outputs: an announcement it cannot follow refuses the call.
  if (launch.push && !load_push_target(heap, launch, record, source, sources.push)) {
    if (blockIdx.x == 0) {
      const WaitSite site{common::WaitRole::symmetric_dispatch, common::WaitTarget::call_signature, -1,
                          source};
      record_wait_failure(context, site, launch.capacity, static_cast<int64_t>(record.recv_capacity), 0,
                          false);
    }
    return false;
  }
  sources.x[source] = common::symmetric_rows(heap, source, record.x_at, record.x);
  sources.row_stride[source] = record.row_stride;
  return true;
}

// Whole block, after the barrier (whose acquire orders every read here after the sources' writes): every
// source's record (load_source), this rank's count from every source for each local expert (load_count),
// and with the push (`begins` set) where this rank's rows start among each expert's, begins[e] =
// rows_before_this_rank(e) (cuda/symmetric/routing.cuh), then the row tables. The three kinds of item are
// dealt to the block's threads as one list, so that their loads, independent of each other, are in flight
// together rather than in three phases each closed by a __syncthreads. Measured (NOTES, session 40, c3): the
// barrier -> first row span at 128 tokens x 8 ranks went 8.5 -> 7.7-7.9 us only, so most of that span is not
// these loads. Returns false (in every thread) when the call is refused. Ends synchronised. Stamps
// kPhaseLoaded between the loads and the build.
__device__ bool load_call_tables(const KernelContext& context, const SymmetricDispatchLaunch& launch,
                                 const DispatchCall& call, uint64_t sequence, const PeerBits& participants,
                                 SourceRows& sources, const RowTables& tables, int32_t* begins,
                                 DispatchStampRecord& stamps, bool stamping) {
  __shared__ int refused;
  if (threadIdx.x == 0) refused = 0;
  __syncthreads();
  const int records = call.num_ranks;
  const int pairs = launch.local_experts * call.num_ranks;
  const int items = records + pairs + (begins != nullptr ? launch.num_experts : 0);
  for (int item = threadIdx.x; item < items; item += blockDim.x) {
    bool going = true;
    if (item < records) {
      going = load_source(context, launch, sequence, call.half, participants, item, sources);
    } else if (item < records + pairs) {
      going = load_count(context, launch, call, participants, tables, item - records);
    } else {
      const int expert = item - records - pairs;
      begins[expert] = rows_before_this_rank(context, launch, call.half, participants, expert);
    }
    if (!going) atomicExch(&refused, 1);
  }
  __syncthreads();
  if (threadIdx.x == 0) stamp(stamps, stamping, kPhaseLoaded);
  tables.build(launch.capacity);
  return refused == 0;
}

// One row routed here from `source`: its j-th (in expert order) of `rows`. Writes its src_info (and the
// handle's kept copy) and src_slot, and returns the output row and where the row is (`published`: the
// token's start in the source's input buffer, or in its x); false for a route out of range (reported).
struct PullRow {
  int64_t row;
  const uint8_t* published;
};

__device__ __forceinline__ bool look_up_pull_row(const KernelContext& context,
                                                 const SymmetricDispatchLaunch& launch,
                                                 const DispatchCall& call, const RowTables& tables,
                                                 const SourceRows& sources, int source, int32_t j,
                                                 PullRow& out) {
  const common::SymHeap& heap = context.heap;
  const common::SymmetricLayout& layout = launch.layout;
  const int local = tables.expert_of(source, j);
  const int32_t position = j - tables.first_row_of(source, local);
  const common::SymmetricRoute route = *layout.route(heap.base, call.half, local, source, position);
  if (route.token < 0 || route.token >= launch.max_tokens_per_rank || route.slot < 0 ||
      route.slot >= launch.topk) {
    const WaitSite site{common::WaitRole::symmetric_dispatch, common::WaitTarget::call_signature, -1, source};
    record_wait_failure(context, site, launch.max_tokens_per_rank, route.token, 0, false);
    return false;
  }
  out.row = local * launch.capacity + tables.begin[local * call.num_ranks + source] + position;
  launch.src_info[out.row] = route.token;
  if (launch.kept_src_info) launch.kept_src_info[out.row] = route.token;
  launch.src_slot[out.row] = route.slot;
  const uint8_t* source_x = sources.x[source];  // null: its rows are published
  out.published =
      source_x != nullptr
          ? source_x + route.token * sources.row_stride[source]
          : launch.token.row(heap.map(layout.input_token(heap.base, call.half, route.token), source));
  return true;
}

// The rows that the producer and the copiers walk: every source's, sources interleaved (walk_peer),
// of each source the rows j = walk_first_row(source, blocks) + first_offset + k * stride. Lanes look up
// 32 rows at once (route, output row, src_info, src_slot: look_up_pull_row); then every lane calls
// `action(row, published)` for each row found, in order, with the same arguments in every lane. An
// action that returns false is not called again in its lane, and the walk stops after that batch of 32
// rows: returns false; true once every row is walked.
template <typename Action>
__device__ __forceinline__ bool walk_pull_rows(const KernelContext& context,
                                               const SymmetricDispatchLaunch& launch,
                                               const DispatchCall& call, const RowTables& tables,
                                               const SourceRows& sources, int64_t first_offset,
                                               int64_t stride, Action&& action) {
  const int lane = lane_id();
  bool going = true;
  for (int step = 0; step < call.num_ranks; ++step) {
    const int source = walk_peer(step, context.rank, call.num_ranks);
    const int32_t rows = tables.rows_of(source);
    for (int64_t base = walk_first_row(source, call.blocks) + first_offset; base < rows;
         base += 32 * stride) {
      const int64_t j = base + static_cast<int64_t>(lane) * stride;
      PullRow found{0, nullptr};
      const bool valid = j < rows && look_up_pull_row(context, launch, call, tables, sources, source,
                                                      static_cast<int32_t>(j), found);
      const uint32_t mask = __ballot_sync(0xffffffffu, valid);
      for (int i = 0; i < 32; ++i) {
        if (((mask >> i) & 1u) == 0) continue;
        const int64_t row = __shfl_sync(0xffffffffu, found.row, i);
        const uint8_t* published = reinterpret_cast<const uint8_t*>(
            __shfl_sync(0xffffffffu, reinterpret_cast<uintptr_t>(found.published), i));
        if (going) going = action(row, published);
      }
      // The stop is voted once per batch, not per row: the row loop has no vote of its own.
      if (__any_sync(0xffffffffu, !going)) return false;
    }
  }
  return true;
}

// Push: the src_info (and the handle's kept copy) and src_slot of every row pushed here, from its route
// (look_up_pull_row; the push itself moves no row here). The rows of all sources are numbered as one
// sequence, sources ascending, and dealt out 32 at a time to the lanes of walker `walker` of `walkers`
// (every warp of the rank): each lane makes independent route loads, one round for the whole walk at decode
// sizes. walk_pull_rows, which the pulls keep (their copies follow each row), takes the sources one after
// another, a dependent round trip each: ~18 us at 128 tokens x 8 ranks, 1-2 us this way (NOTES, session 40,
// c2-c3).
__device__ void walk_pushed_rows(const KernelContext& context, const SymmetricDispatchLaunch& launch,
                                 const DispatchCall& call, const RowTables& tables, const SourceRows& sources,
                                 int walker, int walkers) {
  int64_t total = 0;
  for (int source = 0; source < call.num_ranks; ++source) total += tables.rows_of(source);
  for (int64_t i = static_cast<int64_t>(walker) * 32 + lane_id(); i < total;
       i += static_cast<int64_t>(walkers) * 32) {
    int source = 0;
    int64_t j = i;
    while (j >= tables.rows_of(source)) j -= tables.rows_of(source++);
    PullRow found{0, nullptr};
    look_up_pull_row(context, launch, call, tables, sources, source, static_cast<int32_t>(j), found);
  }
}

// Producer: this block's share of every source's rows (walk_pull_rows); lane 0 loads them.
__device__ void pull_producer(const KernelContext& context, const SymmetricDispatchLaunch& launch,
                              const DispatchCall& call, const RowTables& tables, const SourceRows& sources,
                              PipelineProducer& producer) {
  const int lane = lane_id();
  // The sources' generic-proxy writes, acquired at the barrier, are read below by TMA (async proxy).
  ptx::fence_proxy_async_global();
  const bool walked = walk_pull_rows(
      context, launch, call, tables, sources, 0, call.blocks, [&](int64_t row, const uint8_t* published) {
        if (lane != 0) return true;
        // `published` is the row (the token's start in an input buffer: row_offset() is 0); fp8 rows are
        // always published, with their scales next to them.
        return push_row(producer, context, published, launch.recv_x + row * call.row_bytes, call.row_bytes,
                        launch.grid.piece_bytes, row,
                        call.fp8 ? launch.token.scales(const_cast<uint8_t*>(published)) : nullptr,
                        call.scale_bytes);
      });
  if (walked && lane == 0) producer.finish(context);
}

// A row's fp8 scales into recv_x_scales (f32, or UE8M0 bytes packed four to a word), by the warp's lanes;
// `scales` is 16-byte aligned (a stage's, or a published token's).
__device__ __forceinline__ void write_row_scales(const SymmetricDispatchLaunch& launch, int64_t row,
                                                 const float* scales) {
  const int num_scales = static_cast<int>(launch.token.num_scales);
  const int lane = lane_id();
  if (launch.use_ue8m0) {
    const int words = common::ue8m0_words(num_scales);
    int32_t* out = static_cast<int32_t*>(launch.recv_x_scales) + row * words;
    for (int word = lane; word < words; word += 32) {
      uint32_t packed = 0;
      for (int byte = 0; byte < common::kUe8m0PerWord; ++byte) {
        const int index = word * common::kUe8m0PerWord + byte;
        if (index < num_scales)
          packed |= static_cast<uint32_t>(common::ue8m0_exponent(scales[index])) << (8 * byte);
      }
      out[word] = static_cast<int32_t>(packed);
    }
  } else {
    float* out = static_cast<float*>(launch.recv_x_scales) + row * num_scales;
    // 16-byte stores where the row of scales allows them (DeepSeek's 56 scales: 14 lanes, one store
    // each).
    if (num_scales % 4 == 0 && (reinterpret_cast<uintptr_t>(out) & 15u) == 0) {
      const float4* from = reinterpret_cast<const float4*>(scales);
      float4* to = reinterpret_cast<float4*>(out);
      for (int index = lane; index < num_scales / 4; index += 32) to[index] = from[index];
    } else {
      for (int index = lane; index < num_scales; index += 32) out[index] = scales[index];
    }
  }
}

// Copier (SymmetricPull::warps): warp `copier` of `copiers` in this block takes every copiers-th of the
// block's rows (the rows the producer would walk, in the same order) and copies each whole row with
// 16-byte loads and stores (device/warp_copy.cuh), then its scales. No pipeline: every warp is an
// independent stream of rows, where the TMA pipeline has one per block.
__device__ void pull_copier(const KernelContext& context, const SymmetricDispatchLaunch& launch,
                            const DispatchCall& call, const RowTables& tables, const SourceRows& sources,
                            int copier, int copiers) {
  // NOTES: 14 vectors of 16 bytes per lane (7 KiB per warp) in flight: an fp8 row of DeepSeek-V3's 7168
  // channels in one pass, where depth 8 took two round trips and the scales a third. The kernel's register
  // budget bounds it (one 512-thread block per SM: at most 128 a thread; 107 at this depth).
  constexpr int kCopyDepth = 14;
  const int lane = lane_id();
  const int num_scales = static_cast<int>(launch.token.num_scales);
  // f32 scales in whole 16-byte vectors, one per lane (56 scales: 14 lanes): loaded with the row's data,
  // so that they cost no round trip of their own.
  const bool scale_vectors = call.fp8 && !launch.use_ue8m0 && num_scales % 4 == 0 && num_scales / 4 <= 32;
  walk_pull_rows(
      context, launch, call, tables, sources, static_cast<int64_t>(copier) * call.blocks,
      static_cast<int64_t>(call.blocks) * copiers, [&](int64_t row, const uint8_t* published) {
        // Plain loads: the rows were written during this kernel (before the barrier, whose
        // acquire orders them), so the non-coherent path is not allowed.
        const float* scales = call.fp8 ? launch.token.scales(const_cast<uint8_t*>(published)) : nullptr;
        float* scales_out = call.fp8 ? static_cast<float*>(launch.recv_x_scales) + row * num_scales : nullptr;
        const bool by_vector = scale_vectors && (reinterpret_cast<uintptr_t>(scales_out) & 15u) == 0;
        float4 scale_vector = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (by_vector && lane < num_scales / 4) scale_vector = reinterpret_cast<const float4*>(scales)[lane];
        warp_copy<CopyLoad::plain, kCopyDepth>(launch.recv_x + row * call.row_bytes, published,
                                               call.row_bytes);
        if (by_vector) {
          if (lane < num_scales / 4) reinterpret_cast<float4*>(scales_out)[lane] = scale_vector;
        } else if (call.fp8) {
          write_row_scales(launch, row, scales);
        }
        return true;
      });
}

// Consumer extras (pull, fp8): the row's scales, from the stage into recv_x_scales.
struct PullScales {
  const SymmetricDispatchLaunch& launch;
  __device__ __forceinline__ void operator()(const StageDescriptor& descriptor, const uint8_t* stage) const {
    if ((descriptor.flags & kStageScales) == 0) return;
    // The stage's scales are 16-aligned (they follow a 16-byte multiple of row bytes).
    write_row_scales(launch, descriptor.row, reinterpret_cast<const float*>(stage + descriptor.bytes));
  }
};

// Named barrier of the helper warps (0 is __syncthreads, 1 the routing warps' before the barrier).
constexpr int kHelperBarrierId = 2;

__device__ __forceinline__ void helper_warps_sync() {
  asm volatile("bar.sync %0, %1;" ::"r"(kHelperBarrierId), "r"(kHelperWarps * 32) : "memory");
}

// Block 0's helpers, after the barrier, when the capacity is below R * max: every rank's workspace
// holds this call's counts (each source wrote them before arriving), so each rank reads all of them
// through map() and finds the lowest expert of any rank with more rows than the capacity. Every rank
// records the same one (not a wait: the call completes), and the handle keeps it for the combine. Only
// the participants' workspaces and counts: alike on every survivor when their masks are.
__device__ void find_overflow(const KernelContext& context, const SymmetricDispatchLaunch& launch,
                              const DispatchCall& call, const PeerBits& participants) {
  __shared__ int first_expert;
  const int helper = static_cast<int>(threadIdx.x) - kFirstHelperWarp * 32;
  const int helpers = kHelperWarps * 32;
  if (helper == 0) first_expert = INT_MAX;
  helper_warps_sync();
  const common::SymHeap& heap = context.heap;
  int64_t my_rows = 0;
  int my_expert = INT_MAX;
  for (int expert = helper; expert < launch.num_experts; expert += helpers) {
    const int target = expert / launch.local_experts;
    const int local = expert % launch.local_experts;
    int64_t rows = 0;
    for (int source = 0; source < call.num_ranks && participants.in(target); ++source) {
      if (!participants.in(source)) continue;
      // A count out of range is its target's to report (load_count); it adds nothing here.
      const int32_t count = *heap.map(launch.layout.count(heap.base, call.half, local, source), target);
      if (count > 0 && count <= launch.max_tokens_per_rank) rows += count;
    }
    if (rows > launch.capacity) {
      my_expert = expert;
      my_rows = rows;
      atomicMin(&first_expert, expert);
      break;  // later experts of this thread are higher
    }
  }
  helper_warps_sync();
  if (my_expert != INT_MAX && my_expert == first_expert) {
    const int expert_rank = my_expert / launch.local_experts;
    launch.overflow[1] = my_expert;
    launch.overflow[2] = static_cast<int32_t>(my_rows);
    launch.overflow[0] = 1;
    const WaitSite site{common::WaitRole::symmetric_dispatch, common::WaitTarget::expert_capacity, my_expert,
                        expert_rank};
    record_wait_failure(context, site, launch.capacity, my_rows, 0, false);
  }
}

// Helpers: block 0 writes recv_count and layout_range (true counts); every block writes src_info (and
// the handle's kept copy) = -1 for its share of the rows past each expert's received ones, within the
// capacity.
__device__ void write_layout(const SymmetricDispatchLaunch& launch, const DispatchCall& call,
                             const RowTables& tables) {
  const int helper = static_cast<int>(threadIdx.x) - kFirstHelperWarp * 32;
  const int helpers = kHelperWarps * 32;
  if (blockIdx.x == 0) {
    for (int local = helper; local < launch.local_experts; local += helpers)
      launch.recv_count[local] = tables.total[local];
    for (int pair = helper; pair < launch.local_experts * call.num_ranks; pair += helpers) {
      launch.layout_range[2 * pair] = tables.begin[pair];
      launch.layout_range[2 * pair + 1] = tables.count[pair];
      if (launch.kept_layout_range) {
        launch.kept_layout_range[2 * pair] = tables.begin[pair];
        launch.kept_layout_range[2 * pair + 1] = tables.count[pair];
      }
    }
  }
  // The [L, C] entries as one range dealt to every helper thread of the rank (consecutive threads,
  // consecutive rows), each skipping the received rows of its entry's expert. NOTES (session 46): a loop over
  // the experts in every helper warp, each then taking its share of the expert's rows, was 65 % of the
  // one-rank dispatch's warp instructions (ncu's source page: 256 experts x 1848 warps); this way a thread
  // makes L * C / (blocks * helpers) passes (one at one rank, ~5 at 8 ranks of 128 tokens), and the one-rank
  // dispatch at 128 tokens took 47 us instead of 81 on an H100 (8 ranks: level, their loop was 32 passes).
  const int64_t rows_per_expert = launch.capacity;
  const int64_t entries = static_cast<int64_t>(launch.local_experts) * rows_per_expert;
  const int64_t stride = static_cast<int64_t>(call.blocks) * helpers;
  for (int64_t entry = static_cast<int64_t>(blockIdx.x) * helpers + helper; entry < entries;
       entry += stride) {
    const int local = static_cast<int>(entry / rows_per_expert);
    const int64_t row = entry - local * rows_per_expert;
    if (row < tables.total[local]) continue;  // received (a total past C leaves no row to clear)
    launch.src_info[entry] = -1;
    if (launch.kept_src_info) launch.kept_src_info[entry] = -1;
  }
}

// The helper warps' part of the pull: the overflow search and the pull combine's begins (block 0), and
// every block's share of src_info past the received rows. The push has the begins already (`push_begins`,
// load_call_tables: the same sums), which block 0 then copies instead of reading the counts again.
__device__ void helpers_after_barrier(const KernelContext& context, const SymmetricDispatchLaunch& launch,
                                      const DispatchCall& call, const PeerBits& participants,
                                      const RowTables& tables, const int32_t* push_begins = nullptr) {
  if (blockIdx.x == 0 && launch.capacity < call.num_ranks * launch.max_tokens_per_rank) {
    find_overflow(context, launch, call, participants);
  }
  if (blockIdx.x == 0 && launch.begin != nullptr) {
    const int helper = static_cast<int>(threadIdx.x) - kFirstHelperWarp * 32;
    if (push_begins != nullptr) {
      for (int expert = helper; expert < launch.num_experts; expert += kHelperWarps * 32)
        launch.begin[expert] = push_begins[expert];
    } else {
      write_pull_begins(context, launch, call.half, participants, helper, kHelperWarps * 32);
    }
  }
  write_layout(launch, call, tables);
}

__global__ void __launch_bounds__(kSymmetricThreads, 1)
    symmetric_dispatch_kernel(const __grid_constant__ KernelContext context,
                              const __grid_constant__ SymmetricDispatchLaunch launch) {
  ptx::wait_for_previous_grid();  // launched by launch_dependent: before any global access
  extern __shared__ __align__(128) uint8_t dynamic_shared[];
  __shared__ PipelineShared pipeline_shared;
  __shared__ uint32_t call_of_block;
  __shared__ int refused_by_routing;
  __shared__ DispatchStampRecord stamps;
  __shared__ PeerBits targets;       // whom this block writes to before the barrier
  __shared__ PeerBits participants;  // whom it works with after it
  const bool stamping = launch.stamps != nullptr;
  const int warp = static_cast<int>(threadIdx.x / 32);
  const SymmetricGrid& grid = launch.grid;
  const Pipeline pipe{&pipeline_shared, dynamic_shared + grid.table_bytes, grid.stage_bytes,
                      static_cast<uint32_t>(grid.stages), grid.store_read_lag};
  if (threadIdx.x == 0) {
    // The start stamp before the block's first global load (the launch's own start spread apart from it).
    // Nothing reads the record unless the call stamps, so only then is it cleared (216 bytes).
    if (stamping) stamps = DispatchStampRecord{};
    stamp(stamps, stamping, kPhaseStart);
    // Every block reads the count before the barrier; block 0 advances it only after.
    call_of_block = launch.state->calls + 1;
    refused_by_routing = 0;
    init_pipeline(pipe);
    // The handle's overflow record starts clear on every call (replays too); find_overflow sets it
    // after the barrier, which the __syncthreads below orders after this store.
    if (blockIdx.x == 0) launch.overflow[0] = 0;
  }
  __syncthreads();
  const uint32_t sequence = call_of_block;
  targets.load(context);

  DispatchCall call;
  call.half = common::symmetric_half(sequence);
  call.num_ranks = context.num_ranks;
  call.blocks = grid.blocks;
  call.fp8 = launch.token.num_scales > 0;
  call.row_bytes = launch.token.row_bytes;
  call.scale_bytes = static_cast<uint32_t>(
      common::align_up(launch.token.num_scales * sizeof(float), common::kSymmetricAlignment));
  const WaitSite pipeline_site{common::WaitRole::symmetric_dispatch, common::WaitTarget::grid_arrival, -1,
                               -1};
  PipelineProducer producer{pipe, 0, pipeline_site, false};
  PipelineConsumer consumer{pipe, 0, 0, pipeline_site};
  int32_t* table = reinterpret_cast<int32_t*>(dynamic_shared);

  // 1. Publish.
  if (blockIdx.x == 0 && threadIdx.x == 0) announce_source(context, launch, sequence, call.half);
  // Routing: block 0's helper warps (bf16 publish), or every block's (zero-copy and fp8:
  // launch.routing_blocks, cuda/symmetric/routing.cuh), whose grid sync between count and place every
  // thread of every block takes part in; fp8 rows are cast after it.
  const GridBarrier rank_grid{&launch.state->grid_arrivals, static_cast<uint32_t>(grid.blocks)};
  const RoutingExchange exchange{launch.routing_exchange, launch.routing_blocks};
  const int routing_warp = warp - kFirstHelperWarp;
  const bool routes = static_cast<int>(blockIdx.x) < exchange.routing_blocks && routing_warp >= 0 &&
                      routing_warp < grid.routing_warps;
  if (routes) {
    count_routes(context, launch, table, blockIdx.x, exchange, routing_warp, &refused_by_routing);
    if (routing_warp == 0 && lane_id() == 0) stamp(stamps, stamping, kPhaseCounted);
  }
  bool counted = true;
  if (exchange.routing_blocks > 1) {
    // Every thread of every block (nothing else runs here): the other blocks' exchange rows.
    counted = grid_sync(rank_grid, context, common::WaitRole::symmetric_dispatch, context.timeout_ns);
    if (threadIdx.x == 0) stamp(stamps, stamping, kPhaseSynced);
  } else if (routes) {
    routing_warps_sync(grid.routing_warps);
  }
  if (routes && counted) {
    place_routes(context, launch, call.half, table, blockIdx.x, exchange, routing_warp, targets,
                 &refused_by_routing);
    if (routing_warp == 0 && lane_id() == 0) stamp(stamps, stamping, kPhaseRouted);
  }
  if (launch.push) {
    // Nothing to publish: every warp pushes this rank's tokens after the barrier.
  } else if (call.fp8) {
    // Casters (or copiers of pre-cast rows): every warp of every block, once the rows are routed.
    const int caster = static_cast<int>(blockIdx.x) * kSymmetricWarps + warp;
    const int casters = grid.blocks * kSymmetricWarps;
    if (launch.x_scales != nullptr) {
      publish_precast_rows(context, launch, call, caster, casters);
    } else {
      publish_fp8_rows(context, launch, call, caster, casters);
    }
  } else if (routes || exchange.routing_blocks > 1) {
    // Routed (or, with routing in every block, nothing else to do before the barrier).
  } else if (blockIdx.x == 0 && warp >= kFirstHelperWarp) {
    // Block 0's helpers beyond the routing warps.
  } else if (launch.zero_copy) {
    // Nothing to copy: the receivers read x in place (no reader of the published top-k ids either).
  } else if (warp == kProducerWarp) {
    publish_producer(context, launch, call, producer);
  } else if (warp == kConsumerWarp) {
    consumer.run_phase(context, PublishTopk{context, launch, call.half});
  } else {
    // Helpers of other blocks: the top-k ids go with the consumer's extras.
  }

  // 2. The barrier: every rank's input buffer, source record and our workspace are complete after it.
  const CrossRankBarrier barrier{
      rank_grid, CrossRankSignals{launch.layout.signal(context.heap.base, 0), context.num_ranks},
      &launch.state->barriers};
  if (cross_rank_barrier(barrier, context, common::WaitRole::symmetric_dispatch,
                         BarrierStamps{&stamps, stamping})) {
    if (blockIdx.x == 0 && threadIdx.x == 0) launch.state->calls = sequence;
    if (threadIdx.x == 0) stamp(stamps, stamping, kPhasePassed);

    // 3. Pull (refused: no output is written), from the ranks that take part: fixed here, after the
    // barrier's waits, so that a source masked there is left out of the whole call.
    participants.load(context, &targets);
    __shared__ SourceRows sources;
    const RowTables tables = RowTables::carve(table, call.num_ranks, launch.local_experts);
    // The push's begins (where this rank's rows start among each expert's) lie past the tables.
    int32_t* begins =
        launch.push ? table + symmetric_table_ints(call.num_ranks, launch.local_experts) : nullptr;
    const bool pulls = load_call_tables(context, launch, call, sequence, participants, sources, tables,
                                        begins, stamps, stamping);
    if (threadIdx.x == 0) stamp(stamps, stamping, kPhaseTabled);
    if (pulls && launch.push) {
      // Every warp pushes this rank's tokens into their receivers, then walks the rows pushed here for
      // their src_info and src_slot (no copy); the helpers first do their tables.
      // Stamps (the push's meaning of the pull's phases): issued just before the first row (the begins came
      // with the tables), drained once this warp's rows are stored, walked after its share of the walk; the
      // wait for every source's done word follows, up to released.
      if (warp >= kFirstHelperWarp)
        helpers_after_barrier(context, launch, call, participants, tables, begins);
      if (warp == kProducerWarp && lane_id() == 0) stamp(stamps, stamping, kPhaseIssued);
      push_rows(context, launch, participants, sources.push, begins,
                static_cast<int>(blockIdx.x) * kSymmetricWarps + warp, call.blocks * kSymmetricWarps);
      if (warp == kProducerWarp && lane_id() == 0) stamp(stamps, stamping, kPhaseDrained);
      walk_pushed_rows(context, launch, call, tables, sources,
                       static_cast<int>(blockIdx.x) * kSymmetricWarps + warp, call.blocks * kSymmetricWarps);
      if (warp == kProducerWarp && lane_id() == 0) stamp(stamps, stamping, kPhaseWalked);
    } else if (pulls && launch.pull_by_warps) {
      // Every warp copies rows; the helpers first do their tables (light), then join.
      if (warp >= kFirstHelperWarp) helpers_after_barrier(context, launch, call, participants, tables);
      pull_copier(context, launch, call, tables, sources, warp, kSymmetricWarps);
      if (warp == kProducerWarp && lane_id() == 0) {
        stamp(stamps, stamping, kPhaseIssued);
        stamp(stamps, stamping, kPhaseDrained);
      }
    } else if (pulls) {
      if (warp == kProducerWarp) {
        pull_producer(context, launch, call, tables, sources, producer);
        if (lane_id() == 0) stamp(stamps, stamping, kPhaseIssued);
      } else if (warp == kConsumerWarp) {
        consumer.evict_first_stores = kEvictFirstPullStores;
        consumer.run_phase(context, PullScales{launch});
        if (lane_id() == 0) stamp(stamps, stamping, kPhaseDrained);
      } else {
        helpers_after_barrier(context, launch, call, participants, tables);
      }
    }
  }

  // 4. Release: every block, whatever happened above, so that no peer waits for our done words and we
  // never end while a peer still reads our x.
  // Peers read our x in place (zero-copy), or write into our outputs (push): wait for their done words.
  release_call(context, launch.state, launch.layout, sequence, launch.zero_copy || launch.push,
               common::WaitRole::symmetric_dispatch, common::WaitTarget::source_done, false);
  if (threadIdx.x == 0) {
    stamp(stamps, stamping, kPhaseReleased);
    keep_stamps(stamps, launch.stamps, sequence);
  }
}

}  // namespace

void prepare_symmetric_dispatch_kernel() {
  preload_kernel(symmetric_dispatch_kernel);
  SY_CUDA_CHECK(cudaFuncSetAttribute(symmetric_dispatch_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(kSymmetricSharedBytes)));
}

int symmetric_dispatch_blocks_per_sm() {
  int blocks = 0;
  SY_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, symmetric_dispatch_kernel,
                                                              kSymmetricThreads, kSymmetricSharedBytes));
  return blocks;
}

void launch_symmetric_dispatch(const KernelContext& context, const SymmetricDispatchLaunch& launch,
                               cudaStream_t stream) {
  launch_dependent(symmetric_dispatch_kernel, launch.grid.blocks, kSymmetricThreads, kSymmetricSharedBytes,
                   stream, context, launch);
}

}  // namespace switchyard::cuda
