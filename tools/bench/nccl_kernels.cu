// The nccl baseline's kernels (nccl_kernels.hpp). Plain and memory-bound, as a framework's permute
// and unpermute are: one block per destination for the routing, one block per token otherwise.
#include <string>

#include "common/numeric.hpp"
#include "cuda_check.hpp"
#include "nccl_kernels.hpp"

namespace switchyard::bench {
namespace {

constexpr int kWarpSize = 32;
constexpr unsigned kFullMask = 0xffffffffu;
// Routing: one block per destination walks all tokens, this many at a time.
constexpr int kRouteThreads = 512;
constexpr int kRouteWarps = kRouteThreads / kWarpSize;
static_assert(kRouteWarps <= kWarpSize, "the warp totals are scanned by one warp");
// Packing and reduction: one block per token (grid-stride), threads over the row.
constexpr int kRowThreads = 256;
constexpr int64_t kMaxRowBlocks = 8192;
constexpr int kLocalizeThreads = 256;
constexpr int64_t kMaxLocalizeBlocks = 4096;
// 16-byte copies: 8 bf16 values.
constexpr int kVectorBytes = 16;
constexpr int kBf16PerVector = kVectorBytes / 2;

void check_launch(const char* kernel) {
  check_cuda(cudaGetLastError(), std::string("launching ") + kernel);
}

// Inclusive sum over the lanes of a warp.
__device__ __forceinline__ int warp_inclusive_sum(int value, int lane) {
  for (int offset = 1; offset < kWarpSize; offset <<= 1) {
    const int lower = __shfl_up_sync(kFullMask, value, offset);
    if (lane >= offset) value += lower;
  }
  return value;
}

// Block `destination` flags each token with an expert on it and numbers the flagged tokens in token
// order (a block-wide exclusive scan per chunk of kRouteThreads tokens), and counts the (token, slot)
// pairs per local expert.
__global__ void __launch_bounds__(kRouteThreads) route_kernel(NcclRouteArgs args) {
  extern __shared__ int expert_counts[];  // [experts_per_rank]
  __shared__ int warp_offsets[kRouteWarps];
  __shared__ int chunk_total;
  __shared__ int rows_so_far;
  const int destination = blockIdx.x;
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  const int experts_per_rank = args.counts.experts_per_rank;
  for (int local = threadIdx.x; local < experts_per_rank; local += blockDim.x) expert_counts[local] = 0;
  if (threadIdx.x == 0) rows_so_far = 0;
  __syncthreads();

  for (int64_t base = 0; base < args.route.num_tokens; base += kRouteThreads) {
    const int64_t token = base + threadIdx.x;
    int wanted = 0;
    if (token < args.route.num_tokens) {
      for (int slot = 0; slot < args.topk; ++slot) {
        const int64_t expert = args.topk_idx[token * args.topk + slot];
        if (expert < 0 || expert / experts_per_rank != destination) continue;
        wanted = 1;
        atomicAdd(&expert_counts[expert % experts_per_rank], 1);
      }
    }
    const int inclusive = warp_inclusive_sum(wanted, lane);
    if (lane == kWarpSize - 1) warp_offsets[warp] = inclusive;
    __syncthreads();
    if (warp == 0) {
      const int total = lane < kRouteWarps ? warp_offsets[lane] : 0;
      const int scanned = warp_inclusive_sum(total, lane);
      if (lane < kRouteWarps) warp_offsets[lane] = scanned - total;
      if (lane == kWarpSize - 1) chunk_total = scanned;
    }
    __syncthreads();
    if (token < args.route.num_tokens) {
      args.route.slot(token, destination) =
          wanted ? rows_so_far + warp_offsets[warp] + inclusive - wanted : -1;
    }
    __syncthreads();
    if (threadIdx.x == 0) rows_so_far += chunk_total;
    __syncthreads();
  }
  if (threadIdx.x == 0) args.send_counts[args.counts.rows_index(destination)] = rows_so_far;
  for (int local = threadIdx.x; local < experts_per_rank; local += blockDim.x) {
    args.send_counts[args.counts.expert_index(destination, local)] = expert_counts[local];
  }
}

// The first send row of every destination's segment, into shared memory.
__device__ __forceinline__ void load_segment_offsets(int64_t* offsets, const int32_t* send_counts,
                                                     const NcclCounts& counts) {
  for (int rank = threadIdx.x; rank < counts.num_ranks; rank += blockDim.x) {
    offsets[rank] = segment_offset(send_counts, counts, rank);
  }
  __syncthreads();
}

__device__ __forceinline__ void copy_row(uint8_t* destination, const uint8_t* source, int64_t bytes) {
  if (bytes % kVectorBytes == 0) {
    const int4* from = reinterpret_cast<const int4*>(source);
    int4* to = reinterpret_cast<int4*>(destination);
    for (int64_t i = threadIdx.x; i < bytes / kVectorBytes; i += blockDim.x) to[i] = from[i];
  } else {
    for (int64_t i = threadIdx.x; i < bytes; i += blockDim.x) destination[i] = source[i];
  }
}

__global__ void __launch_bounds__(kRowThreads) pack_kernel(NcclPackArgs args) {
  extern __shared__ int64_t segment_offsets[];  // [num_ranks]
  load_segment_offsets(segment_offsets, args.send_counts, args.counts);
  for (int64_t token = blockIdx.x; token < args.route.num_tokens; token += gridDim.x) {
    for (int destination = 0; destination < args.counts.num_ranks; ++destination) {
      const int32_t slot = args.route.slot(token, destination);
      if (slot < 0) continue;
      const int64_t row = segment_offsets[destination] + slot;
      copy_row(args.send_x + row * args.x_row_bytes, args.x + token * args.x_row_bytes, args.x_row_bytes);
      if (args.x_scales) {
        for (int i = threadIdx.x; i < args.num_scales; i += blockDim.x) {
          args.send_scales[row * args.num_scales + i] = args.x_scales[token * args.num_scales + i];
        }
      }
      for (int i = threadIdx.x; i < args.topk; i += blockDim.x) {
        args.send_topk_idx[row * args.topk + i] = args.topk_idx[token * args.topk + i];
        args.send_topk_weights[row * args.topk + i] = args.topk_weights[token * args.topk + i];
      }
    }
  }
}

__global__ void __launch_bounds__(kLocalizeThreads) localize_kernel(NcclLocalizeArgs args) {
  const int64_t total = args.num_rows * args.topk;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t expert = args.topk_idx[i];
    const bool here = expert >= 0 && expert / args.experts_per_rank == args.rank;
    args.topk_idx[i] = here ? expert % args.experts_per_rank : -1;
    if (!here) args.topk_weights[i] = 0.0f;
  }
}

// One token's returned rows: row of destination rank d, or -1 when d did not get the token.
struct ReturnedRows {
  const int64_t* rows;
  int num_ranks;
  int ranks_per_node;
};

// x[column .. column + kWidth) of one token, reduced in the reference's order (DESIGN.md).
template <int kWidth>
__device__ __forceinline__ void reduce_columns(const NcclReduceArgs& args, const ReturnedRows& returned,
                                               int64_t token, int64_t column) {
  float total[kWidth];
  for (int i = 0; i < kWidth; ++i) total[i] = 0.0f;
  for (int node_first = 0; node_first < returned.num_ranks; node_first += returned.ranks_per_node) {
    float node_sum[kWidth];
    for (int i = 0; i < kWidth; ++i) node_sum[i] = 0.0f;
    bool any = false;
    for (int rank = node_first; rank < node_first + returned.ranks_per_node; ++rank) {
      const int64_t row = returned.rows[rank];
      if (row < 0) continue;
      const uint16_t* values = args.returned_x + row * args.hidden + column;
      alignas(16) uint16_t loaded[kWidth];
      if constexpr (kWidth == kBf16PerVector) {
        *reinterpret_cast<int4*>(loaded) = *reinterpret_cast<const int4*>(values);
      } else {
        for (int i = 0; i < kWidth; ++i) loaded[i] = values[i];
      }
      for (int i = 0; i < kWidth; ++i) node_sum[i] += common::bf16_to_float(loaded[i]);
      any = true;
    }
    if (!any) continue;
    // What would cross the network between nodes: the node's partial, rounded to bf16 once.
    for (int i = 0; i < kWidth; ++i) total[i] += common::bf16_to_float(common::float_to_bf16(node_sum[i]));
  }
  alignas(16) uint16_t out[kWidth];
  for (int i = 0; i < kWidth; ++i) out[i] = common::float_to_bf16(total[i]);
  uint16_t* destination = args.combined_x + token * args.hidden + column;
  if constexpr (kWidth == kBf16PerVector) {
    *reinterpret_cast<int4*>(destination) = *reinterpret_cast<const int4*>(out);
  } else {
    for (int i = 0; i < kWidth; ++i) destination[i] = out[i];
  }
}

// The weights of one (token, slot), in fp32 only, every node's sum added (a zero one too), as the
// reference does.
__device__ __forceinline__ float reduce_weight(const NcclReduceArgs& args, const ReturnedRows& returned,
                                               int slot) {
  float total = 0.0f;
  for (int node_first = 0; node_first < returned.num_ranks; node_first += returned.ranks_per_node) {
    float node_sum = 0.0f;
    for (int rank = node_first; rank < node_first + returned.ranks_per_node; ++rank) {
      const int64_t row = returned.rows[rank];
      if (row >= 0) node_sum += args.returned_weights[row * args.topk + slot];
    }
    total += node_sum;
  }
  return total;
}

__global__ void __launch_bounds__(kRowThreads) reduce_kernel(NcclReduceArgs args) {
  extern __shared__ int64_t shared[];  // [num_ranks] segment offsets, then [num_ranks] rows
  const int num_ranks = args.counts.num_ranks;
  int64_t* segment_offsets = shared;
  int64_t* rows = shared + num_ranks;
  load_segment_offsets(segment_offsets, args.send_counts, args.counts);
  const ReturnedRows returned{rows, num_ranks, args.ranks_per_node};
  const bool vectors = args.hidden % kBf16PerVector == 0;
  for (int64_t token = blockIdx.x; token < args.route.num_tokens; token += gridDim.x) {
    for (int rank = threadIdx.x; rank < num_ranks; rank += blockDim.x) {
      const int32_t slot = args.route.slot(token, rank);
      rows[rank] = slot < 0 ? -1 : segment_offsets[rank] + slot;
    }
    __syncthreads();
    if (vectors) {
      for (int64_t column = threadIdx.x * int64_t{kBf16PerVector}; column < args.hidden;
           column += int64_t{blockDim.x} * kBf16PerVector) {
        reduce_columns<kBf16PerVector>(args, returned, token, column);
      }
    } else {
      for (int64_t column = threadIdx.x; column < args.hidden; column += blockDim.x) {
        reduce_columns<1>(args, returned, token, column);
      }
    }
    for (int slot = threadIdx.x; slot < args.topk; slot += blockDim.x) {
      args.combined_weights[token * args.topk + slot] = reduce_weight(args, returned, slot);
    }
    __syncthreads();  // `rows` is rewritten for the next token
  }
}

unsigned row_blocks(int64_t num_tokens) {
  return static_cast<unsigned>(num_tokens < kMaxRowBlocks ? num_tokens : kMaxRowBlocks);
}

}  // namespace

