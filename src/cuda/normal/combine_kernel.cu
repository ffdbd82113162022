// The CUDA `normal` combine: per channel a sender block (expert side: each received row goes back
// to its home rank's ring, a warp group per home rank) and a receiver block (home side: a coordinator
// warp tracks the rings, and each other warp reduces its own tokens' rows in DESIGN.md's fixed order
// and stores the result with TMA bulk stores). With the rows in place (the expert outputs in the heap,
// docs/normal-in-place.md) there are no rings and nothing to send: both blocks of a channel reduce, with
// every warp.
#include "common/numeric.hpp"
#include "cuda/backend/dependent_launch.hpp"
#include "cuda/backend/kernel_preload.hpp"
#include "cuda/normal/kernels.hpp"
#include "device/bf16x8.cuh"
#include "device/bounded_wait.cuh"
#include "device/cuda_check.hpp"
#include "device/device_barrier.cuh"
#include "device/warp_copy.cuh"
#include "device/warp_group.cuh"

namespace switchyard::cuda {

namespace {

constexpr int kMaxWarps = 32;
// 24 warps, as DeepEP's combine: 23 reducing warps in the receiver, 3 sender warps per home rank at 8.
constexpr int kTargetWarps = 24;
constexpr int kMaxRanks = 32;  // the CUDA backend's limit (kMaxCudaRanks): a coordinator lane per rank

// Warps per combine block for R ranks: a multiple of R up to 24 (so each home rank has as many sender
// warps), else 24, where a sender warp serves several home ranks.
int combine_warps_per_block(int num_ranks) {
  if (num_ranks >= kTargetWarps) return kTargetWarps;
  return num_ranks * (kTargetWarps / num_ranks);
}

struct CombineShared {
  int group_abort[kMaxWarps];
  // Receiver: per expert rank, its ring's tail as the coordinator last read it.
  uint64_t tail[kMaxRanks];
  // Receiver: per reducing warp, the next token it will reduce (it has reduced all of its tokens
  // before that one); ~0 once it has left.
  uint64_t next_token[kMaxWarps];
  // Receiver: per reducing warp, where its token's row lies in each holding rank's ring.
  const int4* token_rows[kMaxWarps][kMaxRanks];
  // Receiver, rows in place: some expert rank's published range lies outside its combine input.
  int bad_range;
};

// Sender role, for one home rank: a group of warps returns this channel's rows that came from `home`,
// a chunk per round. False when a wait failed (the group leaves the kernel).
__device__ bool combine_sender_to(const KernelContext& context, const CombineLaunch& launch,
                                  CombineShared& shared, int channel, const WarpGroup& group, int home) {
  const int index = home * context.num_channels + channel;
  const int64_t first_row = launch.recv_channel_start[index];
  const uint64_t total = static_cast<uint64_t>(launch.recv_channel_start[index + 1] - first_row);
  const common::Ring ring = context.layout.ring(context.heap.peer_base(home), channel, context.rank);
  const uint64_t num_slots = ring.num_slots;
  const common::CombineMessage& message = launch.message;
  const int topk = static_cast<int>(message.topk);
  const WaitSite site{common::WaitRole::combine_sender, common::WaitTarget::ring_space, channel, home};

  for (uint64_t round_begin = 0; round_begin < total; round_begin += context.chunk_tokens) {
    const uint64_t round_end = min(total, round_begin + context.chunk_tokens);
    if (group.leader()) {
      bool room = round_end <= num_slots || wait_at_least(context, ring.head(), round_end - num_slots, site);
      shared.group_abort[home] = room ? 0 : 1;
    }
    group.sync();
    if (shared.group_abort[home]) return false;
    for (uint64_t i = round_begin + group.warp_in_group; i < round_end; i += group.size) {
      const int64_t row = first_row + static_cast<int64_t>(i);
      uint8_t* slot = ring.slot(i);
      warp_copy<CopyLoad::read_only, 8>(message.row(slot), launch.y + row * message.row_bytes,
                                        message.row_bytes);
      if (message.has_weights) {
        for (int k = lane_id(); k < topk; k += 32)
          message.topk_weights(slot)[k] = __ldg(launch.y_topk_weights + row * topk + k);
      }
    }
    group.sync();
    if (group.leader()) {
      fence_before_peer_signal(context);
      st_release_peer(context, ring.tail(), round_end);
    }
  }
  return true;
}

// Sender role: group g serves home ranks g, g + groups, ... (one each unless R > kTargetWarps).
__device__ void combine_sender(const KernelContext& context, const CombineLaunch& launch,
                               CombineShared& shared, int channel, const WarpGroup& group) {
  const int groups = static_cast<int>(blockDim.x / 32) / group.size;
  for (int home = group.index; home < context.num_ranks; home += groups) {
    if (!combine_sender_to(context, launch, shared, channel, group, home)) return;
  }
}

// The ranks whose rows a token has, as a bitmask (at most 32 ranks: kMaxCudaRanks), read once per
// token by the whole warp: lane r reads rank r.
__device__ __forceinline__ uint32_t ranks_holding_token(const bool* in_rank, int num_ranks) {
  const int lane = lane_id();
  return __ballot_sync(0xffffffffu, lane < num_ranks && in_rank[lane]);
}

// NOTES: rows are loaded kReduceLoadsInFlight at a time (a node of 8 ranks at once) before they are
// added (in ascending rank order, as DESIGN.md fixes): a warp that loads and adds one rank at a time
// waits a full memory latency per rank and leaves the combine latency-bound.
constexpr int kReduceLoadsInFlight = 8;

// The reduced row leaves through shared memory with TMA stores, in pieces of kOutputPieceBytes,
// double-buffered per warp: while one piece's store reads shared memory the warp fills the other.
constexpr uint32_t kOutputPieceBytes = 2048;
constexpr uint32_t kOutputPieceChunks = kOutputPieceBytes / 16;

// A warp's output staging: two pieces, and how many pieces it has stored so far (to alternate).
struct OutputStaging {
  int4* pieces;  // [2][kOutputPieceChunks]
  uint32_t stored;
};

// Stores `chunks` reduced chunks of staging piece (stored % 2) to `destination` with one TMA store.
__device__ __forceinline__ void store_output_piece(OutputStaging& staging, void* destination,
                                                   uint32_t chunks) {
  ptx::fence_proxy_async_shared();  // this lane's writes to the piece, before the async proxy reads it
  __syncwarp();
  if (lane_id() == 0) {
    ptx::tma_store_1d(destination, staging.pieces + (staging.stored % 2) * kOutputPieceChunks, chunks * 16);
    ptx::tma_store_commit();
  }
  ++staging.stored;
}

// Before the warp writes the next piece: the store that read it two pieces ago has finished reading.
__device__ __forceinline__ void wait_output_piece_free(const OutputStaging& staging) {
  if (staging.stored >= 2 && lane_id() == 0) ptx::tma_store_wait_read_all_but_one();
  __syncwarp();
}

// Where `rank`'s row of a token of `channel` is, the token's ring index on that rank being `slot`: in the
// ring slot, or with rows in place in the expert rank's heap-resident combine input, at the start of its
// range of (this rank, channel) plus `slot` (docs/normal-in-place.md). Returns the row; *weights gets its
// top-k weights (meaningful only with weights).
__device__ __forceinline__ const uint8_t* combine_row(const KernelContext& context,
                                                      const CombineLaunch& launch, int channel, int rank,
                                                      int32_t slot, const float** weights) {
  const common::CombineMessage& message = launch.message;
  if (!launch.rows_in_place) {
    uint8_t* ring_slot = context.layout.ring(context.heap.base, channel, rank).slot(slot);
    *weights = message.topk_weights(ring_slot);
    return message.row(ring_slot);
  }
  const int64_t row = static_cast<int64_t>(launch.input.first_rows(context.heap.base, rank)[channel]) + slot;
  const uint8_t* heap = context.heap.peer_base(rank);
  *weights = reinterpret_cast<const float*>(heap + launch.input.weights_offset()) + row * message.topk;
  return heap + launch.input.y_offset() + row * message.row_bytes;
}

// One warp reduces token `token`, whose rows are all present: per node, fp32 over its ranks
// ascending from +0, rounded to bf16; then fp32 over node partials ascending, rounded once. With one
// node there is no partial: the ranks' rows go straight into the final sum. The final sum starts at
// bias0 + bias1 (+0 without biases).
// `rows_of_rank`: this warp's table of the token's row per rank (filled here).
__device__ void reduce_token(const KernelContext& context, const CombineLaunch& launch, int channel,
                             int64_t token, OutputStaging& staging, const int4** rows_of_rank) {
  const int num_ranks = context.num_ranks;
  const common::CombineMessage& message = launch.message;
  const uint32_t chunks = message.row_bytes / 16;
  const bool* in_rank = launch.is_token_in_rank + token * num_ranks;
  const int32_t* slots = launch.send_slot + token * num_ranks;
  const uint32_t holders = ranks_holding_token(in_rank, num_ranks);
  const int lane = lane_id();
  int4* out = reinterpret_cast<int4*>(launch.combined_x + token * (message.row_bytes / 2));
  const int64_t row_elements = message.row_bytes / 2;
  const uint16_t* bias0_row = launch.bias0 ? launch.bias0 + token * row_elements : nullptr;
  const uint16_t* bias1_row = launch.bias1 ? launch.bias1 + token * row_elements : nullptr;
  const bool one_node = launch.ranks_per_node >= num_ranks;
  // NOTES: looked up once per token. The chunk loop used to load the rank's slot and recompute its ring
  // before every 16-byte row load, a dependent load in front of each: with the table the combine at 4096
  // tokens went 3.06 -> 2.30 ms at 8 processes and 1.25 -> 0.93 ms at 4 (bench/NOTES.md, session 28).
  if (lane < num_ranks && ((holders >> lane) & 1u)) {
    const float* unused_weights;
    rows_of_rank[lane] = reinterpret_cast<const int4*>(
        combine_row(context, launch, channel, lane, slots[lane], &unused_weights));
  }
  __syncwarp();
  for (uint32_t piece_begin = 0; piece_begin < chunks; piece_begin += kOutputPieceChunks) {
    const uint32_t piece_chunks = min(kOutputPieceChunks, chunks - piece_begin);
    wait_output_piece_free(staging);
    int4* piece = staging.pieces + (staging.stored % 2) * kOutputPieceChunks;
    for (uint32_t offset = lane; offset < piece_chunks; offset += 32) {
      const uint32_t chunk = piece_begin + offset;
      float total[8];
      start_bf16x8(total, bias0_row, bias1_row, chunk);
      for (int node_first = 0; node_first < num_ranks; node_first += launch.ranks_per_node) {
        const int node_end = min(num_ranks, node_first + launch.ranks_per_node);
        const uint32_t node_bits =
            node_end - node_first >= 32 ? 0xffffffffu : (1u << (node_end - node_first)) - 1u;
        uint32_t pending = (holders >> node_first) & node_bits;
        if (pending == 0) continue;
        // One node: node_sum is the final sum, from the bias on, rounded only once below.
        float node_sum[8];
#pragma unroll
        for (int i = 0; i < 8; ++i) node_sum[i] = one_node ? total[i] : 0.0f;
        while (pending != 0) {
          int4 rows[kReduceLoadsInFlight];
          int count = 0;
#pragma unroll
          for (int j = 0; j < kReduceLoadsInFlight; ++j) {
            if (pending == 0) break;
            const int rank = node_first + __ffs(pending) - 1;
            pending &= pending - 1u;
            rows[j] = rows_of_rank[rank][chunk];
            count = j + 1;
          }
#pragma unroll
          for (int j = 0; j < kReduceLoadsInFlight; ++j) {
            if (j < count) add_bf16x8(node_sum, rows[j]);
          }
        }
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          total[i] =
              one_node ? node_sum[i] : total[i] + common::bf16_to_float(common::float_to_bf16(node_sum[i]));
        }
      }
      uint32_t words[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        words[i] = static_cast<uint32_t>(common::float_to_bf16(total[2 * i])) |
                   (static_cast<uint32_t>(common::float_to_bf16(total[2 * i + 1])) << 16);
      }
      piece[offset] = make_int4(static_cast<int>(words[0]), static_cast<int>(words[1]),
                                static_cast<int>(words[2]), static_cast<int>(words[3]));
    }
    store_output_piece(staging, out + piece_begin, piece_chunks);
  }
  if (launch.combined_topk_weights) {
    const int topk = static_cast<int>(message.topk);
    for (int k = lane; k < topk; k += 32) {
      float sum = 0.0f;
      for (int rank = 0; rank < num_ranks; ++rank) {
        if (!in_rank[rank]) continue;
        const float* weights;
        combine_row(context, launch, channel, rank, slots[rank], &weights);
        sum += weights[k];
      }
      launch.combined_topk_weights[token * topk + k] = sum;
    }
  }
}

// Rows in place: expert rank `rank` published where this channel's rows for us start; with the number of
// tokens we sent it on this channel, the range must lie in its heap combine input. A peer whose call
// differs (another handle) or a corrupt table would otherwise send the reads past it: recorded as this
// receiver's failure.
__device__ __forceinline__ bool published_range_fits(const KernelContext& context,
                                                     const CombineLaunch& launch, int channel, int rank) {
  const int32_t* prefix = launch.send_channel_prefix + rank * (context.num_channels + 1);
  const int64_t count = prefix[channel + 1] - prefix[channel];
  const int64_t first = launch.input.first_rows(context.heap.base, rank)[channel];
  if (count == 0 || (first >= 0 && first + count <= launch.input.max_rows)) return true;
  const WaitSite site{common::WaitRole::combine_receiver, common::WaitTarget::source_row, channel, rank};
  record_wait_failure(context, site, launch.input.max_rows, first + count, 0);
  return false;
}

// The receiver block is split as DeepEP's is. Warp 0 coordinates; warps 1..W-1 reduce, warp w taking
// tokens begin + w - 1, then every (W - 1)th. A reducing warp waits only for its own token's rows and
// never for the other warps.
// NOTES: it replaced warps that took one token each of a batch and met at a block barrier after every
// batch. Measured as processes at 4096 tokens (bench/NOTES.md, session 28), the split alone left 8 ranks
// where they were and 4 ranks ~10 % faster; most of the gain came from reduce_token's row table.

// Coordinator, lane r for expert rank r: keeps the block's copy of rank r's ring tail fresh, and frees
// rank r's slots up to the first token that some warp has not reduced yet. Returns once every reducing
// warp has left (done, or given up after a failed wait).
__device__ void combine_coordinator(const KernelContext& context, const CombineLaunch& launch,
                                    CombineShared& shared, int channel, int64_t begin, int64_t end,
                                    int reducing_warps) {
  const int num_ranks = context.num_ranks;
  const int rank = lane_id();
  if (rank >= num_ranks) return;
  const common::Ring ring = context.layout.ring(context.heap.base, channel, rank);
  int64_t accounted = begin;  // tokens before this one have given their slots of rank's ring to `head`
  uint64_t head = 0, published = 0;
  for (;;) {
    uint64_t reduced = ~uint64_t{0};  // every token before this one is reduced
    for (int warp = 1; warp <= reducing_warps; ++warp)
      reduced = min(reduced, ptx::atom_load_acquire_cta_shared_u64(&shared.next_token[warp]));
    const int64_t reduced_end = reduced >= static_cast<uint64_t>(end) ? end : static_cast<int64_t>(reduced);
    for (; accounted < reduced_end; ++accounted) {
      const int32_t slot = launch.send_slot[accounted * num_ranks + rank];
      if (slot >= 0) head = static_cast<uint64_t>(slot) + 1;
    }
    if (head > published) {
      // The reducing warps' reads of these slots happen before (their release, our acquire above).
      st_release_peer(context, ring.head(), head);
      published = head;
    }
    if (reduced_end >= end) return;
    ptx::atom_store_release_cta_shared_u64(&shared.tail[rank], ld_acquire_peer(context, ring.tail()));
  }
}

// Reducing warp `warp` of its block: the channel's tokens begin + first, then every `stride`th, each once
// its rows are in.
__device__ void combine_reducer(const KernelContext& context, const CombineLaunch& launch,
                                CombineShared& shared, int channel, int64_t begin, int64_t end, int warp,
                                int first, int stride, OutputStaging& staging) {
  const int num_ranks = context.num_ranks;
  const int lane = lane_id();
  for (int64_t token = begin + first; token < end; token += stride) {
    bool ready = true;
    // Rows in place were all written before the combine's opening barrier: nothing to wait for.
    if (lane < num_ranks && !launch.rows_in_place) {
      const int32_t slot = launch.send_slot[token * num_ranks + lane];
      if (slot >= 0) {
        const WaitSite site{common::WaitRole::combine_receiver, common::WaitTarget::ring_data, channel, lane};
        ready = wait_shared_at_least(context, &shared.tail[lane], static_cast<uint64_t>(slot) + 1, site);
      }
    }
    // The waiting lanes' acquires come before every lane's reads of the rows: reduce_token meets at a
    // __syncwarp (after its row table) before it reads them.
    if (!__all_sync(0xffffffffu, ready)) break;
    reduce_token(context, launch, channel, token, staging, shared.token_rows[warp]);
    __syncwarp();  // every lane has read its part of the rows before lane 0 hands the slots back
    if (lane == 0)
      ptx::atom_store_release_cta_shared_u64(&shared.next_token[warp], static_cast<uint64_t>(token + stride));
  }
  if (lane == 0) {
    ptx::atom_store_release_cta_shared_u64(&shared.next_token[warp], ~uint64_t{0});
    ptx::tma_store_wait_all();  // lane 0 issued this warp's TMA stores: complete before the kernel ends
  }
}

__device__ void combine_receiver(const KernelContext& context, const CombineLaunch& launch,
                                 CombineShared& shared, int channel) {
  const int warps = static_cast<int>(blockDim.x / 32);
  const int warp = static_cast<int>(threadIdx.x / 32);
  const int64_t begin = common::channel_begin(launch.num_tokens, context.num_channels, channel);
  const int64_t end = common::channel_begin(launch.num_tokens, context.num_channels, channel + 1);
  for (int rank = threadIdx.x; rank < context.num_ranks; rank += blockDim.x) shared.tail[rank] = 0;
  for (int w = threadIdx.x; w < warps; w += blockDim.x)
    shared.next_token[w] = static_cast<uint64_t>(begin + w - 1);
  if (threadIdx.x == 0) shared.bad_range = 0;
  __syncthreads();
  if (launch.rows_in_place) {
    for (int rank = threadIdx.x; rank < context.num_ranks; rank += blockDim.x) {
      if (!published_range_fits(context, launch, channel, rank)) atomicExch(&shared.bad_range, 1);
    }
    __syncthreads();
    if (shared.bad_range) return;  // recorded; nothing is read or written for this channel
  }
  // Warp w reduces tokens begin + first, then every stride-th. Rows in place: no ring to track or free and
  // no sender, so both blocks of the channel reduce, every warp of each. Otherwise warp 0 coordinates.
  int first = warp - 1, stride = warps - 1;
  if (launch.rows_in_place) {
    first = static_cast<int>(blockIdx.x % 2) * warps + warp;
    stride = 2 * warps;
  } else if (warp == 0) {
    combine_coordinator(context, launch, shared, channel, begin, end, warps - 1);
    return;
  }
  extern __shared__ int4 output_pieces[];
  OutputStaging staging{output_pieces + warp * 2 * kOutputPieceChunks, 0};
  combine_reducer(context, launch, shared, channel, begin, end, warp, first, stride, staging);
}

// NOTES: bounded so that 24 warps fit an SM's 65536 registers: unbounded, ptxas gave it 94-96.
__global__ void __launch_bounds__(kTargetWarps * 32, 1)
    combine_kernel(KernelContext context, CombineLaunch launch, int warps_per_group) {
  ptx::wait_for_previous_grid();  // launched by launch_dependent: before any global access
  __shared__ CombineShared shared;
  const int channel = blockIdx.x / 2;
  // The opening found the ranks' calls mismatched (or a peer failed): write nothing (a token that no rank
  // holds would otherwise get its +0 row without any wait noticing; found on the GPU, session 30).
  if (!call_stopped(context)) {
    // Rows in place: the home ranks read them where this rank's caller wrote them, so there is nothing to
    // send, and the channel's two blocks both reduce (combine_receiver).
    if (blockIdx.x % 2 == 0 && !launch.rows_in_place) {
      combine_sender(context, launch, shared, channel, warp_group_of_this_warp(warps_per_group));
    } else {
      combine_receiver(context, launch, shared, channel);
    }
  }
  // Rows read in place: every home is done reading this rank's rows before the caller's next write to them.
  if (launch.rows_in_place) close_call_by_last_block(context, launch.blocks_done);
}

}  // namespace

void launch_combine(const KernelContext& context, const CombineLaunch& launch, cudaStream_t stream) {
  const int warps = combine_warps_per_block(context.num_ranks);
  const int warps_per_group = warps >= context.num_ranks ? warps / context.num_ranks : 1;
  const size_t shared_bytes =
      static_cast<size_t>(warps) * 2 * kOutputPieceBytes;  // receivers' output staging
  launch_dependent(combine_kernel, 2 * context.num_channels, warps * 32, shared_bytes, stream, context,
                   launch, warps_per_group);
}

void prepare_combine_kernel() {
  preload_kernel(combine_kernel);
  SY_CUDA_CHECK(cudaFuncSetAttribute(combine_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(kMaxWarps * 2 * kOutputPieceBytes)));
}

}  // namespace switchyard::cuda
