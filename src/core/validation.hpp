#pragma once
// Host-side argument checks. Each throws InvalidArgument naming the argument, what was expected and
// what was given, before anything is written.
#include <string>

#include "switchyard/tensor.hpp"

namespace switchyard::detail {

// `name` must be defined, of `dtype`, with `ndim` dimensions on `device`.
void expect_tensor(const TensorView& tensor, const char* name, DType dtype, int ndim, Device device);
// Either undefined, or as expect_tensor.
void expect_optional_tensor(const TensorView& tensor, const char* name, DType dtype, int ndim, Device device);
void expect_dim(const TensorView& tensor, const char* name, int dim, int64_t expected, const char* what);
void expect_undefined(const TensorView& tensor, const char* name, const std::string& why);

// A combine bias (CombineArgs::bias0 / bias1): undefined, or bf16 [num_tokens, hidden] on `device`
// (16-byte aligned on cuda).
void expect_optional_bias(const TensorView& bias, const char* name, int64_t num_tokens, int64_t hidden,
                          Device device);

// Expert ids in [-1, num_experts) (host tensors only).
void expect_expert_ids(const TensorView& topk_idx, int num_experts);

}  // namespace switchyard::detail
