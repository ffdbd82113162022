// The CUDA `normal` combine: per channel a sender block (expert side: each received row goes back
// to its home rank's ring, a warp group per home rank) and a receiver block (home side: a warp per
// token reduces the token's rows in DESIGN.md's fixed order and stores the result with TMA bulk stores).
#include "common/numeric.hpp"
#include "cuda/backend/kernel_preload.hpp"
#include "cuda/normal/kernels.hpp"
#include "device/bf16x8.cuh"
#include "device/bounded_wait.cuh"
#include "device/cuda_check.hpp"
#include "device/warp_copy.cuh"
#include "device/warp_group.cuh"

namespace switchyard::cuda {

namespace {

constexpr int kMaxWarps = 32;
constexpr int kMaxRanksPerBlock = 128;

struct CombineShared {
  int group_abort[kMaxWarps];
  int block_abort;
  uint64_t consumed[kMaxRanksPerBlock];  // per expert rank: slots of its ring already reduced
};

// Sender role: a group of warps returns this channel's rows for one home rank, a chunk per round.
__device__ void combine_sender(const KernelContext& context, const CombineLaunch& launch,
                               CombineShared& shared, int channel, const WarpGroup& group) {
  const int home = group.index;
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
    if (shared.group_abort[home]) return;
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
      ptx::fence_acq_rel_sys();
      common::st_release_sys(ring.tail(), round_end);
    }
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

// One warp reduces token `token`, whose rows are all present: per node, fp32 over its ranks
// ascending from +0, rounded to bf16; then fp32 over node partials ascending, rounded once. With one
// node there is no partial: the ranks' rows go straight into the final sum. The final sum starts at
// bias0 + bias1 (+0 without biases).
__device__ void reduce_token(const KernelContext& context, const CombineLaunch& launch, int channel,
                             int64_t token, OutputStaging& staging) {
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
            const uint8_t* slot = context.layout.ring(context.heap.base, channel, rank).slot(slots[rank]);
            rows[j] = reinterpret_cast<const int4*>(message.row(const_cast<uint8_t*>(slot)))[chunk];
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
        const uint8_t* slot = context.layout.ring(context.heap.base, channel, rank).slot(slots[rank]);
        sum += message.topk_weights(const_cast<uint8_t*>(slot))[k];
      }
      launch.combined_topk_weights[token * topk + k] = sum;
    }
  }
}

// Receiver role: the block walks this channel's tokens in batches of one token per warp. A warp
// waits until each of its token's rows has arrived, then reduces. After each batch the block frees
// the slots it consumed. NOTES: a batch never needs more slots of one ring than the sender can fill
// before the batch frees any (batch <= ring_slots - chunk + 1, chosen by the host).
__device__ void combine_receiver(const KernelContext& context, const CombineLaunch& launch,
                                 CombineShared& shared, int channel, int batch_tokens) {
  const int num_ranks = context.num_ranks;
  const int warp = threadIdx.x / 32;
  const int lane = lane_id();
  const int64_t begin = common::channel_begin(launch.num_tokens, context.num_channels, channel);
  const int64_t end = common::channel_begin(launch.num_tokens, context.num_channels, channel + 1);
  for (int rank = threadIdx.x; rank < num_ranks; rank += blockDim.x) shared.consumed[rank] = 0;
  if (threadIdx.x == 0) shared.block_abort = 0;
  extern __shared__ int4 output_pieces[];
  OutputStaging staging{output_pieces + warp * 2 * kOutputPieceChunks, 0};
  // Lane 0 issued this warp's TMA stores: they must be complete before the kernel ends.
  auto finish_stores = [&] {
    if (lane == 0) ptx::tma_store_wait_all();
  };
  __syncthreads();

  for (int64_t batch = begin; batch < end; batch += batch_tokens) {
    const int64_t token = batch + warp;
    if (warp < batch_tokens && token < end) {
      bool ready = true;
      if (lane == 0) {
        const bool* in_rank = launch.is_token_in_rank + token * num_ranks;
        for (int rank = 0; rank < num_ranks && ready; ++rank) {
          if (!in_rank[rank]) continue;
          const uint64_t needed = static_cast<uint64_t>(launch.send_slot[token * num_ranks + rank]) + 1;
          const common::Ring ring = context.layout.ring(context.heap.base, channel, rank);
          const WaitSite site{common::WaitRole::combine_receiver, common::WaitTarget::ring_data, channel,
                              rank};
          ready = wait_at_least(context, ring.tail(), needed, site);
        }
        if (!ready) shared.block_abort = 1;
      }
      ready = __shfl_sync(0xffffffffu, ready ? 1 : 0, 0) != 0;
      __syncwarp();  // lane 0's acquire of the tails orders the other lanes' reads of the rows
      if (ready) reduce_token(context, launch, channel, token, staging);
    }
    __syncthreads();
    if (shared.block_abort) {
      finish_stores();
      return;
    }
    // Free the slots of this batch: for each expert rank, up to its last token in the batch.
    const int64_t batch_end = min(end, batch + batch_tokens);
    for (int rank = threadIdx.x; rank < num_ranks; rank += blockDim.x) {
      for (int64_t t = batch_end - 1; t >= batch; --t) {
        const int32_t slot = launch.send_slot[t * num_ranks + rank];
        if (slot >= 0) {
          shared.consumed[rank] = static_cast<uint64_t>(slot) + 1;
          common::st_release_sys(context.layout.ring(context.heap.base, channel, rank).head(),
                                 shared.consumed[rank]);
          break;
        }
      }
    }
  }
  finish_stores();
}

__global__ void combine_kernel(KernelContext context, CombineLaunch launch, int warps_per_group,
                               int batch_tokens) {
  __shared__ CombineShared shared;
  const int channel = blockIdx.x / 2;
  if (blockIdx.x % 2 == 0) {
    combine_sender(context, launch, shared, channel, warp_group_of_this_warp(warps_per_group));
  } else {
    combine_receiver(context, launch, shared, channel, batch_tokens);
  }
}

}  // namespace

void launch_combine(const KernelContext& context, const CombineLaunch& launch, cudaStream_t stream) {
  const int warps = normal_warps_per_block(context.num_ranks);
  const int warps_per_group = warps / context.num_ranks;
  const int slack = static_cast<int>(context.layout.ring_slots) - static_cast<int>(context.chunk_tokens) + 1;
  const int batch_tokens = slack < warps ? slack : warps;
  const size_t shared_bytes =
      static_cast<size_t>(warps) * 2 * kOutputPieceBytes;  // receivers' output staging
  combine_kernel<<<2 * context.num_channels, warps * 32, shared_bytes, stream>>>(
      context, launch, warps_per_group, batch_tokens);
  SY_CUDA_CHECK_LAUNCH();
}

void prepare_combine_kernel() {
  preload_kernel(combine_kernel);
  SY_CUDA_CHECK(cudaFuncSetAttribute(combine_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(kMaxWarps * 2 * kOutputPieceBytes)));
}

}  // namespace switchyard::cuda
