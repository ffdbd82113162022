#pragma once
// Tensors cross the API as non-owning views; the library returns owning `Tensor`s for outputs it
// allocates. Both are plain row-major (contiguous) arrays.
#include <array>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>

#include "switchyard/dtype.hpp"

namespace switchyard {

enum class Device : uint8_t { cpu, cuda };

constexpr int kMaxTensorDims = 4;

struct TensorView {
  void* data = nullptr;
  DType dtype = DType::bf16;
  int ndim = 0;
  std::array<int64_t, kMaxTensorDims> shape{};
  Device device = Device::cpu;
  int device_index = 0;

  TensorView() = default;
  TensorView(void* data, DType dtype, std::initializer_list<int64_t> dims, Device device = Device::cpu,
             int device_index = 0);

  bool defined() const { return data != nullptr || ndim > 0; }
  int64_t size(int dim) const { return shape[dim]; }
  int64_t numel() const;
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype); }
  // e.g. "bf16[4096, 7168] on cpu"
  std::string describe() const;

  template <typename T>
  T* as() const {
    return static_cast<T*>(data);
  }
};

// An owning, reference-counted tensor. Copies share storage.
class Tensor {
 public:
  Tensor() = default;
  // Allocates uninitialised storage: host memory for Device::cpu, device memory for Device::cuda.
  // With a `stream` (cudaStream_t), CUDA memory is stream-ordered (cudaMallocAsync, freed with
  // cudaFreeAsync on that stream, which must outlive the tensor): neither allocation nor free
  // synchronises the device, which matters when ranks that spin-wait on each other share a GPU.
  // During a graph capture on `stream` the allocation is a plain, persistent one.
  static Tensor empty(DType dtype, std::initializer_list<int64_t> dims, Device device = Device::cpu,
                      int device_index = 0, void* stream = nullptr);
  static Tensor empty_like_shape(DType dtype, const std::array<int64_t, kMaxTensorDims>& shape, int ndim,
                                 Device device, int device_index, void* stream = nullptr);
  // Wraps external storage without taking ownership.
  static Tensor borrow(const TensorView& view);
  // A tensor of `dtype` and `dims` at `byte_offset` into `owner`'s storage, sharing it: the memory
  // lives while any of them does. Several small tensors carved from one allocation cost one
  // allocation (per call, stream-ordered allocations of ranks as threads serialise on the driver).
  // Throws InvalidArgument unless `owner` is defined and the part lies within it, aligned to its dtype.
  static Tensor part_of(const Tensor& owner, size_t byte_offset, DType dtype,
                        std::initializer_list<int64_t> dims);

  const TensorView& view() const { return view_; }
  operator const TensorView&() const { return view_; }
  void* data() const { return view_.data; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(view_.data);
  }
  bool defined() const { return view_.defined(); }
  int64_t size(int dim) const { return view_.shape[dim]; }
  int64_t numel() const { return view_.numel(); }
  size_t nbytes() const { return view_.nbytes(); }
  DType dtype() const { return view_.dtype; }

 private:
  std::shared_ptr<void> storage_;
  TensorView view_;
};

}  // namespace switchyard
