#pragma once
// Where a combine's fp32 accumulator starts when the caller adds biases (DeepEP's combine `bias`):
// bias0 + bias1 in fp32, an absent bias counting as +0.0, so without biases it is +0.0 as before.
// Starting there (rather than adding the biases after the rows) follows DeepEP's combine kernels;
// every engine, backend and the reference start here (docs/deep_ep.md, "Combine bias").
#include "common/numeric.hpp"

namespace switchyard::common {

// `index` is the element's offset in the [N, H] bias; either pointer may be null.
SY_HD float combine_bias_start(const uint16_t* bias0, const uint16_t* bias1, size_t index) {
  const float first = bias0 ? bf16_to_float(bias0[index]) : 0.0f;
  const float second = bias1 ? bf16_to_float(bias1[index]) : 0.0f;
  return first + second;
}

}  // namespace switchyard::common
