// The oracle (DESIGN.md, Semantics): plain loops over every rank's inputs, in the order the
// contract states them. Nothing here is fast and nothing here is clever, on purpose.
#include "switchyard/reference.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "common/combine_bias.hpp"
#include "common/fp8_cast.hpp"
#include "common/logfmt.hpp"
#include "common/numeric.hpp"
#include "core/expert_capacity.hpp"
#include "switchyard/errors.hpp"

namespace switchyard::reference {

namespace {

// fp8 rows carry one fp32 scale per this many channels (DESIGN.md, Inputs).
constexpr int64_t kScaleBlock = 128;

std::string at_rank(const char* name, size_t rank) {
  return std::string(name) + "[" + std::to_string(rank) + "]";
}

void expect_host_tensor(const TensorView& tensor, const std::string& name, DType dtype, int ndim) {
  if (!tensor.defined()) {
    throw InvalidArgument(name + ": expected a " + dtype_name(dtype) + " tensor with " +
                          std::to_string(ndim) + " dimensions, got none");
  }
  if (tensor.dtype != dtype || tensor.ndim != ndim || tensor.device != Device::cpu) {
    throw InvalidArgument(name + ": expected a host " + dtype_name(dtype) + " tensor with " +
                          std::to_string(ndim) + " dimensions, got " + tensor.describe());
  }
  for (int dim = 0; dim < ndim; ++dim) {
    if (tensor.shape[dim] < 0) {
      throw InvalidArgument(name + ": expected non-negative dimensions, got " + tensor.describe());
    }
  }
  if (tensor.data == nullptr && tensor.numel() > 0) {
    throw InvalidArgument(name + ": expected data for " + tensor.describe() + ", got a null pointer");
  }
}

void expect_size(const TensorView& tensor, const std::string& name, int dim, int64_t expected,
                 const char* what) {
  if (tensor.shape[dim] != expected) {
    throw InvalidArgument(name + ": expected size " + std::to_string(expected) + " in dimension " +
                          std::to_string(dim) + " (" + what + "), got " + tensor.describe());
  }
}

void expect_topology(const Topology& topology) {
  if (topology.num_ranks < 1 || topology.ranks_per_node < 1 || topology.ranks_per_node > topology.num_ranks ||
      topology.num_ranks % topology.ranks_per_node != 0) {
    throw InvalidArgument(
        "topology: expected num_ranks >= 1 and ranks_per_node a divisor of num_ranks, got " +
        std::to_string(topology.num_ranks) + " ranks, " + std::to_string(topology.ranks_per_node) +
        " per node");
  }
}

void expect_num_experts(int num_experts, const Topology& topology) {
  if (num_experts < 1 || num_experts % topology.num_ranks != 0) {
    throw InvalidArgument("num_experts: expected a positive multiple of num_ranks (" +
                          std::to_string(topology.num_ranks) + "), got " + std::to_string(num_experts));
  }
}

void expect_expert_ids(const TensorView& topk_idx, const std::string& name, int num_experts) {
  const int64_t* ids = topk_idx.as<const int64_t>();
  const int64_t topk = topk_idx.shape[1];
  for (int64_t i = 0; i < topk_idx.numel(); ++i) {
    if (ids[i] < -1 || ids[i] >= num_experts) {
      throw InvalidArgument(name + ": expected expert ids in [-1, " + std::to_string(num_experts) +
                            "), got " + std::to_string(ids[i]) + " at token " + std::to_string(i / topk) +
                            ", slot " + std::to_string(i % topk));
    }
  }
}

// Where expert `expert` lives (DESIGN.md, Inputs and placement).
struct Placement {
  int experts_per_rank;
  int rank_of(int64_t expert) const { return static_cast<int>(expert / experts_per_rank); }
  int64_t local_of(int64_t expert) const { return expert % experts_per_rank; }
};

int64_t align_up(int64_t value, int64_t alignment) {
  return (value + alignment - 1) / alignment * alignment;
}

}  // namespace

Layout layout(const TensorView& topk_idx, int num_experts, const Topology& topology) {
  expect_topology(topology);
  expect_num_experts(num_experts, topology);
  expect_host_tensor(topk_idx, "topk_idx", DType::i64, 2);
  expect_expert_ids(topk_idx, "topk_idx", num_experts);

  const int num_ranks = topology.num_ranks;
  const int64_t num_tokens = topk_idx.shape[0];
  const int64_t topk = topk_idx.shape[1];
  const Placement placement{num_experts / num_ranks};
  const int64_t* ids = topk_idx.as<const int64_t>();

  Layout result;
  result.num_tokens_per_rank.assign(num_ranks, 0);
  result.num_tokens_per_node.assign(topology.num_nodes(), 0);
  result.num_tokens_per_expert.assign(num_experts, 0);
  result.is_token_in_rank.assign(static_cast<size_t>(num_tokens * num_ranks), 0);

  for (int64_t token = 0; token < num_tokens; ++token) {
    std::vector<bool> in_node(topology.num_nodes(), false);
    for (int64_t slot = 0; slot < topk; ++slot) {
      int64_t expert = ids[token * topk + slot];
      if (expert < 0) continue;
      // Per (token, slot), as DeepEP counts it.
      ++result.num_tokens_per_expert[expert];
      int rank = placement.rank_of(expert);
      result.is_token_in_rank[token * num_ranks + rank] = 1;
      in_node[topology.node_of(rank)] = true;
    }
    for (int rank = 0; rank < num_ranks; ++rank)
      result.num_tokens_per_rank[rank] += result.is_token_in_rank[token * num_ranks + rank];
    for (int node = 0; node < topology.num_nodes(); ++node)
      result.num_tokens_per_node[node] += in_node[node] ? 1 : 0;
  }
  return result;
}

std::vector<NormalDispatchOutput> normal_dispatch(const std::vector<RankInputs>& inputs, int num_experts,
                                                  const Topology& topology, int expert_alignment) {
  expect_topology(topology);
  expect_num_experts(num_experts, topology);
  const int num_ranks = topology.num_ranks;
  if (static_cast<int>(inputs.size()) != num_ranks) {
    throw InvalidArgument("inputs: expected one per rank (" + std::to_string(num_ranks) + "), got " +
                          std::to_string(inputs.size()));
  }
  if (expert_alignment < 1) {
    throw InvalidArgument("expert_alignment: expected >= 1, got " + std::to_string(expert_alignment));
  }

  // Every rank must agree on dtype, hidden, k and whether weights are given.
  const DType dtype = inputs[0].x.dtype;
  if (dtype != DType::bf16 && dtype != DType::fp8_e4m3) {
    throw InvalidArgument("inputs[0].x: expected dtype bf16 or fp8_e4m3, got " + inputs[0].x.describe());
  }
  const bool has_weights = inputs[0].topk_weights.defined();
  int64_t hidden = -1;
  int64_t topk = -1;
  for (size_t rank = 0; rank < inputs.size(); ++rank) {
    const RankInputs& in = inputs[rank];
    const std::string x_name = at_rank("inputs", rank) + ".x";
    expect_host_tensor(in.x, x_name, dtype, 2);
    if (hidden < 0) hidden = in.x.shape[1];
    expect_size(in.x, x_name, 1, hidden, "hidden of inputs[0].x");
    if (hidden < 1) throw InvalidArgument(x_name + ": expected hidden >= 1, got " + in.x.describe());
    const int64_t num_tokens = in.x.shape[0];

    const std::string scales_name = at_rank("inputs", rank) + ".x_scales";
    if (dtype == DType::fp8_e4m3) {
      if (hidden % kScaleBlock != 0) {
        throw InvalidArgument(x_name + ": expected hidden a multiple of 128 for fp8, got " + in.x.describe());
      }
      expect_host_tensor(in.x_scales, scales_name, DType::f32, 2);
      expect_size(in.x_scales, scales_name, 0, num_tokens, "num_tokens of x");
      expect_size(in.x_scales, scales_name, 1, hidden / kScaleBlock, "hidden / 128");
    } else if (in.x_scales.defined()) {
      throw InvalidArgument(scales_name + ": expected none for bf16 x, got " + in.x_scales.describe());
    }

    const std::string idx_name = at_rank("inputs", rank) + ".topk_idx";
    expect_host_tensor(in.topk_idx, idx_name, DType::i64, 2);
    expect_size(in.topk_idx, idx_name, 0, num_tokens, "num_tokens of x");
    if (topk < 0) topk = in.topk_idx.shape[1];
    expect_size(in.topk_idx, idx_name, 1, topk, "k of inputs[0].topk_idx");
    expect_expert_ids(in.topk_idx, idx_name, num_experts);

    const std::string weights_name = at_rank("inputs", rank) + ".topk_weights";
    if (in.topk_weights.defined() != has_weights) {
      throw InvalidArgument(weights_name + ": expected " + (has_weights ? "a tensor" : "none") +
                            " (as on rank 0), got " + in.topk_weights.describe());
    }
    if (has_weights) {
      expect_host_tensor(in.topk_weights, weights_name, DType::f32, 2);
      expect_size(in.topk_weights, weights_name, 0, num_tokens, "num_tokens of x");
      expect_size(in.topk_weights, weights_name, 1, topk, "k of topk_idx");
    }
  }

  const Placement placement{num_experts / num_ranks};
  const int local_experts = placement.experts_per_rank;
  const size_t row_bytes = static_cast<size_t>(hidden) * dtype_size(dtype);
  const int64_t num_scales = dtype == DType::fp8_e4m3 ? hidden / kScaleBlock : 0;

  std::vector<NormalDispatchOutput> outputs(num_ranks);
  for (int dest = 0; dest < num_ranks; ++dest) {
    NormalDispatchOutput& out = outputs[dest];
    // Receive order: source rank ascending, then source token ascending.
    for (int source = 0; source < num_ranks; ++source) {
      const TensorView& topk_idx = inputs[source].topk_idx;
      const int64_t* ids = topk_idx.as<const int64_t>();
      for (int64_t token = 0; token < topk_idx.shape[0]; ++token) {
        bool wanted = false;
        for (int64_t slot = 0; slot < topk; ++slot) {
          int64_t expert = ids[token * topk + slot];
          if (expert >= 0 && placement.rank_of(expert) == dest) wanted = true;
        }
        if (wanted) {
          out.recv_src_rank.push_back(source);
          out.recv_src_token.push_back(token);
        }
      }
    }

    const int64_t num_recv = static_cast<int64_t>(out.recv_src_rank.size());
    out.recv_x = Tensor::empty(dtype, {num_recv, hidden});
    if (dtype == DType::fp8_e4m3) out.recv_x_scales = Tensor::empty(DType::f32, {num_recv, num_scales});
    out.recv_topk_idx = Tensor::empty(DType::i64, {num_recv, topk});
    if (has_weights) out.recv_topk_weights = Tensor::empty(DType::f32, {num_recv, topk});
    std::vector<int> counts(local_experts, 0);

    for (int64_t row = 0; row < num_recv; ++row) {
      const RankInputs& in = inputs[out.recv_src_rank[row]];
      const int64_t token = out.recv_src_token[row];
      std::memcpy(out.recv_x.as<uint8_t>() + row * row_bytes, in.x.as<const uint8_t>() + token * row_bytes,
                  row_bytes);
      for (int64_t s = 0; s < num_scales; ++s) {
        out.recv_x_scales.as<float>()[row * num_scales + s] =
            in.x_scales.as<const float>()[token * num_scales + s];
      }
      for (int64_t slot = 0; slot < topk; ++slot) {
        const int64_t expert = in.topk_idx.as<const int64_t>()[token * topk + slot];
        const bool here = expert >= 0 && placement.rank_of(expert) == dest;
        out.recv_topk_idx.as<int64_t>()[row * topk + slot] = here ? placement.local_of(expert) : -1;
        if (has_weights) {
          out.recv_topk_weights.as<float>()[row * topk + slot] =
              here ? in.topk_weights.as<const float>()[token * topk + slot] : 0.0f;
        }
        // Per received (token, slot) pair, as DeepEP counts it.
        if (here) ++counts[placement.local_of(expert)];
      }
    }
    out.num_recv_tokens_per_expert.resize(local_experts);
    for (int local = 0; local < local_experts; ++local) {
      out.num_recv_tokens_per_expert[local] = static_cast<int>(align_up(counts[local], expert_alignment));
    }
  }
  return outputs;
}

std::vector<NormalDispatchOutput> normal_dispatch_by_rank(
    const std::vector<RankInputs>& inputs, const std::vector<std::vector<uint8_t>>& is_token_in_rank,
    const std::vector<std::vector<int>>& num_tokens_per_expert, int num_experts, const Topology& topology,
    int expert_alignment) {
  expect_topology(topology);
  expect_num_experts(num_experts, topology);
  const int num_ranks = topology.num_ranks;
  const size_t expected_count = static_cast<size_t>(num_ranks);
  if (inputs.size() != expected_count || is_token_in_rank.size() != expected_count ||
      num_tokens_per_expert.size() != expected_count) {
    throw InvalidArgument("inputs, is_token_in_rank, num_tokens_per_expert: expected one per rank (" +
                          std::to_string(num_ranks) + "), got " + std::to_string(inputs.size()) + ", " +
                          std::to_string(is_token_in_rank.size()) + ", " +
                          std::to_string(num_tokens_per_expert.size()));
  }
  if (expert_alignment < 1) {
    throw InvalidArgument("expert_alignment: expected >= 1, got " + std::to_string(expert_alignment));
  }
  const DType dtype = inputs[0].x.dtype;
  if (dtype != DType::bf16 && dtype != DType::fp8_e4m3) {
    throw InvalidArgument("inputs[0].x: expected dtype bf16 or fp8_e4m3, got " + inputs[0].x.describe());
  }
  int64_t hidden = -1;
  for (int rank = 0; rank < num_ranks; ++rank) {
    const RankInputs& in = inputs[rank];
    const std::string x_name = at_rank("inputs", rank) + ".x";
    expect_host_tensor(in.x, x_name, dtype, 2);
    if (hidden < 0) hidden = in.x.shape[1];
    expect_size(in.x, x_name, 1, hidden, "hidden of inputs[0].x");
    const int64_t num_tokens = in.x.shape[0];
    if (dtype == DType::fp8_e4m3) {
      const std::string scales_name = at_rank("inputs", rank) + ".x_scales";
      if (hidden % kScaleBlock != 0) {
        throw InvalidArgument(x_name + ": expected hidden a multiple of 128 for fp8, got " + in.x.describe());
      }
      expect_host_tensor(in.x_scales, scales_name, DType::f32, 2);
      expect_size(in.x_scales, scales_name, 0, num_tokens, "num_tokens of x");
      expect_size(in.x_scales, scales_name, 1, hidden / kScaleBlock, "hidden / 128");
    }
    if (in.topk_idx.defined() || in.topk_weights.defined()) {
      throw InvalidArgument(at_rank("inputs", rank) +
                            ": expected no topk_idx and no topk_weights (routed by is_token_in_rank)");
    }
    if (is_token_in_rank[rank].size() != static_cast<size_t>(num_tokens * num_ranks)) {
      throw InvalidArgument(
          at_rank("is_token_in_rank", rank) + ": expected " + std::to_string(num_tokens * num_ranks) +
          " entries (num_tokens x num_ranks), got " + std::to_string(is_token_in_rank[rank].size()));
    }
    if (num_tokens_per_expert[rank].size() != static_cast<size_t>(num_experts)) {
      throw InvalidArgument(at_rank("num_tokens_per_expert", rank) + ": expected " +
                            std::to_string(num_experts) + " counts, got " +
                            std::to_string(num_tokens_per_expert[rank].size()));
    }
  }

  const int local_experts = num_experts / num_ranks;
  const size_t row_bytes = static_cast<size_t>(hidden) * dtype_size(dtype);
  const int64_t num_scales = dtype == DType::fp8_e4m3 ? hidden / kScaleBlock : 0;
  std::vector<NormalDispatchOutput> outputs(num_ranks);
  for (int dest = 0; dest < num_ranks; ++dest) {
    NormalDispatchOutput& out = outputs[dest];
    for (int source = 0; source < num_ranks; ++source) {  // source rank ascending, then token ascending
      for (int64_t token = 0; token < inputs[source].x.shape[0]; ++token) {
        if (!is_token_in_rank[source][token * num_ranks + dest]) continue;
        out.recv_src_rank.push_back(source);
        out.recv_src_token.push_back(token);
      }
    }
    const int64_t num_recv = static_cast<int64_t>(out.recv_src_rank.size());
    out.recv_x = Tensor::empty(dtype, {num_recv, hidden});
    if (dtype == DType::fp8_e4m3) out.recv_x_scales = Tensor::empty(DType::f32, {num_recv, num_scales});
    for (int64_t row = 0; row < num_recv; ++row) {
      const RankInputs& in = inputs[out.recv_src_rank[row]];
      const int64_t token = out.recv_src_token[row];
      std::memcpy(out.recv_x.as<uint8_t>() + row * row_bytes, in.x.as<const uint8_t>() + token * row_bytes,
                  row_bytes);
      for (int64_t s = 0; s < num_scales; ++s) {
        out.recv_x_scales.as<float>()[row * num_scales + s] =
            in.x_scales.as<const float>()[token * num_scales + s];
      }
    }
    out.num_recv_tokens_per_expert.assign(local_experts, 0);
    for (int local = 0; local < local_experts; ++local) {
      int64_t count = 0;
      for (int source = 0; source < num_ranks; ++source) {
        count += num_tokens_per_expert[source][dest * local_experts + local];
      }
      out.num_recv_tokens_per_expert[local] = static_cast<int>(align_up(count, expert_alignment));
    }
  }
  return outputs;
}

std::vector<NormalCombineOutput> normal_combine(const std::vector<TensorView>& ys,
                                                const std::vector<TensorView>& weights,
                                                const std::vector<NormalDispatchOutput>& dispatched,
                                                const std::vector<int64_t>& num_tokens_per_source,
                                                const Topology& topology,
                                                const std::vector<CombineBias>& biases) {
  expect_topology(topology);
  const int num_ranks = topology.num_ranks;
  const size_t expected_count = static_cast<size_t>(num_ranks);
  if (!biases.empty() && biases.size() != expected_count) {
    throw InvalidArgument("biases: expected none or one per rank (" + std::to_string(num_ranks) + "), got " +
                          std::to_string(biases.size()));
  }
  if (ys.size() != expected_count) {
    throw InvalidArgument("ys: expected one per rank (" + std::to_string(num_ranks) + "), got " +
                          std::to_string(ys.size()));
  }
  if (dispatched.size() != expected_count) {
    throw InvalidArgument("dispatched: expected one per rank (" + std::to_string(num_ranks) + "), got " +
                          std::to_string(dispatched.size()));
  }
  if (num_tokens_per_source.size() != expected_count) {
    throw InvalidArgument("num_tokens_per_source: expected one per rank (" + std::to_string(num_ranks) +
                          "), got " + std::to_string(num_tokens_per_source.size()));
  }
  // Weights: none at all (an empty vector or all undefined), or one f32 [M_d, K] per rank.
  bool has_weights = false;
  if (!weights.empty()) {
    if (weights.size() != expected_count) {
      throw InvalidArgument("weights: expected none or one per rank (" + std::to_string(num_ranks) +
                            "), got " + std::to_string(weights.size()));
    }
    has_weights = weights[0].defined();
  }

  int64_t hidden = -1;
  int64_t topk = -1;
  for (int rank = 0; rank < num_ranks; ++rank) {
    const int64_t num_recv = static_cast<int64_t>(dispatched[rank].recv_src_rank.size());
    if (dispatched[rank].recv_src_token.size() != dispatched[rank].recv_src_rank.size()) {
      throw InvalidArgument(at_rank("dispatched", rank) +
                            ": expected recv_src_token and recv_src_rank of equal "
                            "length, got " +
                            std::to_string(dispatched[rank].recv_src_token.size()) + " and " +
                            std::to_string(num_recv));
    }
    const std::string y_name = at_rank("ys", rank);
    expect_host_tensor(ys[rank], y_name, DType::bf16, 2);
    expect_size(ys[rank], y_name, 0, num_recv, "tokens rank received in dispatch");
    if (hidden < 0) hidden = ys[rank].shape[1];
    expect_size(ys[rank], y_name, 1, hidden, "hidden of ys[0]");
    if (!weights.empty()) {
      const std::string weights_name = at_rank("weights", rank);
      if (weights[rank].defined() != has_weights) {
        throw InvalidArgument(weights_name + ": expected " + (has_weights ? "a tensor" : "none") +
                              " (as weights[0]), got " + weights[rank].describe());
      }
      if (has_weights) {
        expect_host_tensor(weights[rank], weights_name, DType::f32, 2);
        expect_size(weights[rank], weights_name, 0, num_recv, "tokens rank received in dispatch");
        if (topk < 0) topk = weights[rank].shape[1];
        expect_size(weights[rank], weights_name, 1, topk, "k of weights[0]");
      }
    }
    for (int64_t row = 0; row < num_recv; ++row) {
      const int source = dispatched[rank].recv_src_rank[row];
      const int64_t token = dispatched[rank].recv_src_token[row];
      if (source < 0 || source >= num_ranks || token < 0 || token >= num_tokens_per_source[source]) {
        throw InvalidArgument(at_rank("dispatched", rank) + ": expected row " + std::to_string(row) +
                              " to come from a source token in range, got rank " + std::to_string(source) +
                              ", token " + std::to_string(token));
      }
    }
  }
  for (int rank = 0; rank < num_ranks; ++rank) {
    if (num_tokens_per_source[rank] < 0) {
      throw InvalidArgument(at_rank("num_tokens_per_source", rank) + ": expected >= 0, got " +
                            std::to_string(num_tokens_per_source[rank]));
    }
  }
  for (size_t rank = 0; rank < biases.size(); ++rank) {
    for (auto [bias, which] : {std::pair{&biases[rank].bias0, ".bias0"}, {&biases[rank].bias1, ".bias1"}}) {
      if (!bias->defined()) continue;
      const std::string name = at_rank("biases", rank) + which;
      expect_host_tensor(*bias, name, DType::bf16, 2);
      expect_size(*bias, name, 0, num_tokens_per_source[rank], "tokens of the home rank");
      expect_size(*bias, name, 1, hidden, "hidden of ys[0]");
    }
  }

  // contributions[s][t]: the (rank, row) pairs that hold token t of source s, ranks ascending.
  struct Contribution {
    int rank;
    int64_t row;
  };
  std::vector<std::vector<std::vector<Contribution>>> contributions(num_ranks);
  for (int source = 0; source < num_ranks; ++source)
    contributions[source].resize(num_tokens_per_source[source]);
  for (int rank = 0; rank < num_ranks; ++rank) {
    for (size_t row = 0; row < dispatched[rank].recv_src_rank.size(); ++row) {
      contributions[dispatched[rank].recv_src_rank[row]][dispatched[rank].recv_src_token[row]].push_back(
          {rank, static_cast<int64_t>(row)});
    }
  }

  const int num_nodes = topology.num_nodes();
  std::vector<NormalCombineOutput> outputs(num_ranks);
  for (int source = 0; source < num_ranks; ++source) {
    const int64_t num_tokens = num_tokens_per_source[source];
    NormalCombineOutput& out = outputs[source];
    out.combined_x = Tensor::empty(DType::bf16, {num_tokens, hidden});
    if (has_weights) out.combined_topk_weights = Tensor::empty(DType::f32, {num_tokens, topk});

    // NOTES: every sum starts from +0.0f (as DeepEP's does), so a lone -0.0 comes out as +0.0 and a
    // token nobody received gives +0.0; the final sum starts from bias0 + bias1 instead where given.
    const uint16_t* bias0 = nullptr;
    const uint16_t* bias1 = nullptr;
    if (!biases.empty()) {
      bias0 = biases[source].bias0.defined() ? biases[source].bias0.as<const uint16_t>() : nullptr;
      bias1 = biases[source].bias1.defined() ? biases[source].bias1.as<const uint16_t>() : nullptr;
    }
    std::vector<float> total(hidden);
    std::vector<float> node_sum(hidden);
    for (int64_t token = 0; token < num_tokens; ++token) {
      const std::vector<Contribution>& from = contributions[source][token];
      for (int64_t col = 0; col < hidden; ++col) {
        total[col] = common::combine_bias_start(bias0, bias1, static_cast<size_t>(token * hidden + col));
      }
      for (int node = 0; node < num_nodes && num_nodes > 1; ++node) {
        std::fill(node_sum.begin(), node_sum.end(), 0.0f);
        bool any = false;
        for (const Contribution& c : from) {  // ranks ascending
          if (topology.node_of(c.rank) != node) continue;
          const uint16_t* y_row = ys[c.rank].as<const uint16_t>() + c.row * hidden;
          for (int64_t col = 0; col < hidden; ++col) node_sum[col] += common::bf16_to_float(y_row[col]);
          any = true;
        }
        if (!any) continue;
        // What crosses the network: the node's partial, rounded to bf16 once.
        for (int64_t col = 0; col < hidden; ++col) {
          total[col] += common::bf16_to_float(common::float_to_bf16(node_sum[col]));
        }
      }
      // One node: no partial, the ranks' rows go straight into the final sum.
      for (size_t c = 0; c < from.size() && num_nodes == 1; ++c) {
        const uint16_t* y_row = ys[from[c].rank].as<const uint16_t>() + from[c].row * hidden;
        for (int64_t col = 0; col < hidden; ++col) total[col] += common::bf16_to_float(y_row[col]);
      }
      uint16_t* out_row = out.combined_x.as<uint16_t>() + token * hidden;
      for (int64_t col = 0; col < hidden; ++col) out_row[col] = common::float_to_bf16(total[col]);

      // Weights reduce in the same order and grouping, staying in fp32.
      for (int64_t slot = 0; has_weights && slot < topk; ++slot) {
        float weight_total = 0.0f;
        for (int node = 0; node < num_nodes; ++node) {
          float weight_node_sum = 0.0f;
          for (const Contribution& c : from) {
            if (topology.node_of(c.rank) != node) continue;
            weight_node_sum += weights[c.rank].as<const float>()[c.row * topk + slot];
          }
          weight_total += weight_node_sum;
        }
        out.combined_topk_weights.as<float>()[token * topk + slot] = weight_total;
      }
    }
  }
  return outputs;
}

// ---- low_latency ----------------------------------------------------------------------------------

namespace {

// Checks every rank's x (bf16 [N, H], one H) and topk_idx ([N, K], one K, ids in range); returns H and K.
std::pair<int64_t, int64_t> expect_low_latency_inputs(const std::vector<RankInputs>& inputs, int num_experts,
                                                      const Topology& topology, int64_t max_tokens_per_rank,
                                                      bool need_x, bool need_weights) {
  expect_topology(topology);
  expect_num_experts(num_experts, topology);
  if (static_cast<int>(inputs.size()) != topology.num_ranks) {
    throw InvalidArgument("inputs: expected one per rank (" + std::to_string(topology.num_ranks) + "), got " +
                          std::to_string(inputs.size()));
  }
  if (max_tokens_per_rank < 1) {
    throw InvalidArgument("max_tokens_per_rank: expected >= 1, got " + std::to_string(max_tokens_per_rank));
  }
  int64_t hidden = -1;
  int64_t topk = -1;
  for (size_t rank = 0; rank < inputs.size(); ++rank) {
    const RankInputs& in = inputs[rank];
    const std::string idx_name = at_rank("inputs", rank) + ".topk_idx";
    expect_host_tensor(in.topk_idx, idx_name, DType::i64, 2);
    if (topk < 0) topk = in.topk_idx.shape[1];
    expect_size(in.topk_idx, idx_name, 1, topk, "k of inputs[0].topk_idx");
    expect_expert_ids(in.topk_idx, idx_name, num_experts);
    const int64_t num_tokens = in.topk_idx.shape[0];
    if (num_tokens > max_tokens_per_rank) {
      throw InvalidArgument(idx_name + ": expected at most max_tokens_per_rank (" +
                            std::to_string(max_tokens_per_rank) + ") tokens, got " + in.topk_idx.describe());
    }
    if (need_x) {
      // bf16 on every rank, or fp8 (rows the callers cast) with x_scales on every rank.
      const std::string x_name = at_rank("inputs", rank) + ".x";
      const bool fp8 = inputs[0].x.defined() && inputs[0].x.dtype == DType::fp8_e4m3;
      expect_host_tensor(in.x, x_name, fp8 ? DType::fp8_e4m3 : DType::bf16, 2);
      expect_size(in.x, x_name, 0, num_tokens, "num_tokens of topk_idx");
      if (hidden < 0) hidden = in.x.shape[1];
      expect_size(in.x, x_name, 1, hidden, "hidden of inputs[0].x");
      const std::string scales_name = at_rank("inputs", rank) + ".x_scales";
      if (fp8) {
        if (hidden % kScaleBlock != 0) {
          throw InvalidArgument(x_name + ": expected hidden a multiple of 128 for fp8, got " +
                                in.x.describe());
        }
        expect_host_tensor(in.x_scales, scales_name, DType::f32, 2);
        expect_size(in.x_scales, scales_name, 0, num_tokens, "num_tokens of x");
        expect_size(in.x_scales, scales_name, 1, hidden / kScaleBlock, "hidden / 128");
      } else if (in.x_scales.defined()) {
        throw InvalidArgument(scales_name + ": expected none for bf16 x, got " + in.x_scales.describe());
      }
    }
    if (need_weights) {
      const std::string weights_name = at_rank("inputs", rank) + ".topk_weights";
      expect_host_tensor(in.topk_weights, weights_name, DType::f32, 2);
      expect_size(in.topk_weights, weights_name, 0, num_tokens, "num_tokens of topk_idx");
      expect_size(in.topk_weights, weights_name, 1, topk, "k of topk_idx");
    }
  }
  return {hidden, topk};
}

// Rows per local expert in the outputs: expert_capacity, or R * max when it is 0.
int64_t rows_per_expert_of(const Topology& topology, int64_t max_tokens_per_rank, int64_t expert_capacity) {
  const int64_t all_rows = topology.num_ranks * max_tokens_per_rank;
  if (expert_capacity < 0 || expert_capacity > all_rows) {
    throw InvalidArgument(
        "expert_capacity: expected 0 (num_ranks * max_tokens_per_rank = " + std::to_string(all_rows) +
        ") or 1.." + std::to_string(all_rows) + ", got " + std::to_string(expert_capacity));
  }
  return expert_capacity == 0 ? all_rows : expert_capacity;
}

// rows[s][e]: how many (token, slot) pairs of source s name expert e.
std::vector<std::vector<int64_t>> rows_per_source_and_expert(const std::vector<RankInputs>& inputs,
                                                             int num_experts) {
  std::vector<std::vector<int64_t>> rows(inputs.size(), std::vector<int64_t>(num_experts, 0));
  for (size_t source = 0; source < inputs.size(); ++source) {
    const int64_t* ids = inputs[source].topk_idx.as<const int64_t>();
    for (int64_t i = 0; i < inputs[source].topk_idx.numel(); ++i) {
      if (ids[i] >= 0) ++rows[source][ids[i]];
    }
  }
  return rows;
}

}  // namespace

std::vector<LowLatencyDispatchOutput> low_latency_dispatch(const std::vector<RankInputs>& inputs,
                                                           int num_experts, const Topology& topology,
                                                           int64_t max_tokens_per_rank,
                                                           const LowLatencyOptions& options,
                                                           int64_t expert_capacity) {
  const auto [hidden, topk] =
      expect_low_latency_inputs(inputs, num_experts, topology, max_tokens_per_rank, true, false);
  const int64_t rows_per_expert = rows_per_expert_of(topology, max_tokens_per_rank, expert_capacity);
  if (options.use_fp8 && hidden % kScaleBlock != 0) {
    throw InvalidArgument("inputs[0].x: expected hidden a multiple of 128 with use_fp8, got " +
                          inputs[0].x.describe());
  }
  if ((options.round_scale || options.use_ue8m0) && !options.use_fp8) {
    throw InvalidArgument("options: expected use_fp8 with round_scale or use_ue8m0");
  }
  // Rows the callers cast travel as given: fp8 out, and the callers' scales untouched.
  const bool x_fp8 = inputs[0].x.dtype == DType::fp8_e4m3;
  if (x_fp8 && (!options.use_fp8 || options.round_scale || options.use_ue8m0)) {
    throw InvalidArgument(
        "options: expected use_fp8 without round_scale and use_ue8m0 with fp8_e4m3 x (carried as given)");
  }
  const bool round_scale = options.round_scale || options.use_ue8m0;
  const int num_ranks = topology.num_ranks;
  const int local_experts = num_experts / num_ranks;
  const int64_t num_scales = options.use_fp8 ? hidden / kScaleBlock : 0;
  const int64_t scale_columns =
      options.use_ue8m0 ? common::ue8m0_words(static_cast<int>(num_scales)) : num_scales;
  const size_t row_bytes = static_cast<size_t>(hidden) * (options.use_fp8 ? 1 : 2);
  const auto rows = rows_per_source_and_expert(inputs, num_experts);
  for (int source = 0; source < num_ranks; ++source) {
    for (int expert = 0; expert < num_experts; ++expert) {
      if (rows[source][expert] > max_tokens_per_rank) {
        throw InvalidArgument(at_rank("inputs", source) +
                              ".topk_idx: expected at most max_tokens_per_rank (" +
                              std::to_string(max_tokens_per_rank) + ") rows for expert " +
                              std::to_string(expert) + ", got " + std::to_string(rows[source][expert]));
      }
    }
  }

  std::vector<LowLatencyDispatchOutput> outputs(num_ranks);
  std::vector<uint8_t> fp8_row(options.use_fp8 ? hidden : 0);
  std::vector<float> scales(num_scales);
  for (int dest = 0; dest < num_ranks; ++dest) {
    LowLatencyDispatchOutput& out = outputs[dest];
    out.recv_x = Tensor::empty(options.use_fp8 ? DType::fp8_e4m3 : DType::bf16,
                               {local_experts, rows_per_expert, hidden});
    std::memset(out.recv_x.data(), 0, out.recv_x.nbytes());
    if (options.use_fp8) {
      out.recv_x_scales = Tensor::empty(options.use_ue8m0 ? DType::i32 : DType::f32,
                                        {local_experts, rows_per_expert, scale_columns});
      std::memset(out.recv_x_scales.data(), 0, out.recv_x_scales.nbytes());
    }
    out.recv_count = Tensor::empty(DType::i32, {local_experts});
    out.layout_range = Tensor::empty(DType::i32, {local_experts, num_ranks, 2});
    out.src_info = Tensor::empty(DType::i32, {local_experts, rows_per_expert});
    std::fill(out.src_info.as<int32_t>(), out.src_info.as<int32_t>() + out.src_info.numel(), -1);

    for (int local = 0; local < local_experts; ++local) {
      const int64_t expert = static_cast<int64_t>(dest) * local_experts + local;
      int64_t row = 0;  // within this expert's rows
      // Expert-major: source rank ascending, then (token, slot) ascending.
      for (int source = 0; source < num_ranks; ++source) {
        const RankInputs& in = inputs[source];
        const int64_t* ids = in.topk_idx.as<const int64_t>();
        const int64_t begin = row;
        for (int64_t token = 0; token < in.topk_idx.shape[0]; ++token) {
          for (int64_t slot = 0; slot < topk; ++slot) {
            if (ids[token * topk + slot] != expert) continue;
            if (row >= rows_per_expert) {  // past the capacity: counted, not written
              ++row;
              continue;
            }
            const int64_t at = local * rows_per_expert + row;
            const uint16_t* x_row = in.x.as<const uint16_t>() + token * hidden;
            if (x_fp8) {
              std::memcpy(out.recv_x.as<uint8_t>() + at * row_bytes,
                          in.x.as<const uint8_t>() + token * hidden, row_bytes);
              std::memcpy(out.recv_x_scales.as<float>() + at * num_scales,
                          in.x_scales.as<const float>() + token * num_scales, num_scales * sizeof(float));
            } else if (options.use_fp8) {
              for (int64_t block = 0; block < num_scales; ++block) {
                const uint16_t* values = x_row + block * kScaleBlock;
                scales[block] = common::fp8_block_scale(common::block_amax(values, kScaleBlock), round_scale);
                common::cast_block_to_fp8(values, kScaleBlock, scales[block],
                                          fp8_row.data() + block * kScaleBlock);
              }
              std::memcpy(out.recv_x.as<uint8_t>() + at * row_bytes, fp8_row.data(), row_bytes);
              if (options.use_ue8m0) {
                common::pack_ue8m0(scales.data(), static_cast<int>(num_scales),
                                   out.recv_x_scales.as<int32_t>() + at * scale_columns);
              } else {
                std::memcpy(out.recv_x_scales.as<float>() + at * num_scales, scales.data(),
                            num_scales * sizeof(float));
              }
            } else {
              std::memcpy(out.recv_x.as<uint8_t>() + at * row_bytes, x_row, row_bytes);
            }
            out.src_info.as<int32_t>()[at] = static_cast<int32_t>(token);
            ++row;
          }
        }
        out.layout_range.as<int32_t>()[(local * num_ranks + source) * 2] = static_cast<int32_t>(begin);
        out.layout_range.as<int32_t>()[(local * num_ranks + source) * 2 + 1] =
            static_cast<int32_t>(row - begin);
      }
      out.recv_count.as<int32_t>()[local] = static_cast<int32_t>(row);
    }
  }
  return outputs;
}

std::vector<Tensor> low_latency_combine(const std::vector<TensorView>& ys,
                                        const std::vector<RankInputs>& inputs, int num_experts,
                                        const Topology& topology, int64_t max_tokens_per_rank,
                                        int64_t expert_capacity, const std::vector<CombineBias>& biases,
                                        bool use_logfmt) {
  const int64_t topk =
      expect_low_latency_inputs(inputs, num_experts, topology, max_tokens_per_rank, false, true).second;
  const int num_ranks = topology.num_ranks;
  const int local_experts = num_experts / num_ranks;
  const int64_t rows_per_expert = rows_per_expert_of(topology, max_tokens_per_rank, expert_capacity);
  if (static_cast<int>(ys.size()) != num_ranks) {
    throw InvalidArgument("ys: expected one per rank (" + std::to_string(num_ranks) + "), got " +
                          std::to_string(ys.size()));
  }
  int64_t hidden = -1;
  for (int rank = 0; rank < num_ranks; ++rank) {
    const std::string name = at_rank("ys", rank);
    expect_host_tensor(ys[rank], name, DType::bf16, 3);
    expect_size(ys[rank], name, 0, local_experts, "local experts");
    expect_size(ys[rank], name, 1, rows_per_expert,
                "expert_capacity (num_ranks * max_tokens_per_rank when 0)");
    if (hidden < 0) hidden = ys[rank].shape[2];
    expect_size(ys[rank], name, 2, hidden, "hidden of ys[0]");
  }
  if (use_logfmt && hidden % common::kLogfmtBlock != 0) {
    throw InvalidArgument("use_logfmt: expected the hidden size of ys to be a multiple of " +
                          std::to_string(common::kLogfmtBlock) + ", got " + std::to_string(hidden));
  }
  const auto rows = rows_per_source_and_expert(inputs, num_experts);
  if (!biases.empty() && biases.size() != static_cast<size_t>(num_ranks)) {
    throw InvalidArgument("biases: expected none or one per rank (" + std::to_string(num_ranks) + "), got " +
                          std::to_string(biases.size()));
  }
  for (size_t rank = 0; rank < biases.size(); ++rank) {
    for (auto [bias, which] : {std::pair{&biases[rank].bias0, ".bias0"}, {&biases[rank].bias1, ".bias1"}}) {
      if (!bias->defined()) continue;
      const std::string name = at_rank("biases", rank) + which;
      expect_host_tensor(*bias, name, DType::bf16, 2);
      expect_size(*bias, name, 0, inputs[rank].topk_idx.shape[0], "tokens of the home rank");
      expect_size(*bias, name, 1, hidden, "hidden of ys[0]");
    }
  }

  std::vector<Tensor> outputs(num_ranks);
  std::vector<float> accumulator(hidden);
  std::vector<float> decoded(hidden);  // a y row as the combine accumulates it
  for (int source = 0; source < num_ranks; ++source) {
    const RankInputs& in = inputs[source];
    const int64_t num_tokens = in.topk_idx.shape[0];
    const int64_t* ids = in.topk_idx.as<const int64_t>();
    const float* weights = in.topk_weights.as<const float>();
    outputs[source] = Tensor::empty(DType::bf16, {num_tokens, hidden});
    const uint16_t* bias0 = nullptr;
    const uint16_t* bias1 = nullptr;
    if (!biases.empty()) {
      bias0 = biases[source].bias0.defined() ? biases[source].bias0.as<const uint16_t>() : nullptr;
      bias1 = biases[source].bias1.defined() ? biases[source].bias1.as<const uint16_t>() : nullptr;
    }
    // The row of each (token, slot) on its expert: the rows of lower sources, then this source's
    // earlier pairs for the same expert.
    std::vector<int64_t> next_position(num_experts, 0);
    for (int64_t token = 0; token < num_tokens; ++token) {
      for (int64_t col = 0; col < hidden; ++col) {
        accumulator[col] =
            common::combine_bias_start(bias0, bias1, static_cast<size_t>(token * hidden + col));
      }
      for (int64_t slot = 0; slot < topk; ++slot) {
        const int64_t expert = ids[token * topk + slot];
        if (expert < 0) continue;
        int64_t row = next_position[expert]++;
        for (int lower = 0; lower < source; ++lower) row += rows[lower][expert];
        const int dest = static_cast<int>(expert / local_experts);
        const int64_t local = expert % local_experts;
        if (row >= rows_per_expert) {
          int64_t total = 0;
          for (const auto& of_source : rows) total += of_source[expert];
          throw CapacityError(detail::expert_capacity_message(rows_per_expert, expert, dest, total));
        }
        const uint16_t* y_row = ys[dest].as<const uint16_t>() + (local * rows_per_expert + row) * hidden;
        const float weight = weights[token * topk + slot];
        if (use_logfmt) {
          common::logfmt_round_trip_row(y_row, static_cast<int>(hidden), decoded.data());
        } else {
          for (int64_t col = 0; col < hidden; ++col) decoded[col] = common::bf16_to_float(y_row[col]);
        }
        for (int64_t col = 0; col < hidden; ++col)
          accumulator[col] = std::fma(weight, decoded[col], accumulator[col]);
      }
      uint16_t* out_row = outputs[source].as<uint16_t>() + token * hidden;
      for (int64_t col = 0; col < hidden; ++col) out_row[col] = common::float_to_bf16(accumulator[col]);
    }
  }
  return outputs;
}

}  // namespace switchyard::reference
