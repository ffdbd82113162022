#pragma once
// The routed MoE layer over the `symmetric` engine (docs/MOE.md): per rank, its tokens go to their
// top-k experts (symmetric dispatch), every local expert runs h = x W1^T, a = silu(gate) * up,
// o = a W2^T on the rows it received, and the rows come home weighted and summed in slot order
// (symmetric combine).
//
//   MoeLayer layer(buffer, {.w1 = w1, .w2 = w2}, {.num_experts = 256, .max_tokens_per_rank = 128});
//   MoeResult out = layer.forward({.x = x, .topk_idx = topk_idx, .topk_weights = topk_weights});
//   // out.y: bf16 [N, H]
//
// A MoeLayer is an object, not a Buffer method, because a layer has state that outlives a call: its
// weights (checked once, at construction, against the buffer's device and the expert count) and the
// workspace between its phases (received rows, activations, expert outputs), allocated once so that a
// call allocates nothing but an output the caller did not give. That is what lets the CUDA path run a
// call with no host synchronisation, and capture it in a CUDA graph. A captured forward's own
// temporaries (its dispatch handle's routing tables) belong to the graph as well (CUDA user objects,
// src/cuda/backend/device_memory.cpp): they live while the graph or any executable made from it does.
// The weights and the workspace are the layer's: replay a graph only while the layer it captured lives.
//
// Recipes, chosen by the weights' dtype (docs/MOE.md has every rounding point):
//   bf16: x bf16; W1, W2 bf16.
//   fp8:  W1, W2 fp8 e4m3 with one f32 scale per 128 x 128 block (DeepSeek-V3's checkpoint format);
//         x bf16 (cast to e4m3 per 128 channels by the dispatch, as ExpertMajorDispatchArgs::use_fp8
//         does) or fp8 e4m3 with f32 scales per 128 channels (x_scales).
// The layer uses the Buffer's symmetric region (BufferSizing::symmetric_max_tokens_per_rank >= the
// layer's max_tokens_per_rank, hidden and num_experts within the sizing) and counts as symmetric calls:
// every rank makes the same sequence of symmetric calls and layer calls. The Buffer and the weights
// must outlive the layer; the layer reads the weights in place (no copy).
#include <cstdint>
#include <memory>

#include "switchyard/buffer.hpp"
#include "switchyard/tensor.hpp"

