#include "switchyard/tensor.hpp"

#include <cstdlib>
#include <sstream>

#include "core/device_memory.hpp"
#include "switchyard/errors.hpp"

namespace switchyard {

namespace {
// NOTES: 256 bytes covers AVX-512 loads, cache lines and TMA's 128-byte alignment alike.
constexpr size_t kHostAlignment = 256;

std::shared_ptr<void> allocate_host_bytes(size_t bytes) {
  void* pointer = nullptr;
  size_t rounded = (bytes + kHostAlignment - 1) / kHostAlignment * kHostAlignment;
  if (posix_memalign(&pointer, kHostAlignment, rounded == 0 ? kHostAlignment : rounded) != 0) {
    throw SystemError("Tensor::empty: could not allocate " + std::to_string(bytes) + " bytes of host memory");
  }
  return std::shared_ptr<void>(pointer, [](void* p) { std::free(p); });
}
}  // namespace

TensorView::TensorView(void* data_, DType dtype_, std::initializer_list<int64_t> dims, Device device_,
                       int device_index_)
    : data(data_),
      dtype(dtype_),
      ndim(static_cast<int>(dims.size())),
      device(device_),
      device_index(device_index_) {
  if (dims.size() > static_cast<size_t>(kMaxTensorDims)) {
    throw InvalidArgument("TensorView: expected at most " + std::to_string(kMaxTensorDims) +
                          " dimensions, got " + std::to_string(dims.size()));
  }
  int i = 0;
  for (int64_t dim : dims) shape[i++] = dim;
}

int64_t TensorView::numel() const {
  int64_t count = 1;
  for (int i = 0; i < ndim; ++i) count *= shape[i];
  return ndim == 0 ? (data ? 1 : 0) : count;
}

std::string TensorView::describe() const {
  if (!defined()) return "undefined";
  // A caller's ndim outside the shape array is described, never followed into it.
  if (ndim < 0 || ndim > kMaxTensorDims) {
    return std::string(dtype_name(dtype)) + " with ndim " + std::to_string(ndim) + " (expected 0.." +
           std::to_string(kMaxTensorDims) + ")";
  }
  std::ostringstream out;
  out << dtype_name(dtype) << "[";
  for (int i = 0; i < ndim; ++i) out << (i ? ", " : "") << shape[i];
  out << "] on " << (device == Device::cpu ? "cpu" : "cuda:" + std::to_string(device_index));
  return out.str();
}

Tensor Tensor::empty(DType dtype, std::initializer_list<int64_t> dims, Device device, int device_index,
                     void* stream) {
  TensorView view(nullptr, dtype, dims, device, device_index);
  return empty_like_shape(dtype, view.shape, view.ndim, device, device_index, stream);
}

Tensor Tensor::empty_like_shape(DType dtype, const std::array<int64_t, kMaxTensorDims>& shape, int ndim,
                                Device device, int device_index, void* stream) {
  Tensor tensor;
  tensor.view_.dtype = dtype;
  tensor.view_.ndim = ndim;
  tensor.view_.shape = shape;
  tensor.view_.device = device;
  tensor.view_.device_index = device_index;
  for (int i = 0; i < ndim; ++i) {
    if (shape[i] < 0)
      throw InvalidArgument("Tensor::empty: expected non-negative dimensions, got " +
                            std::to_string(shape[i]));
  }
  // NOTES: checked, since a product that wrapped would allocate a few bytes for a huge tensor.
  size_t bytes = dtype_size(dtype);
  for (int i = 0; i < ndim; ++i) {
    if (__builtin_mul_overflow(bytes, static_cast<size_t>(shape[i]), &bytes)) {
      throw InvalidArgument("Tensor::empty: expected fewer than 2^64 bytes, got a dimension of " +
                            std::to_string(shape[i]) + " that overflows them");
    }
  }
  tensor.storage_ = device == Device::cpu ? allocate_host_bytes(bytes)
                                          : detail::allocate_cuda_bytes(bytes, device_index, stream);
  tensor.view_.data = tensor.storage_.get();
  return tensor;
}

Tensor Tensor::part_of(const Tensor& owner, size_t byte_offset, DType dtype,
                       std::initializer_list<int64_t> dims) {
  if (!owner.defined())
    throw InvalidArgument("Tensor::part_of: owner: expected a defined tensor, got undefined");
  TensorView view(nullptr, dtype, dims, owner.view_.device, owner.view_.device_index);
  for (int i = 0; i < view.ndim; ++i) {
    if (view.shape[i] < 0) {
      throw InvalidArgument("Tensor::part_of: dims: expected non-negative dimensions, got " +
                            std::to_string(view.shape[i]));
    }
  }
  size_t bytes = dtype_size(dtype);
  for (int i = 0; i < view.ndim; ++i) {
    // NOTES: checked, since a wrapped byte count would pass the bounds check below.
    if (__builtin_mul_overflow(bytes, static_cast<size_t>(view.shape[i]), &bytes)) {
      throw InvalidArgument("Tensor::part_of: dims: expected fewer than 2^64 bytes, got a dimension of " +
                            std::to_string(view.shape[i]) + " that overflows them");
    }
  }
  const size_t owner_bytes = owner.nbytes();
  if (byte_offset % dtype_size(dtype) != 0 || byte_offset > owner_bytes ||
      bytes > owner_bytes - byte_offset) {
    throw InvalidArgument("Tensor::part_of: expected " + std::to_string(bytes) + " bytes of " +
                          dtype_name(dtype) + " at a multiple of " + std::to_string(dtype_size(dtype)) +
                          " within the owner's " + std::to_string(owner_bytes) + " bytes, got offset " +
                          std::to_string(byte_offset));
  }
  Tensor tensor;
  tensor.storage_ = owner.storage_;
  tensor.view_ = view;
  tensor.view_.data = static_cast<uint8_t*>(owner.view_.data) + byte_offset;
  return tensor;
}

Tensor Tensor::borrow(const TensorView& view) {
  Tensor tensor;
  tensor.view_ = view;
  return tensor;
}

}  // namespace switchyard
