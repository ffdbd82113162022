#pragma once
// The oracle: plain loops over every rank's inputs at once, written to be obviously correct rather
// than fast. Every engine on every backend must match it bit for bit (DESIGN.md, Semantics).
// All tensors here are host tensors.
#include <cstdint>
#include <vector>

#include "switchyard/tensor.hpp"
#include "switchyard/topology.hpp"

namespace switchyard::reference {

struct RankInputs {
  TensorView x;             // bf16 or fp8_e4m3 [N, H]
  TensorView x_scales;      // f32 [N, H / 128] for fp8
  TensorView topk_idx;      // i64 [N, K]
  TensorView topk_weights;  // f32 [N, K]; optional
};

struct Layout {
  std::vector<int> num_tokens_per_rank;    // [R]
  std::vector<int> num_tokens_per_node;    // [nodes]
  std::vector<int> num_tokens_per_expert;  // [E]
  std::vector<uint8_t> is_token_in_rank;   // [N * R], 0 or 1
};

Layout layout(const TensorView& topk_idx, int num_experts, const Topology& topology);

// What rank d receives from a `normal` dispatch.
struct NormalDispatchOutput {
  Tensor recv_x;             // [M, H]
  Tensor recv_x_scales;      // f32 [M, H / 128] for fp8, else undefined
  Tensor recv_topk_idx;      // i64 [M, K], local ids, -1 for other ranks' experts
  Tensor recv_topk_weights;  // f32 [M, K], 0 where recv_topk_idx is -1 (undefined without weights)
  std::vector<int> num_recv_tokens_per_expert;  // [local_experts], rounded up to the alignment
  std::vector<int> recv_src_rank;                // [M]
  std::vector<int64_t> recv_src_token;           // [M]
};

std::vector<NormalDispatchOutput> normal_dispatch(const std::vector<RankInputs>& inputs, int num_experts,
                                                  const Topology& topology, int expert_alignment = 1);

struct NormalCombineOutput {
  Tensor combined_x;             // bf16 [N, H]
  Tensor combined_topk_weights;  // f32 [N, K], when weights were given
};

// ys[d]: rank d's combine input, bf16 [M_d, H], rows in d's receive order; weights[d] optional
// f32 [M_d, K]. Reduces in the order of DESIGN.md: fp32 over a node's ranks ascending, rounded
// to bf16 once per node, then fp32 over nodes ascending, rounded once.
std::vector<NormalCombineOutput> normal_combine(const std::vector<TensorView>& ys,
                                                const std::vector<TensorView>& weights,
                                                const std::vector<NormalDispatchOutput>& dispatched,
                                                const std::vector<int64_t>& num_tokens_per_source,
                                                const Topology& topology);

}  // namespace switchyard::reference
