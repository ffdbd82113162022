#pragma once
// Where a combine's fp32 accumulator starts when the caller adds biases (DeepEP's combine `bias`):
// bias0 + bias1 in fp32, an absent bias counting as +0.0, so without biases it is +0.0 as before.
// Starting there (rather than adding the biases after the rows) follows DeepEP's combine kernels;
// every engine, backend and the reference start here (docs/deep_ep.md, "Combine bias").
#include "common/numeric.hpp"

namespace switchyard::common {

// One element's start from the two biases' bf16 bits, `has0` / `has1` saying which are given.
SY_HD float combine_bias_start(bool has0, uint16_t bias0_bits, bool has1, uint16_t bias1_bits) {
  const float first = has0 ? bf16_to_float(bias0_bits) : 0.0f;
  const float second = has1 ? bf16_to_float(bias1_bits) : 0.0f;
  return first + second;
}

// `index` is the element's offset in the [N, H] bias; either pointer may be null.
SY_HD float combine_bias_start(const uint16_t* bias0, const uint16_t* bias1, size_t index) {
  return combine_bias_start(bias0 != nullptr, bias0 ? bias0[index] : uint16_t{0}, bias1 != nullptr,
                            bias1 ? bias1[index] : uint16_t{0});
}

}  // namespace switchyard::common
