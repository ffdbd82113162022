#include "cuda/device_tensors.hpp"

#include <stdexcept>
#include <string>

namespace switchyard::testing {

namespace {
void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(status));
}
}  // namespace

Tensor to_device(const TensorView& host, int device) {
  if (!host.defined()) return Tensor();
  Tensor tensor = Tensor::empty_like_shape(host.dtype, host.shape, host.ndim, Device::cuda, device);
  if (host.nbytes() > 0) check(cudaMemcpy(tensor.data(), host.data, host.nbytes(), cudaMemcpyHostToDevice), "to_device");
  return tensor;
}

Tensor to_host(const TensorView& device_tensor) {
  if (!device_tensor.defined()) return Tensor();
  Tensor tensor = Tensor::empty_like_shape(device_tensor.dtype, device_tensor.shape, device_tensor.ndim, Device::cpu, 0);
  check(cudaDeviceSynchronize(), "to_host sync");
  if (device_tensor.nbytes() > 0) {
    check(cudaMemcpy(tensor.data(), device_tensor.data, device_tensor.nbytes(), cudaMemcpyDeviceToHost), "to_host");
  }
  return tensor;
}

Tensor poisoned_device(DType dtype, std::initializer_list<int64_t> dims, int device) {
  Tensor tensor = Tensor::empty(dtype, dims, Device::cuda, device);
  if (tensor.nbytes() > 0) check(cudaMemset(tensor.data(), 0xA5, tensor.nbytes()), "poison");
  return tensor;
}

}  // namespace switchyard::testing
