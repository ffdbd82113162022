// The MoE layer's oracle (docs/MOE.md): one (token, slot) at a time, straight through its expert's
// weights, with every element computed by common/moe_numerics.hpp and every rounding point where the
// document puts it. No dispatch, no workspace, no batching.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "common/fp8_cast.hpp"
#include "common/moe_layout.hpp"
#include "common/moe_numerics.hpp"
#include "common/numeric.hpp"
#include "switchyard/errors.hpp"
#include "switchyard/reference.hpp"

namespace switchyard::reference {

namespace {

using common::kMoeScaleBlock;

void expect_host(const TensorView& tensor, const std::string& name, DType dtype, int ndim) {
  if (!tensor.defined() || tensor.dtype != dtype || tensor.ndim != ndim || tensor.device != Device::cpu ||
      (tensor.data == nullptr && tensor.numel() > 0)) {
    throw InvalidArgument(name + ": expected a host " + dtype_name(dtype) + " tensor with " +
                          std::to_string(ndim) + " dimensions, got " +
                          (tensor.defined() ? tensor.describe() : std::string("none")));
  }
}

void expect_shape(const TensorView& tensor, const std::string& name, std::vector<int64_t> dims) {
  for (size_t dim = 0; dim < dims.size(); ++dim) {
    if (tensor.shape[dim] != dims[dim]) {
      throw InvalidArgument(name + ": expected size " + std::to_string(dims[dim]) + " in dimension " +
                            std::to_string(dim) + ", got " + tensor.describe());
    }
  }
}

// One rank's experts, checked against the first rank's shape.
struct Experts {
  const MoeWeights* weights;
  common::MoeWeightLayout layout;
  bool fp8;
};

// |gate * up| after the clamp of rounding point 3: how far a moves, relative to one bf16 ulp of h, when
// the rounding of gate or up lands on the other side (docs/MOE.md, "Tolerance of the GPU path"), weighted
// by 2^-5 / tau so that the bound tau * S holds 2^-5 |gate * up| for it in either recipe (it needs
// 2.11 * 2^-7).
double weighted_clamped_product(float gate, float up, float clamp, bool fp8) {
  common::clamp_gate_up(gate, up, clamp);
  const double weight = 0.03125 / moe_tolerance(fp8 ? DType::fp8_e4m3 : DType::bf16);
  return weight * std::fabs(static_cast<double>(gate) * static_cast<double>(up));
}

// The layer's output row of one (token, expert) pair: o = bf16(a W2^T), a = act(silu(gate) * up),
// [gate, up] = bf16(x W1^T). x_fp8 / x_scales: the token cast per 128 channels (fp8 recipe only).
// With `magnitude` (H values), also the row's scale of docs/MOE.md's tolerance:
// sum_n (|a_n| + (2^-5 / tau) |gate_n up_n| + 2^-6 s_n) |W2[m, n]| over the dequantised W2, gate and up
// clamped, s_n the
// requantisation scale of a's block (0 in the bf16 recipe), in double.
void expert_row(const Experts& experts, int local, const uint16_t* x, const uint8_t* x_fp8,
                const float* x_scales, float clamp, std::vector<float>& h, std::vector<uint16_t>& o,
                std::vector<double>* magnitude) {
  const common::MoeWeightLayout& layout = experts.layout;
  const int hidden = layout.hidden, intermediate = layout.intermediate;
  const MoeWeights& w = *experts.weights;
  for (int64_t n = 0; n < layout.w1_rows(); ++n) {
    h[n] = common::round_h(
        experts.fp8 ? common::dot_fp8_blockwise(
                          x_fp8, x_scales, w.w1.as<const uint8_t>() + layout.w1_row(local, n),
                          w.w1_scales.as<const float>() + layout.w1_scales_row(local, n), hidden)
                    : common::dot_bf16(x, w.w1.as<const uint16_t>() + layout.w1_row(local, n), hidden));
  }
  std::vector<float> a(intermediate);
  std::vector<double> product(magnitude ? intermediate : 0);
  for (int n = 0; n < intermediate; ++n) {
    a[n] = common::swiglu(h[n], h[intermediate + n], clamp);
    if (magnitude) product[n] = weighted_clamped_product(h[n], h[intermediate + n], clamp, experts.fp8);
  }
  if (experts.fp8) {
    std::vector<uint8_t> a_fp8(intermediate);
    std::vector<float> a_scales(intermediate / kMoeScaleBlock);
    for (int block = 0; block < intermediate / kMoeScaleBlock; ++block) {
      a_scales[block] = common::requantise_block_to_fp8(a.data() + block * kMoeScaleBlock,
                                                        a_fp8.data() + block * kMoeScaleBlock);
    }
    if (magnitude) {
      for (int m = 0; m < hidden; ++m) {
        const uint8_t* w2 = w.w2.as<const uint8_t>() + layout.w2_row(local, m);
        const float* w2_scales = w.w2_scales.as<const float>() + layout.w2_scales_row(local, m);
        double sum = 0.0;
        for (int n = 0; n < intermediate; ++n) {
          const double unit = std::ldexp(static_cast<double>(a_scales[n / kMoeScaleBlock]), -6);
          sum += (std::fabs(static_cast<double>(a[n])) + product[n] + unit) *
                 std::fabs(static_cast<double>(common::fp8_e4m3_to_float(w2[n])) *
                           w2_scales[n / kMoeScaleBlock]);
        }
        (*magnitude)[m] = sum;
      }
    }
    for (int m = 0; m < hidden; ++m) {
      o[m] = common::float_to_bf16(common::dot_fp8_blockwise(
          a_fp8.data(), a_scales.data(), w.w2.as<const uint8_t>() + layout.w2_row(local, m),
          w.w2_scales.as<const float>() + layout.w2_scales_row(local, m), intermediate));
    }
  } else {
    std::vector<uint16_t> a_bf16(intermediate);
    for (int n = 0; n < intermediate; ++n) a_bf16[n] = common::float_to_bf16(a[n]);
    if (magnitude) {
      for (int m = 0; m < hidden; ++m) {
        const uint16_t* w2 = w.w2.as<const uint16_t>() + layout.w2_row(local, m);
        double sum = 0.0;
        for (int n = 0; n < intermediate; ++n) {
          sum += (std::fabs(static_cast<double>(a[n])) + product[n]) *
                 std::fabs(static_cast<double>(common::bf16_to_float(w2[n])));
        }
        (*magnitude)[m] = sum;
      }
    }
    for (int m = 0; m < hidden; ++m) {
      o[m] = common::float_to_bf16(
          common::dot_bf16(a_bf16.data(), w.w2.as<const uint16_t>() + layout.w2_row(local, m), intermediate));
    }
  }
}

}  // namespace

float moe_tolerance(DType weight_dtype) {
  // docs/MOE.md, "Tolerance": bf16 6 * 2^-8 of |a| (a flip of a's bf16 rounding, o's and y's) and
  // 2.11 * 2^-7 of |gate up| (a flip of h's bf16 rounding) plus margin; fp8 2 * 2^-4 of |a| (a flip of a's
  // e4m3 rounding) plus the bf16 terms and margin.
  return weight_dtype == DType::fp8_e4m3 ? 0.125f + 0.03125f : 0.03125f;
}

bool within_moe_tolerance(const TensorView& actual, const TensorView& expected, const TensorView& error_scale,
                          DType weight_dtype, std::string* why) {
  expect_host(actual, "actual", DType::bf16, 2);
  expect_host(expected, "expected", DType::bf16, 2);
  expect_host(error_scale, "error_scale", DType::f32, 2);
  expect_shape(actual, "actual", {expected.shape[0], expected.shape[1]});
  expect_shape(error_scale, "error_scale", {expected.shape[0], expected.shape[1]});
  const double tolerance = moe_tolerance(weight_dtype);
  const int64_t hidden = expected.shape[1];
  for (int64_t i = 0; i < expected.numel(); ++i) {
    const double got = common::bf16_to_float(actual.as<const uint16_t>()[i]);
    const double want = common::bf16_to_float(expected.as<const uint16_t>()[i]);
    const double bound = tolerance * error_scale.as<const float>()[i];
    if (!(std::fabs(got - want) <= bound)) {
      if (why) {
        *why = "token " + std::to_string(i / hidden) + ", channel " + std::to_string(i % hidden) + ": got " +
               std::to_string(got) + ", expected " + std::to_string(want) + " within " +
               std::to_string(bound);
      }
      return false;
    }
  }
  return true;
}

std::vector<Tensor> moe_layer(const std::vector<RankInputs>& inputs, const std::vector<MoeWeights>& weights,
                              int num_experts, const Topology& topology, float activation_clamp,
                              std::vector<Tensor>* error_scales) {
  const int num_ranks = topology.num_ranks;
  if (static_cast<int>(inputs.size()) != num_ranks || static_cast<int>(weights.size()) != num_ranks) {
    throw InvalidArgument("inputs, weights: expected one per rank (" + std::to_string(num_ranks) + "), got " +
                          std::to_string(inputs.size()) + " and " + std::to_string(weights.size()));
  }
  if (num_experts < 1 || num_experts % num_ranks != 0) {
    throw InvalidArgument("num_experts: expected a positive multiple of num_ranks, got " +
                          std::to_string(num_experts));
  }
  const int local_experts = num_experts / num_ranks;
  const TensorView& w1_0 = weights[0].w1;
  const bool fp8 = w1_0.dtype == DType::fp8_e4m3;
  const DType dtype = fp8 ? DType::fp8_e4m3 : DType::bf16;
  expect_host(w1_0, "weights[0].w1", dtype, 3);
  const int hidden = static_cast<int>(w1_0.shape[2]);
  const int intermediate = static_cast<int>(w1_0.shape[1] / 2);
  if (fp8 && (hidden % kMoeScaleBlock != 0 || intermediate % kMoeScaleBlock != 0)) {
    throw InvalidArgument("weights[0].w1: expected H and I multiples of 128 for fp8, got " + w1_0.describe());
  }
  std::vector<Experts> experts;
  for (int rank = 0; rank < num_ranks; ++rank) {
    const std::string name = "weights[" + std::to_string(rank) + "]";
    const MoeWeights& w = weights[rank];
    expect_host(w.w1, name + ".w1", dtype, 3);
    expect_shape(w.w1, name + ".w1", {local_experts, 2 * intermediate, hidden});
    expect_host(w.w2, name + ".w2", dtype, 3);
    expect_shape(w.w2, name + ".w2", {local_experts, hidden, intermediate});
    if (fp8) {
      expect_host(w.w1_scales, name + ".w1_scales", DType::f32, 3);
      expect_shape(w.w1_scales, name + ".w1_scales",
                   {local_experts, 2 * intermediate / kMoeScaleBlock, hidden / kMoeScaleBlock});
      expect_host(w.w2_scales, name + ".w2_scales", DType::f32, 3);
      expect_shape(w.w2_scales, name + ".w2_scales",
                   {local_experts, hidden / kMoeScaleBlock, intermediate / kMoeScaleBlock});
    }
    const bool interleaved = w.gate_up == MoeGateUp::interleaved;
    if (interleaved && intermediate % kMoeScaleBlock != 0) {
      throw InvalidArgument(name + ".gate_up: MoeGateUp::interleaved expects I a multiple of 128, got I = " +
                            std::to_string(intermediate));
    }
    experts.push_back({&w, {hidden, intermediate, common::moe_gate_up(static_cast<int>(w.gate_up))}, fp8});
  }

  std::vector<Tensor> outputs(num_ranks);
  std::vector<float> h(2 * static_cast<size_t>(intermediate)), accumulator(hidden);
  std::vector<uint16_t> o(hidden);
  std::vector<double> magnitude(hidden), error_scale(hidden);
  if (error_scales) error_scales->assign(num_ranks, Tensor());
  std::vector<uint8_t> x_row_fp8(hidden);  // the token's e4m3 row and scales (fp8 recipe)
  std::vector<float> x_row_scales(hidden / kMoeScaleBlock + 1);
  for (int source = 0; source < num_ranks; ++source) {
    const std::string name = "inputs[" + std::to_string(source) + "]";
    const RankInputs& in = inputs[source];
    // x: bf16, or (fp8 weights only) fp8_e4m3 that the caller cast, with its scales: used as given.
    const bool x_fp8 = in.x.defined() && in.x.dtype == DType::fp8_e4m3;
    if (x_fp8 && !fp8) {
      throw InvalidArgument(name + ".x: expected bf16 with bf16 weights (fp8 x needs fp8 weights), got " +
                            in.x.describe());
    }
    expect_host(in.x, name + ".x", x_fp8 ? DType::fp8_e4m3 : DType::bf16, 2);
    expect_shape(in.x, name + ".x", {in.x.shape[0], hidden});
    const int64_t num_tokens = in.x.shape[0];
    if (x_fp8) {
      expect_host(in.x_scales, name + ".x_scales", DType::f32, 2);
      expect_shape(in.x_scales, name + ".x_scales", {num_tokens, hidden / kMoeScaleBlock});
    } else if (in.x_scales.defined()) {
      throw InvalidArgument(name + ".x_scales: expected none for bf16 x, got " + in.x_scales.describe());
    }
    expect_host(in.topk_idx, name + ".topk_idx", DType::i64, 2);
    expect_shape(in.topk_idx, name + ".topk_idx", {num_tokens});
    const int64_t topk = in.topk_idx.shape[1];
    expect_host(in.topk_weights, name + ".topk_weights", DType::f32, 2);
    expect_shape(in.topk_weights, name + ".topk_weights", {num_tokens, topk});
    const int64_t* ids = in.topk_idx.as<const int64_t>();
    const float* gate_weights = in.topk_weights.as<const float>();
    outputs[source] = Tensor::empty(DType::bf16, {num_tokens, hidden});
    if (error_scales) (*error_scales)[source] = Tensor::empty(DType::f32, {num_tokens, hidden});
    for (int64_t token = 0; token < num_tokens; ++token) {
      const uint16_t* x = x_fp8 ? nullptr : in.x.as<const uint16_t>() + token * hidden;
      if (x_fp8) {
        std::memcpy(x_row_fp8.data(), in.x.as<const uint8_t>() + token * hidden, hidden);
        std::memcpy(x_row_scales.data(), in.x_scales.as<const float>() + token * (hidden / kMoeScaleBlock),
                    (hidden / kMoeScaleBlock) * sizeof(float));
      } else if (fp8) {
        common::cast_row_to_fp8(x, hidden, false, x_row_fp8.data(), x_row_scales.data());
      }
      std::fill(accumulator.begin(), accumulator.end(), 0.0f);
      std::fill(error_scale.begin(), error_scale.end(), 0.0);
      for (int64_t slot = 0; slot < topk; ++slot) {
        const int64_t expert = ids[token * topk + slot];
        if (expert < 0) continue;
        if (expert >= num_experts) {
          throw InvalidArgument(name + ".topk_idx: expected expert ids in [-1, " +
                                std::to_string(num_experts) + "), got " + std::to_string(expert));
        }
        const int rank = static_cast<int>(expert / local_experts);
        expert_row(experts[rank], static_cast<int>(expert % local_experts), x, x_row_fp8.data(),
                   x_row_scales.data(), activation_clamp, h, o, error_scales ? &magnitude : nullptr);
        const float weight = gate_weights[token * topk + slot];
        if (error_scales) {
          for (int m = 0; m < hidden; ++m)
            error_scale[m] += std::fabs(static_cast<double>(weight)) * magnitude[m];
        }
        for (int m = 0; m < hidden; ++m)
          accumulator[m] = std::fma(weight, common::bf16_to_float(o[m]), accumulator[m]);
      }
      uint16_t* y = outputs[source].as<uint16_t>() + token * hidden;
      for (int m = 0; m < hidden; ++m) y[m] = common::float_to_bf16(accumulator[m]);
      if (error_scales) {
        float* scale = (*error_scales)[source].as<float>() + token * hidden;
        for (int m = 0; m < hidden; ++m) scale[m] = static_cast<float>(error_scale[m]);
      }
    }
  }
  return outputs;
}

}  // namespace switchyard::reference
