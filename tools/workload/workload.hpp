#pragma once
// Synthetic MoE workloads shared by the tests and switchyard-bench: seeded random inputs with the
// edge cases of DESIGN.md, the synthetic expert, poisoning and bitwise comparison. Host tensors.
#include <cstdint>
#include <string>
#include <vector>

#include "switchyard/reference.hpp"
#include "switchyard/tensor.hpp"
#include "switchyard/topology.hpp"

namespace switchyard::workload {

enum class Routing {
  random,       // top-k distinct experts per token, about 1 slot in 16 set to -1
  all_invalid,  // every slot -1: no token goes anywhere
  one_expert,   // every token's slot 0 is the same expert, the rest -1
  skewed,       // most tokens prefer the experts of rank 0 (hot destination)
};

struct Shape {
  Topology topology{1, 1};
  int64_t tokens_per_rank = 0;                // used when tokens_per_rank_list is empty
  std::vector<int64_t> tokens_per_rank_list;  // per-rank token counts (may contain 0)
  int hidden = 7168;
  int topk = 8;
  int num_experts = 256;
  DType dtype = DType::bf16;  // bf16 or fp8_e4m3 (then x_scales are generated)
  bool with_weights = true;
  Routing routing = Routing::random;

  int64_t tokens_of(int rank) const;
  std::string describe() const;
};

struct RankData {
  Tensor x;             // [N, H]
  Tensor x_scales;      // f32 [N, H / 128] for fp8
  Tensor topk_idx;      // i64 [N, K]
  Tensor topk_weights;  // f32 [N, K] (undefined without weights)
  reference::RankInputs inputs() const;
};

// Deterministic in (shape, seed).
std::vector<RankData> generate(const Shape& shape, uint64_t seed);

// A combine bias for `rank`'s tokens (CombineArgs::bias0 when `which` is 0, bias1 when 1): bf16
// [N, H] of random values like x's, with about one in 16 an exact +0.0 and one in 16 an exact -0.0
// (the sign of a zero start is part of the contract). Deterministic in (shape, seed, rank, which).
Tensor combine_bias(const Shape& shape, uint64_t seed, int rank, int which);

// The stand-in for the experts: y = bf16(dequant(recv_x) * (1 + rank / 8)), row by row, so that
// every rank's output differs and the combine order matters. recv_x_scales only for fp8.
Tensor synthetic_expert(const TensorView& recv_x, const TensorView& recv_x_scales, int rank);

// Fills a host tensor with a recognisable garbage pattern (0xA5 bytes).
void poison(const TensorView& tensor);

// Bitwise equality of two host tensors (dtype, shape and bytes). On mismatch, explains the first
// difference (index, both values) in `why`. Compares only the first `rows` rows when rows >= 0.
bool bitwise_equal(const TensorView& actual, const TensorView& expected, std::string* why, int64_t rows = -1);

}  // namespace switchyard::workload
