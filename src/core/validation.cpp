#include "core/validation.hpp"

#include <cstdint>

#include "switchyard/errors.hpp"

namespace switchyard::detail {

namespace {
std::string device_name(Device device) {
  return device == Device::cpu ? "cpu" : "cuda";
}
}  // namespace

void expect_tensor(const TensorView& tensor, const char* name, DType dtype, int ndim, Device device) {
  if (!tensor.defined()) {
    throw InvalidArgument(std::string(name) + ": expected a " + dtype_name(dtype) + " tensor with " +
                          std::to_string(ndim) + " dimensions, got none");
  }
  if (tensor.dtype != dtype) {
    throw InvalidArgument(std::string(name) + ": expected dtype " + dtype_name(dtype) + ", got " +
                          tensor.describe());
  }
  if (tensor.ndim != ndim) {
    throw InvalidArgument(std::string(name) + ": expected " + std::to_string(ndim) + " dimensions, got " +
                          tensor.describe());
  }
  for (int i = 0; i < ndim; ++i) {
    if (tensor.shape[i] < 0) {
      throw InvalidArgument(std::string(name) + ": expected non-negative dimensions, got " +
                            tensor.describe());
    }
  }
  // NOTES: before anything calls numel(), whose int64 product such a shape would overflow.
  int64_t bytes = static_cast<int64_t>(dtype_size(dtype));
  for (int i = 0; i < ndim; ++i) {
    if (__builtin_mul_overflow(bytes, tensor.shape[i], &bytes)) {
      throw InvalidArgument(std::string(name) + ": expected a shape of fewer than 2^63 bytes, got " +
                            tensor.describe());
    }
  }
  if (tensor.device != device) {
    throw InvalidArgument(std::string(name) + ": expected a tensor on " + device_name(device) + ", got " +
                          tensor.describe());
  }
  if (tensor.data == nullptr && tensor.numel() > 0) {
    throw InvalidArgument(std::string(name) + ": expected data for " + tensor.describe() +
                          ", got a null pointer");
  }
}

void expect_optional_tensor(const TensorView& tensor, const char* name, DType dtype, int ndim,
                            Device device) {
  if (tensor.defined()) expect_tensor(tensor, name, dtype, ndim, device);
}

void expect_dim(const TensorView& tensor, const char* name, int dim, int64_t expected, const char* what) {
  if (tensor.shape[dim] != expected) {
    throw InvalidArgument(std::string(name) + ": expected size " + std::to_string(expected) +
                          " in dimension " + std::to_string(dim) + " (" + what + "), got " +
                          tensor.describe());
  }
}

void expect_undefined(const TensorView& tensor, const char* name, const std::string& why) {
  if (tensor.defined()) {
    throw InvalidArgument(std::string(name) + ": expected none (" + why + "), got " + tensor.describe());
  }
}

void expect_optional_bias(const TensorView& bias, const char* name, int64_t num_tokens, int64_t hidden,
                          Device device) {
  if (!bias.defined()) return;
  expect_tensor(bias, name, DType::bf16, 2, device);
  expect_dim(bias, name, 0, num_tokens, "tokens of the dispatch on this rank");
  expect_dim(bias, name, 1, hidden, "hidden of x");
  // NOTES: the kernels read a bias row 16 bytes at a time, where the rows of x are read.
  if (device == Device::cuda && reinterpret_cast<uintptr_t>(bias.data) % 16 != 0) {
    throw InvalidArgument(
        std::string(name) +
        ": expected a 16-byte aligned data pointer (the GPU reads it 16 bytes at a time), got " +
        std::to_string(reinterpret_cast<uintptr_t>(bias.data)));
  }
}

void expect_expert_ids(const TensorView& topk_idx, int num_experts) {
  const int64_t* ids = topk_idx.as<const int64_t>();
  int64_t count = topk_idx.numel();
  int64_t topk = topk_idx.shape[1];
  for (int64_t i = 0; i < count; ++i) {
    if (ids[i] < -1 || ids[i] >= num_experts) {
      throw InvalidArgument("topk_idx: expected expert ids in [-1, " + std::to_string(num_experts) +
                            "), got " + std::to_string(ids[i]) + " at token " + std::to_string(i / topk) +
                            ", slot " + std::to_string(i % topk));
    }
  }
}

}  // namespace switchyard::detail
