// get_dispatch_layout on the GPU: a thread per token; counts with integer atomics (exact, so the result
// does not depend on their order), in one block's shared memory, or for large layouts in the cleared
// outputs across a grid.
#include "cuda/backend/dependent_launch.hpp"
#include "cuda/backend/kernel_preload.hpp"
#include "cuda/normal/kernels.hpp"
#include "device/bounded_wait.cuh"
#include "device/cuda_check.hpp"

namespace switchyard::cuda {

namespace {

constexpr int kLayoutThreads = 256;
constexpr int kOneBlockThreads = 1024;
constexpr size_t kOneBlockCountBytes = 48 * 1024;  // the shared memory a block gets without opting in
constexpr int64_t kOneBlockMaxTokens = 32768;
// NOTES: a token's ranks and nodes are tracked in a bitmask on the stack; 128 ranks = the SymHeap limit.
constexpr int kMaxRankWords = 4;

// One token's routing: its is_token_in_rank row, and one count per valid slot's expert and per rank and
// node it reaches, added to `per_expert`, `per_rank` and `per_node` (global or shared memory).
__device__ __forceinline__ void route_token(const KernelContext& context, const LayoutLaunch& launch,
                                            int64_t token, int32_t* per_rank, int32_t* per_node,
                                            int32_t* per_expert) {
  const int experts_per_rank = launch.num_experts / launch.num_ranks;
  uint32_t rank_bits[kMaxRankWords] = {0, 0, 0, 0};
  uint32_t node_bits[kMaxRankWords] = {0, 0, 0, 0};
  for (int slot = 0; slot < launch.topk; ++slot) {
    int64_t expert = launch.topk_idx[token * launch.topk + slot];
    if (expert < 0 || expert >= launch.num_experts) {
      if (expert != -1) {
        WaitSite site{common::WaitRole::layout, common::WaitTarget::invalid_expert, -1, -1};
        record_wait_failure(context, site, launch.num_experts, expert, 0, false);
      }
      continue;
    }
    atomicAdd(&per_expert[expert], 1);
    int rank = static_cast<int>(expert / experts_per_rank);
    int node = rank / launch.ranks_per_node;
    rank_bits[rank / 32] |= 1u << (rank % 32);
    node_bits[node / 32] |= 1u << (node % 32);
  }
  for (int rank = 0; rank < launch.num_ranks; ++rank) {
    bool in_rank = (rank_bits[rank / 32] >> (rank % 32)) & 1u;
    launch.is_token_in_rank[token * launch.num_ranks + rank] = in_rank;
    if (in_rank) atomicAdd(&per_rank[rank], 1);
  }
  const int num_nodes = launch.num_ranks / launch.ranks_per_node;
  for (int node = 0; node < num_nodes; ++node) {
    if ((node_bits[node / 32] >> (node % 32)) & 1u) atomicAdd(&per_node[node], 1);
  }
}

// The whole layout in one block: the counts live in shared memory, cleared and written out by the
// block itself, so the call is one launch with no memset before it.
__global__ void layout_one_block_kernel(KernelContext context, LayoutLaunch launch) {
  ptx::wait_for_previous_grid();       // launched by launch_dependent: before any global access
  extern __shared__ int32_t counts[];  // [R], [nodes], [E]
  const int num_nodes = launch.num_ranks / launch.ranks_per_node;
  const int total = launch.num_ranks + num_nodes + launch.num_experts;
  for (int i = threadIdx.x; i < total; i += blockDim.x) counts[i] = 0;
  __syncthreads();
  int32_t* per_rank = counts;
  int32_t* per_node = counts + launch.num_ranks;
  int32_t* per_expert = per_node + num_nodes;
  for (int64_t token = threadIdx.x; token < launch.num_tokens; token += blockDim.x) {
    route_token(context, launch, token, per_rank, per_node, per_expert);
  }
  __syncthreads();
  for (int i = threadIdx.x; i < launch.num_ranks; i += blockDim.x)
    launch.num_tokens_per_rank[i] = per_rank[i];
  for (int i = threadIdx.x; i < num_nodes; i += blockDim.x) launch.num_tokens_per_node[i] = per_node[i];
  for (int i = threadIdx.x; i < launch.num_experts; i += blockDim.x)
    launch.num_tokens_per_expert[i] = per_expert[i];
}

// One thread per token, counting into the (cleared) outputs: for layouts too large for one block.
__global__ void layout_kernel(KernelContext context, LayoutLaunch launch) {
  ptx::wait_for_previous_grid();  // launched by launch_dependent: before any global access
  const int64_t token = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (token >= launch.num_tokens) return;
  route_token(context, launch, token, launch.num_tokens_per_rank, launch.num_tokens_per_node,
              launch.num_tokens_per_expert);
}

}  // namespace

void launch_layout(const KernelContext& context, const LayoutLaunch& launch, cudaStream_t stream) {
  const int num_nodes = launch.num_ranks / launch.ranks_per_node;
  const size_t count_bytes = sizeof(int32_t) * (launch.num_ranks + num_nodes + launch.num_experts);
  // NOTES: each launch or memset costs host time comparable to the kernel's at decode sizes (bench/NOTES.md,
  // session 13), so the usual layout is one launch of one block: at 4096 tokens x 8 slots its threads take
  // 4 tokens each. Counts past the default shared memory, or token counts where one block would take
  // longer than the memsets it saves, go to the grid.
  if (count_bytes <= kOneBlockCountBytes && launch.num_tokens <= kOneBlockMaxTokens) {
    launch_dependent(layout_one_block_kernel, 1, kOneBlockThreads, count_bytes, stream, context, launch);
    return;
  }
  if (launch.num_tokens_per_node == launch.num_tokens_per_rank + launch.num_ranks &&
      launch.num_tokens_per_expert == launch.num_tokens_per_node + num_nodes) {
    SY_CUDA_CHECK(cudaMemsetAsync(launch.num_tokens_per_rank, 0, count_bytes, stream));
  } else {
    SY_CUDA_CHECK(cudaMemsetAsync(launch.num_tokens_per_rank, 0, sizeof(int32_t) * launch.num_ranks, stream));
    SY_CUDA_CHECK(cudaMemsetAsync(launch.num_tokens_per_node, 0, sizeof(int32_t) * num_nodes, stream));
    SY_CUDA_CHECK(
        cudaMemsetAsync(launch.num_tokens_per_expert, 0, sizeof(int32_t) * launch.num_experts, stream));
  }
  if (launch.num_tokens == 0) return;
  const int blocks = static_cast<int>((launch.num_tokens + kLayoutThreads - 1) / kLayoutThreads);
  launch_dependent(layout_kernel, blocks, kLayoutThreads, 0, stream, context, launch);
}

void prepare_layout_kernel() {
  preload_kernel(layout_kernel);
  preload_kernel(layout_one_block_kernel);
}

}  // namespace switchyard::cuda
