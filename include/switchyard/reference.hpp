#pragma once
// The oracle: plain loops over every rank's inputs at once, written to be obviously correct rather
// than fast. Every engine on every backend must match it bit for bit (DESIGN.md, Semantics).
// All tensors here are host tensors.
#include <cstdint>
#include <string>
#include <vector>

#include "switchyard/moe.hpp"
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
  std::vector<int> recv_src_rank;               // [M]
  std::vector<int64_t> recv_src_token;          // [M]
};

std::vector<NormalDispatchOutput> normal_dispatch(const std::vector<RankInputs>& inputs, int num_experts,
                                                  const Topology& topology, int expert_alignment = 1);

// A `normal` dispatch without top-k (DeepEP's dispatch with topk_idx=None), routed by each source's
// is_token_in_rank alone: source s sends token t to every rank d with is_token_in_rank[s][t * R + d].
// inputs[s] gives x (and x_scales for fp8); its topk_idx and topk_weights must be undefined. Rows are
// ordered as normal_dispatch orders them; recv_topk_idx and recv_topk_weights are undefined; rank d's
// num_recv_tokens_per_expert[l] is the sum over sources of num_tokens_per_expert[s][d * L + l] (the
// counts the sources' layouts claim), rounded up to the alignment.
std::vector<NormalDispatchOutput> normal_dispatch_by_rank(
    const std::vector<RankInputs>& inputs, const std::vector<std::vector<uint8_t>>& is_token_in_rank,
    const std::vector<std::vector<int>>& num_tokens_per_expert, int num_experts, const Topology& topology,
    int expert_alignment = 1);

struct NormalCombineOutput {
  Tensor combined_x;             // bf16 [N, H]
  Tensor combined_topk_weights;  // f32 [N, K], when weights were given
};

// A home rank's combine biases (CombineArgs::bias0 / bias1): each optional, bf16 [N, H].
struct CombineBias {
  TensorView bias0, bias1;
};

// ys[d]: rank d's combine input, bf16 [M_d, H], rows in d's receive order; weights[d] optional
// f32 [M_d, K]. Reduces in the order of DESIGN.md: fp32 over a node's ranks ascending, rounded
// to bf16 once per node, then fp32 over nodes ascending, rounded once. With one node there is no
// partial: fp32 over the ranks ascending, rounded once. biases: empty, or one per home rank; the
// final fp32 sum (over ranks on one node, over node partials across nodes) starts at
// bias0 + bias1 (+0.0 for an absent one) instead of +0.0.
std::vector<NormalCombineOutput> normal_combine(const std::vector<TensorView>& ys,
                                                const std::vector<TensorView>& weights,
                                                const std::vector<NormalDispatchOutput>& dispatched,
                                                const std::vector<int64_t>& num_tokens_per_source,
                                                const Topology& topology,
                                                const std::vector<CombineBias>& biases = {});

// ---- low_latency (expert-major) ------------------------------------------------------------------

struct LowLatencyOptions {
  bool use_fp8 = false;
  bool round_scale = false;  // power-of-two scales
  bool use_ue8m0 = false;    // implies round_scale; scales packed as UE8M0 in int32
};

// What rank d receives from a `low_latency` (or `symmetric`) dispatch. L = local experts, R = ranks,
// max = max_tokens_per_rank, C = expert_capacity (R * max when 0). Rows at and past recv_count[l] are
// zero here (engines leave them unspecified). Rows at and past C do not exist: an expert that receives
// more keeps its first C rows, and recv_count / layout_range still give the true counts.
struct LowLatencyDispatchOutput {
  Tensor recv_x;         // [L, C, H], bf16 (fp8_e4m3 with use_fp8)
  Tensor recv_x_scales;  // f32 [L, C, H / 128], or i32 [L, C, ceil(H / 512)] with use_ue8m0
  Tensor recv_count;     // i32 [L]: true counts
  Tensor layout_range;   // i32 [L, R, 2]: (begin, count) per source rank, true counts
  Tensor src_info;       // i32 [L, C]: source token of each row, -1 past recv_count
};

// inputs[s].x is bf16 [N_s, H]; topk_idx i64 [N_s, K]. Each (token, slot) with an expert is one row.
// Or, as the symmetric engine takes it, every rank's x fp8_e4m3 [N_s, H] with x_scales f32 [N_s, H / 128]
// (options.use_fp8 set, round_scale and use_ue8m0 not): the rows and scales are carried as given, no cast.
// expert_capacity: 0 (R * max) or 1..R * max rows per local expert in the outputs.
std::vector<LowLatencyDispatchOutput> low_latency_dispatch(const std::vector<RankInputs>& inputs,
                                                           int num_experts, const Topology& topology,
                                                           int64_t max_tokens_per_rank,
                                                           const LowLatencyOptions& options = {},
                                                           int64_t expert_capacity = 0);

// ys[d]: rank d's expert outputs, bf16 [L, C, H'], rows in d's receive order (only received
// rows are read). Uses inputs[s].topk_idx and inputs[s].topk_weights. Returns bf16 [N_s, H'] per
// rank: out[t] = fma-accumulated sum over valid slots ascending from +0.0 (or, with biases[s], from
// bias0 + bias1: +0.0 for an absent one), rounded once. Throws CapacityError when a row lies at or
// past C (the dispatch overflowed: engines refuse that combine). With use_logfmt each y row is taken
// as LogFMT-10 decodes it (per 128 channels, src/common/logfmt.hpp; H' a multiple of 128), the values
// accumulated as floats in the same order.
std::vector<Tensor> low_latency_combine(const std::vector<TensorView>& ys,
                                        const std::vector<RankInputs>& inputs, int num_experts,
                                        const Topology& topology, int64_t max_tokens_per_rank,
                                        int64_t expert_capacity = 0,
                                        const std::vector<CombineBias>& biases = {}, bool use_logfmt = false);

// ---- the MoE layer (docs/MOE.md) -------------------------------------------------------------------

// Every rank's y of the MoE layer (switchyard/moe.hpp), token by token: each (token, slot) with an
// expert runs through that expert's weights (weights[rank of the expert], as MoeWeights), and the
// slots' outputs are summed as the expert-major combine does. inputs[s].x is bf16 [N_s, H] (cast per
// 128 channels as the dispatch does when the weights are fp8), or with fp8 weights fp8_e4m3 [N_s, H] with
// x_scales f32 [N_s, H / 128], used as given; topk_idx and topk_weights as the layer takes them. Every
// rounding point is docs/MOE.md's. Returns bf16 [N_s, H] per rank. Expert capacity plays no part: a
// layer call that overflows it raises CapacityError instead.
// With `error_scales`, also every rank's f32 [N_s, H] scale S of docs/MOE.md's tolerance: a kernel that
// follows the recipe but sums in its own order must give |y - y_ref| <= moe_tolerance() * S everywhere.
std::vector<Tensor> moe_layer(const std::vector<RankInputs>& inputs, const std::vector<MoeWeights>& weights,
                              int num_experts, const Topology& topology, float activation_clamp = 0.0f,
                              std::vector<Tensor>* error_scales = nullptr);

// The relative bound tau of docs/MOE.md for the recipe of `weight_dtype` (bf16 or fp8_e4m3).
float moe_tolerance(DType weight_dtype);

// Whether |actual - expected| <= moe_tolerance(weight_dtype) * error_scale element by element (bf16
// [N, H] twice, f32 [N, H]); on the first element past it, says which in `why`.
bool within_moe_tolerance(const TensorView& actual, const TensorView& expected, const TensorView& error_scale,
                          DType weight_dtype, std::string* why = nullptr);

}  // namespace switchyard::reference