namespace switchyard {

namespace detail {
struct MoeLayerAccess;  // the bench's phase marks (core/moe_plan.hpp)
}

// How w1's 2I rows hold the gate and up projections (w1_scales' block rows follow their rows).
enum class MoeGateUp : int {
  halves = 0,  // rows [0, I) the gate projection, rows [I, 2I) the up projection: DeepSeek-V3's checkpoint
  // 64-row blocks alternating: gate rows [0, 64), up rows [0, 64), gate rows [64, 128), ...; w1_scales'
  // rows (one per 128 rows of a projection) alternate likewise: gate 0, up 0, gate 1, ...
  // (interleave_gate_up makes both from halves; I a multiple of 128). The same bits of y as halves; on CUDA
  // with fp8 weights GEMM 1 applies SwiGLU and the requantisation in its epilogue, so h never reaches
  // memory (docs/MOE.md, "The SwiGLU epilogue").
  interleaved = 1,
};

// One rank's experts (L = num_experts / num_ranks local experts, hidden H, intermediate I).
struct MoeWeights {
  // [L, 2I, H], bf16 or fp8_e4m3: the gate and up projections, laid out as gate_up says.
  TensorView w1;
  TensorView w1_scales;  // f32 [L, 2I / 128, H / 128]: fp8 only, one per 128 x 128 block of w1
  TensorView w2;         // [L, H, I], w1's dtype
  TensorView w2_scales;  // f32 [L, H / 128, I / 128]: fp8 only
  MoeGateUp gate_up = MoeGateUp::halves;
};

// Copies `halves` (w1 [L, 2I, H] in MoeGateUp::halves, bf16 or fp8_e4m3, I a multiple of 128; or its
// w1_scales, f32 [L, 2I / 128, H / 128]) into `out` (same dtype, shape and device, not overlapping it) in
// MoeGateUp::interleaved: w1 in 64-row blocks, its scales in single rows. CPU tensors are copied before it
// returns; CUDA tensors on `stream` (a cudaStream_t; nullptr: the legacy default stream), asynchronously.
// Throws InvalidArgument naming the argument, what was expected and what was given, before writing anything.
void interleave_gate_up(const TensorView& halves, const TensorView& out, Stream stream = nullptr);

// Where the expert phase writes each expert-output row o (MoeLayerOptions::expert_output). The same bits of y
// either way (docs/MOE.md, "GEMM 2's rows written home").
enum class MoeExpertOutput : int {
  // Into the layer's workspace o [L, C, H]; the symmetric combine then pushes each row home, or each home
  // reads it there (the pull combine).
  local = 0,
  // Straight into its home rank's combine buffer as it is computed (Mega-MoE's combine: on CUDA GEMM 2's
  // epilogue stores each row through the symmetric heap's peer mappings); the combine then moves nothing, it
  // waits at its barrier and reduces. CUDA: fp8 weights only (the bf16 recipe's GEMM 2 has no such epilogue).
  home = 1,
};

struct MoeLayerOptions {
  int num_experts = 0;  // E, a multiple of the ranks; the same on every rank
  // N <= this on every rank, the same on every rank, at most BufferSizing::symmetric_max_tokens_per_rank.
  int64_t max_tokens_per_rank = 0;
  // Rows per local expert (C): 0 means num_ranks * max_tokens_per_rank (every row that could arrive),
  // else 1..that. An expert that receives more raises CapacityError on every rank, as
  // ExpertMajorDispatchArgs::expert_capacity says; the layer's workspace is sized by it.
  int64_t expert_capacity = 0;
  // > 0: gate = min(gate, c) and up = clamp(up, -c, c) before silu(gate) * up. 0: no clamp.
  float activation_clamp = 0.0f;
  MoeExpertOutput expert_output = MoeExpertOutput::local;
};

struct MoeArgs {
  TensorView x;             // bf16 [N, H]; or fp8_e4m3 [N, H] with x_scales (fp8 weights only)
  TensorView x_scales;      // f32 [N, H / 128] with fp8 x
  TensorView topk_idx;      // i64 [N, K]: global expert ids, -1 = no expert
  TensorView topk_weights;  // f32 [N, K]
  TensorView out_y;         // optional preallocated bf16 [N, H] (needed for CUDA graph capture)
  Stream stream = nullptr;  // cudaStream_t on CUDA (nullptr: the buffer's own stream); ignored on CPU
};

struct MoeResult {
  // bf16 [N, H]: y[t] = sum over slots j ascending with topk_idx[t, j] >= 0 of topk_weights[t, j] * o_j,
  // accumulated in fp32 with fused multiply-add from +0.0, rounded to bf16 once.
  Tensor y;
};

class MoeLayer {
 public:
  // Checks the weights and options against `buffer` (connected, with a symmetric region) and
  // allocates the workspace. On CUDA, with ranks sharing a GPU, make every rank's layer before any
  // rank's first forward(): setting up the GEMMs (uploads, kernel attributes) may wait for the GPU,
  // i.e. for a peer's kernel that waits for this rank. Throws InvalidArgument naming the argument, what was
  // expected and what was given; Unsupported where the build has no MoE path for the buffer's backend (CUDA
  // without the CUTLASS headers).
  MoeLayer(Buffer& buffer, const MoeWeights& weights, const MoeLayerOptions& options);
  ~MoeLayer();
  MoeLayer(const MoeLayer&) = delete;
  MoeLayer& operator=(const MoeLayer&) = delete;

  // Collective: every rank calls it, with its own tokens (N may differ by rank, 0 included).
  MoeResult forward(const MoeArgs& args);

  int hidden() const;
  int intermediate() const;
  int local_experts() const;
  DType weight_dtype() const;       // bf16 or fp8_e4m3: the recipe
  int64_t expert_capacity() const;  // C, resolved

  class Impl;

 private:
  friend struct detail::MoeLayerAccess;
  std::unique_ptr<Impl> impl_;
};

}  // namespace switchyard
