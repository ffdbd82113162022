#include "core/moe_plan.hpp"

#include <cmath>
#include <string>

#include "core/expert_major_plan.hpp"
#include "core/validation.hpp"
#include "switchyard/errors.hpp"

namespace switchyard::detail {

namespace {

using common::kMoeScaleBlock;

// NOTES: as kMaxHidden: below it the workspace's size arithmetic (int channel counts, int64 offsets)
// cannot overflow; DeepSeek-V3's is 2048.
constexpr int64_t kMaxIntermediate = 1 << 20;

std::string text(int64_t value) {
  return std::to_string(value);
}

// On CUDA, a weight must be on the Buffer's own GPU: the layer keeps it, and the kernels read it in
// place. (A call's tensors are checked by the engines' plans.)
void expect_buffer_gpu(const TensorView& tensor, const char* name, const PlanContext& buffer) {
  if (buffer.device == Device::cuda && tensor.device_index != buffer.options.device) {
    throw InvalidArgument(std::string(name) + ": expected a tensor on cuda:" + text(buffer.options.device) +
                          " (the Buffer's device), got " + tensor.describe());
  }
}

// A weight tensor: `dtype`, 3 dimensions, on the buffer's device, exactly `dims`.
void expect_weight(const TensorView& tensor, const char* name, DType dtype, const int64_t (&dims)[3],
                   const char* what, const PlanContext& buffer) {
  expect_tensor(tensor, name, dtype, 3, buffer.device);
  expect_buffer_gpu(tensor, name, buffer);
  for (int dim = 0; dim < 3; ++dim) expect_dim(tensor, name, dim, dims[dim], what);
}

// The channels of a weight's input or output dimension: a positive multiple of `multiple`, within
// `limit`.
int checked_channels(int64_t channels, int64_t multiple, int64_t limit, const char* name, const char* what,
                     const TensorView& tensor) {
  if (channels < 1 || channels % multiple != 0 || channels > limit) {
    throw InvalidArgument(std::string(name) + ": expected " + what + " a positive multiple of " +
                          text(multiple) + " up to " + text(limit) + ", got " + tensor.describe());
  }
  return static_cast<int>(channels);
}

}  // namespace

MoeLayerPlan plan_moe_layer(const MoeWeights& weights, const MoeLayerOptions& options,
                            const PlanContext& buffer, const common::SymmetricLayout& layout) {
  check_symmetric_region(buffer.options, "MoeLayer");
  const Device device = buffer.device;
  MoeLayerPlan plan;
  plan.num_ranks = buffer.options.topology.num_ranks;

  check_num_experts(options.num_experts, plan.num_ranks);
  if (options.num_experts > layout.num_experts()) {
    throw InvalidArgument("num_experts: expected at most " + text(layout.num_experts()) +
                          " (BufferSizing::num_experts, rounded down to a multiple of num_ranks), got " +
                          text(options.num_experts));
  }
  plan.num_experts = options.num_experts;
  plan.local_experts = options.num_experts / plan.num_ranks;

  if (options.max_tokens_per_rank < 1 || options.max_tokens_per_rank > layout.max_tokens_per_rank) {
    throw InvalidArgument("max_tokens_per_rank: expected 1.." + text(layout.max_tokens_per_rank) +
                          " (BufferSizing::symmetric_max_tokens_per_rank), got " +
                          text(options.max_tokens_per_rank));
  }
  plan.max_tokens_per_rank = options.max_tokens_per_rank;
  const int64_t all_rows = plan.num_ranks * plan.max_tokens_per_rank;
  if (options.expert_capacity < 0 || options.expert_capacity > all_rows) {
    throw InvalidArgument("expert_capacity: expected 0 (num_ranks * max_tokens_per_rank = " + text(all_rows) +
                          " rows per local expert) or 1.." + text(all_rows) + ", got " +
                          text(options.expert_capacity));
  }
  plan.expert_capacity = options.expert_capacity == 0 ? all_rows : options.expert_capacity;
  if (!(options.activation_clamp >= 0.0f) || std::isinf(options.activation_clamp)) {
    throw InvalidArgument("activation_clamp: expected 0 (no clamp) or a positive finite value, got " +
                          std::to_string(options.activation_clamp));
  }
  plan.activation_clamp = options.activation_clamp;

  // W1 decides the recipe and the shape; everything else must agree with it.
  const TensorView& w1 = weights.w1;
  if (!w1.defined())
    throw InvalidArgument("weights.w1: expected a bf16 or fp8_e4m3 tensor [L, 2I, H], got none");
  if (w1.dtype != DType::bf16 && w1.dtype != DType::fp8_e4m3) {
    throw InvalidArgument("weights.w1: expected dtype bf16 or fp8_e4m3, got " + w1.describe());
  }
  plan.fp8 = w1.dtype == DType::fp8_e4m3;
  expect_tensor(w1, "weights.w1", w1.dtype, 3, device);
  expect_buffer_gpu(w1, "weights.w1", buffer);
  expect_dim(w1, "weights.w1", 0, plan.local_experts, "local experts: num_experts / num_ranks");
  // NOTES: bf16 rows of 16 bytes (vector loads, TMA); fp8 channels in whole scale blocks, so that no
  // 128-channel block of W1's rows straddles the gate and up halves.
  const int64_t multiple = plan.fp8 ? kMoeScaleBlock : 8;
  if (w1.shape[1] % 2 != 0) {
    throw InvalidArgument(
        "weights.w1: expected an even number of rows in dimension 1 (2I: gate, then up), got " +
        w1.describe());
  }
  plan.intermediate = checked_channels(w1.shape[1] / 2, multiple, kMaxIntermediate, "weights.w1",
                                       "I (half of dimension 1)", w1);
  plan.hidden = checked_channels(w1.shape[2], multiple, layout.hidden, "weights.w1",
                                 "H (dimension 2, at most BufferSizing::hidden)", w1);
  if (weights.gate_up != MoeGateUp::halves && weights.gate_up != MoeGateUp::interleaved) {
    throw InvalidArgument("weights.gate_up: expected MoeGateUp::halves or MoeGateUp::interleaved, got " +
                          text(static_cast<int>(weights.gate_up)));
  }
  if (weights.gate_up == MoeGateUp::interleaved && plan.intermediate % kMoeScaleBlock != 0) {
    throw InvalidArgument(
        "weights.gate_up: MoeGateUp::interleaved expects I (half of weights.w1's dimension 1) "
        "a multiple of 128 (whole 128-row blocks), got I = " +
        text(plan.intermediate));
  }
  const int64_t local = plan.local_experts, hidden = plan.hidden, intermediate = plan.intermediate;
  expect_weight(weights.w2, "weights.w2", w1.dtype, {local, hidden, intermediate},
                "[L, H, I] of weights.w1's L, H and I", buffer);
  if (plan.fp8) {
    expect_weight(weights.w1_scales, "weights.w1_scales", DType::f32,
                  {local, 2 * intermediate / kMoeScaleBlock, hidden / kMoeScaleBlock},
                  "[L, 2I / 128, H / 128]: one per 128 x 128 block of weights.w1", buffer);
    expect_weight(weights.w2_scales, "weights.w2_scales", DType::f32,
                  {local, hidden / kMoeScaleBlock, intermediate / kMoeScaleBlock},
                  "[L, H / 128, I / 128]: one per 128 x 128 block of weights.w2", buffer);
  } else {
    expect_undefined(weights.w1_scales, "weights.w1_scales", "bf16 weights have no scales");
    expect_undefined(weights.w2_scales, "weights.w2_scales", "bf16 weights have no scales");
  }
  if (options.expert_output != MoeExpertOutput::local && options.expert_output != MoeExpertOutput::home) {
    throw InvalidArgument("expert_output: expected MoeExpertOutput::local or MoeExpertOutput::home, got " +
                          text(static_cast<int>(options.expert_output)));
  }
  plan.rows_home = options.expert_output == MoeExpertOutput::home;
  if (plan.rows_home && buffer.device == Device::cuda && !plan.fp8) {
    throw Unsupported(
        "expert_output: MoeExpertOutput::home on CUDA expects fp8 weights (GEMM 2's epilogue that writes "
        "rows "
        "home is built for the fp8 recipe's kernel), got bf16 weights; use MoeExpertOutput::local");
  }
  plan.weights = weights;
  return plan;
}

void check_home_rows_given(const MoeExpertsPlan& plan, const MoeExpertsCall& call) {
  if (plan.rows_home == (call.home_rows != nullptr)) return;
  throw Error(std::string("MoeLayer: the expert phase was made to write rows ") +
              (plan.rows_home ? "home" : "locally") + " but the call " +
              (call.home_rows != nullptr ? "gave" : "did not give") + " their homes (internal)");
}

void check_moe_call(const MoeArgs& args, const MoeLayerPlan& layer, Device device) {
  const TensorView& x = args.x;
  if (!x.defined()) throw InvalidArgument("x: expected a bf16 tensor [N, H], got none");
  // fp8 x: rows the caller cast per 128 channels, with its scales; the dispatch carries them as given.
  const bool x_fp8 = x.dtype == DType::fp8_e4m3;
  if (x_fp8 && !layer.fp8) {
    throw InvalidArgument("x: expected bf16 with bf16 weights (fp8 x needs fp8 weights), got " +
                          x.describe());
  }
  expect_tensor(x, "x", x_fp8 ? DType::fp8_e4m3 : DType::bf16, 2, device);
  expect_dim(x, "x", 1, layer.hidden, "H of the weights");
  if (x_fp8) {
    expect_tensor(args.x_scales, "x_scales", DType::f32, 2, device);
    expect_dim(args.x_scales, "x_scales", 0, x.shape[0], "num_tokens of x");
    expect_dim(args.x_scales, "x_scales", 1, layer.hidden / kMoeScaleBlock,
               "H / 128 of the weights: one scale per 128 channels of x");
  } else {
    expect_undefined(args.x_scales, "x_scales", "scales come only with fp8_e4m3 x");
  }
  const int64_t num_tokens = x.shape[0];
  expect_tensor(args.topk_idx, "topk_idx", DType::i64, 2, device);
  expect_dim(args.topk_idx, "topk_idx", 0, num_tokens, "num_tokens of x");
  // The combine's checks of the weights, made before the dispatch runs: a refusal must come before
  // any rank has moved a row.
  expect_tensor(args.topk_weights, "topk_weights", DType::f32, 2, device);
  expect_dim(args.topk_weights, "topk_weights", 0, num_tokens, "num_tokens of x");
  expect_dim(args.topk_weights, "topk_weights", 1, args.topk_idx.shape[1], "k of topk_idx");
  if (args.out_y.defined()) {
    expect_tensor(args.out_y, "out_y", DType::bf16, 2, device);
    expect_dim(args.out_y, "out_y", 0, num_tokens, "num_tokens of x");
    expect_dim(args.out_y, "out_y", 1, layer.hidden, "H of the weights");
  }
}

int64_t moe_expected_rows_per_expert(int64_t num_tokens, int64_t topk, int num_ranks, int num_experts) {
  if (num_experts <= 0) return 0;
  const int64_t rows = num_tokens * topk * num_ranks;
  return (rows + num_experts - 1) / num_experts;
}

}  // namespace switchyard::detail
