#include "cpu/normal/dispatch_layout.hpp"

#include <cstring>

namespace switchyard::cpu {

DispatchLayout compute_dispatch_layout(const TensorView& topk_idx, int num_experts,
                                       const Topology& topology) {
  const int64_t num_tokens = topk_idx.shape[0];
  const int topk = static_cast<int>(topk_idx.shape[1]);
  const int num_ranks = topology.num_ranks;
  const int experts_per_rank = num_experts / num_ranks;
  DispatchLayout layout;
  layout.num_tokens_per_rank = Tensor::empty(DType::i32, {num_ranks});
  layout.num_tokens_per_node = Tensor::empty(DType::i32, {topology.num_nodes()});
  layout.num_tokens_per_expert = Tensor::empty(DType::i32, {num_experts});
  layout.is_token_in_rank = Tensor::empty(DType::boolean, {num_tokens, num_ranks});
  int32_t* per_rank = layout.num_tokens_per_rank.as<int32_t>();
  int32_t* per_node = layout.num_tokens_per_node.as<int32_t>();
  int32_t* per_expert = layout.num_tokens_per_expert.as<int32_t>();
  uint8_t* in_rank = layout.is_token_in_rank.as<uint8_t>();
  std::memset(per_rank, 0, sizeof(int32_t) * num_ranks);
  std::memset(per_node, 0, sizeof(int32_t) * topology.num_nodes());
  std::memset(per_expert, 0, sizeof(int32_t) * num_experts);
  std::memset(in_rank, 0, static_cast<size_t>(num_tokens) * num_ranks);
  const int64_t* ids = topk_idx.as<const int64_t>();
  std::vector<uint8_t> in_node(topology.num_nodes());
  for (int64_t token = 0; token < num_tokens; ++token) {
    uint8_t* row = in_rank + token * num_ranks;
    std::fill(in_node.begin(), in_node.end(), 0);
    for (int slot = 0; slot < topk; ++slot) {
      int64_t expert = ids[token * topk + slot];
      if (expert < 0) continue;
      ++per_expert[expert];
      int rank = static_cast<int>(expert / experts_per_rank);
      row[rank] = 1;
      in_node[topology.node_of(rank)] = 1;
    }
    for (int rank = 0; rank < num_ranks; ++rank) per_rank[rank] += row[rank];
    for (int node = 0; node < topology.num_nodes(); ++node) per_node[node] += in_node[node];
  }
  return layout;
}

DispatchLayout copy_into(const DispatchLayout& layout, const DispatchLayoutOutputs& out) {
  const std::pair<const Tensor*, const TensorView*> parts[] = {
      {&layout.num_tokens_per_rank, &out.num_tokens_per_rank},
      {&layout.num_tokens_per_node, &out.num_tokens_per_node},
      {&layout.num_tokens_per_expert, &out.num_tokens_per_expert},
      {&layout.is_token_in_rank, &out.is_token_in_rank}};
  for (const auto& [from, to] : parts) {
    if (from->nbytes() > 0) std::memcpy(to->data, from->data(), from->nbytes());
  }
  DispatchLayout result;
  result.num_tokens_per_rank = Tensor::borrow(out.num_tokens_per_rank);
  result.num_tokens_per_node = Tensor::borrow(out.num_tokens_per_node);
  result.num_tokens_per_expert = Tensor::borrow(out.num_tokens_per_expert);
  result.is_token_in_rank = Tensor::borrow(out.is_token_in_rank);
  return result;
}

}  // namespace switchyard::cpu