void launch_nccl_route(const NcclRouteArgs& args, cudaStream_t stream) {
  const size_t shared_bytes = sizeof(int) * static_cast<size_t>(args.counts.experts_per_rank);
  route_kernel<<<args.counts.num_ranks, kRouteThreads, shared_bytes, stream>>>(args);
  check_launch("the nccl route kernel");
}

void launch_nccl_pack(const NcclPackArgs& args, cudaStream_t stream) {
  if (args.route.num_tokens == 0) return;
  const size_t shared_bytes = sizeof(int64_t) * static_cast<size_t>(args.counts.num_ranks);
  pack_kernel<<<row_blocks(args.route.num_tokens), kRowThreads, shared_bytes, stream>>>(args);
  check_launch("the nccl pack kernel");
}

void launch_nccl_localize(const NcclLocalizeArgs& args, cudaStream_t stream) {
  const int64_t total = args.num_rows * args.topk;
  if (total == 0) return;
  const int64_t blocks = (total + kLocalizeThreads - 1) / kLocalizeThreads;
  localize_kernel<<<static_cast<unsigned>(blocks < kMaxLocalizeBlocks ? blocks : kMaxLocalizeBlocks),
                    kLocalizeThreads, 0, stream>>>(args);
  check_launch("the nccl localize kernel");
}

void launch_nccl_reduce(const NcclReduceArgs& args, cudaStream_t stream) {
  if (args.route.num_tokens == 0) return;
  const size_t shared_bytes = 2 * sizeof(int64_t) * static_cast<size_t>(args.counts.num_ranks);
  reduce_kernel<<<row_blocks(args.route.num_tokens), kRowThreads, shared_bytes, stream>>>(args);
  check_launch("the nccl reduce kernel");
}

}  // namespace switchyard::bench
