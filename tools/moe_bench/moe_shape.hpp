#pragma once
// What switchyard-moe-bench runs (its command line) and the arithmetic of the layer's work: rows per
// expert from the routing, FLOPs and the weight bytes a call must read.
#include <cstdint>
#include <string>
#include <vector>

#include "common/moe_layout.hpp"
#include "switchyard/moe.hpp"
#include "switchyard/tensor.hpp"
#include "workload/workload.hpp"

namespace switchyard::moe_bench {

enum class RanksAs { threads, processes };

struct MoeBenchOptions {
  int ranks = 8;
  RanksAs ranks_as = RanksAs::threads;
  int64_t tokens = 128;  // per rank
  int hidden = 7168;
  int intermediate = 2048;
  int experts = 256;
  int topk = 8;
  DType weights = DType::fp8_e4m3;
  int64_t capacity = 0;  // rows per local expert; 0: 2 x the largest any expert receives, rounded up to 128
  // 3 and 10, as tools/peer/torch_grouped_gemm.py: the layer's time rises ~15 % over a run's first calls as
  // the GPU's clock falls (bench/NOTES.md, session 27), so a comparison needs the same calls on both sides.
  int warmup = 3;
  int iters = 10;
  int check_tokens = 1;  // tokens per rank checked against the reference
  uint64_t seed = 1;
  double timeout_seconds = 120.0;
  // The symmetric engine's heap-resident tensors (--heap on): x written into Buffer::symmetric_input and
  // the layer's expert outputs in the heap output, with the pull combine, which across processes reads
  // only those.
  bool heap_tensors = false;
  // --gemm-tiles: the fp8 GEMMs alone in every CUTLASS tile (cuda::GroupedGemmTile), each checked bitwise
  // against m128's outputs.
  bool gemm_tiles = false;
  // --timeline (ranks as threads, ranks on the GPU of rank 0): every rank's phase marks of each timed call
  // against one origin per call, so the ranks' phases line up on one GPU's clock.
  bool timeline = false;
  // --gate-up: W1's layout (switchyard::MoeGateUp): halves (the checkpoint's, the default) or interleaved,
  // with which the fp8 layer's GEMM 1 applies SwiGLU in its epilogue.
  MoeGateUp gate_up = MoeGateUp::halves;
  // --expert-output: where GEMM 2 writes o's rows (switchyard::MoeExpertOutput).
  MoeExpertOutput expert_output = MoeExpertOutput::local;
  std::string json;

  common::MoeWeightLayout weight_layout() const {
    return {hidden, intermediate, common::moe_gate_up(static_cast<int>(gate_up))};
  }

  int local_experts() const { return experts / ranks; }
  workload::Shape shape() const;
};

// Rows each global expert receives (every (token, slot) naming it, from every rank).
std::vector<int64_t> rows_per_expert(const std::vector<workload::RankData>& data, int experts);

// One (token, expert) row through both GEMMs: 2 * (2I * H + H * I) FLOPs.
double flops_per_row(int hidden, int intermediate);
// Bytes of one expert's weights (W1 and W2 and, for fp8, their block scales).
double weight_bytes_per_expert(int hidden, int intermediate, bool fp8);

}  // namespace switchyard::moe_bench
