#pragma once
// The outputs of an expert-major dispatch and the handle that goes with them, shared by the
// low_latency and symmetric engines, which must produce the very same tensors.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <vector>

#include "common/combine_bias.hpp"
#include "common/logfmt_wire.hpp"
#include "common/numeric.hpp"
#include "core/backend.hpp"
#include "core/expert_major_handle.hpp"

namespace switchyard::cpu {

struct ExpertMajorOutputs {
  Tensor recv_x, recv_x_scales, recv_count, layout_range, src_info;
  // layout_range and src_info are the caller's out_* tensors, borrowed for the call only.
  bool caller_layout_range = false, caller_src_info = false;
  std::shared_ptr<detail::ExpertMajorHandleData> handle;
};

// The caller's preallocated output, or a fresh host tensor.
Tensor output_or_allocate(const TensorView& given, DType dtype, std::initializer_list<int64_t> dims);

// The caller's combine biases (bf16 [N, H'] each, null when absent).
struct CombineBiases {
  const uint16_t* bias0 = nullptr;
  const uint16_t* bias1 = nullptr;
};
CombineBiases combine_biases(const LowLatencyCombineArgs& args);

// DESIGN.md's expert-major combine, the same for every engine: for each token, its valid slots
// (topk_idx >= 0) in increasing order, acc = fma(weight, y, acc) in fp32 from +0 (or from
// bias0 + bias1: common/combine_bias.hpp), rounded to bf16 once. `row_of(slot, token)` gives the
// expert output row for that (slot, token): bf16, or with `use_logfmt` packed as LogFMT-10
// (common/logfmt_wire.hpp), accumulated as it decodes (logfmt_round_trip_row of the bf16 row).
template <typename RowOf>
void reduce_weighted_slots(const int64_t* topk_idx, const float* topk_weights, int64_t num_tokens, int topk,
                           int hidden, uint16_t* combined_x, const CombineBiases& biases, bool use_logfmt,
                           RowOf row_of) {
  std::vector<float> accumulator(hidden);
  std::vector<float> decoded(use_logfmt ? hidden : 0);  // a LogFMT row as accumulated
  for (int64_t token = 0; token < num_tokens; ++token) {
    for (int channel = 0; channel < hidden; ++channel) {
      accumulator[channel] = common::combine_bias_start(biases.bias0, biases.bias1,
                                                        static_cast<size_t>(token * hidden + channel));
    }
    for (int slot = 0; slot < topk; ++slot) {
      if (topk_idx[token * topk + slot] < 0) continue;
      const float weight = topk_weights[token * topk + slot];
      const void* row = row_of(slot, token);
      if (use_logfmt) {
        common::logfmt_wire_decode_row(static_cast<const uint8_t*>(row), hidden, decoded.data());
        for (int channel = 0; channel < hidden; ++channel) {
          accumulator[channel] = std::fma(weight, decoded[channel], accumulator[channel]);
        }
        continue;
      }
      const uint16_t* bf16_row = static_cast<const uint16_t*>(row);
      for (int channel = 0; channel < hidden; ++channel) {
        accumulator[channel] =
            std::fma(weight, common::bf16_to_float(bf16_row[channel]), accumulator[channel]);
      }
    }
    uint16_t* out = combined_x + token * hidden;
    for (int channel = 0; channel < hidden; ++channel)
      out[channel] = common::float_to_bf16(accumulator[channel]);
  }
}

// The caller's preallocated outputs or fresh ones, and a handle recording the plan's routing (a
// copy of topk_idx) for `engine`'s combine.
ExpertMajorOutputs prepare_expert_major_outputs(const detail::ExpertMajorDispatchPlan& plan,
                                                detail::BufferId owner, Engine engine);

// What the dispatch returns: the outputs and the handle (no hook; the low_latency engine adds its own).
LowLatencyDispatchResult dispatch_result(const ExpertMajorOutputs& out);

// Once the receive half has filled `out`: the routing the handle keeps for the combine (layout_range,
// src_info). Outputs the library allocated are shared with the result; the caller's out_* are copied,
// since the caller may reuse or free them before the combine.
void keep_received_routing(const ExpertMajorOutputs& out);

}  // namespace switchyard::cpu
