#include "transfer.hpp"

#include "switchyard/errors.hpp"
#include "workload/workload.hpp"

namespace switchyard::bench {
namespace {

// NOTES: the CUDA seam. cudaMemcpy / cudaMemset go here once the bench is built with the CUDA
// backend; until then a CUDA tensor is refused with a clear message rather than read as host memory.
[[noreturn]] void cuda_not_wired(const char* what) {
  throw Unsupported(std::string("switchyard-bench: ") + what +
                    " for CUDA tensors is not implemented yet (tools/bench/transfer.cpp)");
}

}  // namespace

Tensor to_host(const TensorView& tensor) {
  if (!tensor.defined()) return Tensor();
  if (tensor.device == Device::cpu) return Tensor::borrow(tensor);
  cuda_not_wired("copying to the host");
}

Tensor to_backend(const Tensor& host, Backend backend) {
  if (!host.defined() || backend == Backend::cpu) return host;
  cuda_not_wired("copying to the device");
}

Tensor allocate_on_backend(Backend backend, DType dtype, std::initializer_list<int64_t> dims) {
  if (backend == Backend::cpu) return Tensor::empty(dtype, dims, Device::cpu);
  cuda_not_wired("allocating");
}

void poison_on_backend(const TensorView& tensor) {
  if (!tensor.defined()) return;
  if (tensor.device == Device::cpu) {
    workload::poison(tensor);
    return;
  }
  cuda_not_wired("poisoning");
}

}  // namespace switchyard::bench
