#include "cuda/device_tensors.hpp"

#include <stdexcept>
#include <string>

#include "device/pageable_copy.hpp"

namespace switchyard::testing {

namespace {
void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(status));
}
}  // namespace

Tensor to_device(const TensorView& host, int device, cudaStream_t stream) {
  if (!host.defined()) return Tensor();
  Tensor tensor = Tensor::empty_like_shape(host.dtype, host.shape, host.ndim, Device::cuda, device, stream);
  upload(tensor, host, stream);
  return tensor;
}

// Host tensors are pageable: cuda::copy_pageable waits for the stream outside the driver (see there).
void upload(const TensorView& device_tensor, const TensorView& host, cudaStream_t stream) {
  check(cuda::copy_pageable(device_tensor.data, host.data, host.nbytes(), cudaMemcpyHostToDevice, stream),
        "upload");
}

Tensor to_host(const TensorView& device_tensor, cudaStream_t stream) {
  if (!device_tensor.defined()) return Tensor();
  Tensor tensor =
      Tensor::empty_like_shape(device_tensor.dtype, device_tensor.shape, device_tensor.ndim, Device::cpu, 0);
  check(cuda::copy_pageable(tensor.data(), device_tensor.data, device_tensor.nbytes(), cudaMemcpyDeviceToHost,
                            stream),
        "to_host");
  return tensor;
}

Tensor poisoned_device(DType dtype, std::initializer_list<int64_t> dims, int device, cudaStream_t stream) {
  Tensor tensor = Tensor::empty(dtype, dims, Device::cuda, device, stream);
  if (tensor.nbytes() > 0) check(cudaMemsetAsync(tensor.data(), 0xA5, tensor.nbytes(), stream), "poison");
  check(cudaStreamSynchronize(stream), "poison sync");
  return tensor;
}

}  // namespace switchyard::testing
