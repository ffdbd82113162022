// get_dispatch_layout on the GPU: one thread per token; counts with integer atomics (exact, so the
// result does not depend on their order).
#include "cuda/backend/kernel_preload.hpp"
#include "cuda/normal/kernels.hpp"
#include "device/bounded_wait.cuh"
#include "device/cuda_check.hpp"

namespace switchyard::cuda {

namespace {

constexpr int kLayoutThreads = 256;
// NOTES: a token's ranks and nodes are tracked in a bitmask on the stack; 128 ranks = the SymHeap limit.
constexpr int kMaxRankWords = 4;

__global__ void layout_kernel(KernelContext context, LayoutLaunch launch) {
  const int64_t token = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (token >= launch.num_tokens) return;
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
    atomicAdd(&launch.num_tokens_per_expert[expert], 1);
    int rank = static_cast<int>(expert / experts_per_rank);
    int node = rank / launch.ranks_per_node;
    rank_bits[rank / 32] |= 1u << (rank % 32);
    node_bits[node / 32] |= 1u << (node % 32);
  }
  for (int rank = 0; rank < launch.num_ranks; ++rank) {
    bool in_rank = (rank_bits[rank / 32] >> (rank % 32)) & 1u;
    launch.is_token_in_rank[token * launch.num_ranks + rank] = in_rank;
    if (in_rank) atomicAdd(&launch.num_tokens_per_rank[rank], 1);
  }
  const int num_nodes = launch.num_ranks / launch.ranks_per_node;
  for (int node = 0; node < num_nodes; ++node) {
    if ((node_bits[node / 32] >> (node % 32)) & 1u) atomicAdd(&launch.num_tokens_per_node[node], 1);
  }
}

}  // namespace

void launch_layout(const KernelContext& context, const LayoutLaunch& launch, cudaStream_t stream) {
  // NOTES: each launch costs host time comparable to the kernel's (bench/NOTES.md, session 13): counts that
  // are consecutive (the engine's own storage, or a caller's one allocation) are cleared at once.
  const int num_nodes = launch.num_ranks / launch.ranks_per_node;
  if (launch.num_tokens_per_node == launch.num_tokens_per_rank + launch.num_ranks &&
      launch.num_tokens_per_expert == launch.num_tokens_per_node + num_nodes) {
    SY_CUDA_CHECK(cudaMemsetAsync(launch.num_tokens_per_rank, 0,
                                  sizeof(int32_t) * (launch.num_ranks + num_nodes + launch.num_experts),
                                  stream));
  } else {
    SY_CUDA_CHECK(cudaMemsetAsync(launch.num_tokens_per_rank, 0, sizeof(int32_t) * launch.num_ranks, stream));
    SY_CUDA_CHECK(cudaMemsetAsync(launch.num_tokens_per_node, 0, sizeof(int32_t) * num_nodes, stream));
    SY_CUDA_CHECK(
        cudaMemsetAsync(launch.num_tokens_per_expert, 0, sizeof(int32_t) * launch.num_experts, stream));
  }
  if (launch.num_tokens == 0) return;
  const int blocks = static_cast<int>((launch.num_tokens + kLayoutThreads - 1) / kLayoutThreads);
  layout_kernel<<<blocks, kLayoutThreads, 0, stream>>>(context, launch);
  SY_CUDA_CHECK_LAUNCH();
}

void prepare_layout_kernel() {
  preload_kernel(layout_kernel);
}

}  // namespace switchyard::cuda
