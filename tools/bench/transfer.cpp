#include "transfer.hpp"

#include <algorithm>
#include <cstring>
#include <string>

#include "cuda_check.hpp"
#if defined(SWITCHYARD_WITH_CUDA)
#include "device/pageable_copy.hpp"
#endif
#include "switchyard/errors.hpp"
#include "workload/workload.hpp"

namespace switchyard::bench {
namespace {

#if defined(SWITCHYARD_WITH_CUDA)
// workload::poison's byte (tools/workload/workload.cpp), so that both devices poison alike.
constexpr int kPoisonByte = 0xA5;
#else
// A build without CUDA never makes a CUDA tensor; refuse one clearly rather than read it as host memory.
[[noreturn]] void cuda_not_built(const char* what) {
  throw Unsupported(std::string("switchyard-bench: ") + what +
                    " needs a build with the CUDA backend (SWITCHYARD_CUDA=ON)");
}
#endif

}  // namespace

int stream_device(Stream stream) {
#if defined(SWITCHYARD_WITH_CUDA)
  int device = 0;
#if CUDART_VERSION >= 12080
  if (stream) {
    check_cuda(cudaStreamGetDevice(cuda_stream(stream), &device), "cudaStreamGetDevice (a rank's stream)");
    return device;
  }
#endif
  // Older runtimes: the rank's thread made its device current (RankStream).
  check_cuda(cudaGetDevice(&device), "cudaGetDevice");
  return device;
#else
  (void)stream;
  cuda_not_built("the device of a CUDA stream");
#endif
}

int input_set_count(size_t set_bytes, size_t cache_bytes) {
  if (cache_bytes == 0 || set_bytes == 0) return 1;
  return static_cast<int>(std::min(2 * cache_bytes / set_bytes + 1, kMaxInputSets));
}

Tensor to_host(const TensorView& tensor, Stream stream) {
  if (!tensor.defined()) return Tensor();
  if (tensor.device == Device::cpu) return Tensor::borrow(tensor);
#if defined(SWITCHYARD_WITH_CUDA)
  Tensor host = Tensor::empty_like_shape(tensor.dtype, tensor.shape, tensor.ndim, Device::cpu, 0);
  if (tensor.nbytes() > 0) {
    const cudaStream_t cuda = cuda_stream(stream);
    // Pageable host memory: cuda::copy_pageable waits for the stream outside the driver (see there).
    check_cuda(cuda::copy_pageable(host.data(), tensor.data, tensor.nbytes(), cudaMemcpyDeviceToHost, cuda),
               "copying " + tensor.describe() + " to the host");
  }
  return host;
#else
  (void)stream;
  cuda_not_built("copying a CUDA tensor to the host");
#endif
}

void copy_into(const TensorView& destination, const TensorView& from, Stream stream) {
  if (destination.nbytes() != from.nbytes()) {
    throw InvalidArgument("switchyard-bench: copy_into: expected " + destination.describe() + " and " +
                          from.describe() + " to have the same bytes");
  }
  if (from.nbytes() == 0) return;
  if (destination.device == Device::cpu && from.device == Device::cpu) {
    std::memcpy(destination.data, from.data, from.nbytes());
    return;
  }
#if defined(SWITCHYARD_WITH_CUDA)
  check_cuda(
      cudaMemcpyAsync(destination.data, from.data, from.nbytes(), cudaMemcpyDefault, cuda_stream(stream)),
      "cudaMemcpyAsync into " + destination.describe());
#else
  (void)stream;
  cuda_not_built("copying into a CUDA tensor");
#endif
}

Tensor to_backend(const Tensor& host, Backend backend, Stream stream) {
  if (!host.defined() || backend == Backend::cpu) return host;
#if defined(SWITCHYARD_WITH_CUDA)
  const TensorView& view = host.view();
  if (view.device != Device::cpu) {
    throw InvalidArgument("switchyard-bench: to_backend expects a host tensor, got " + view.describe());
  }
  Tensor device = Tensor::empty_like_shape(view.dtype, view.shape, view.ndim, Device::cuda,
                                           stream_device(stream), stream);
  if (view.nbytes() > 0) {
    const cudaStream_t cuda = cuda_stream(stream);
    // Pageable host memory, which must outlive the copy: cuda::copy_pageable waits for both (see there).
    check_cuda(cuda::copy_pageable(device.data(), view.data, view.nbytes(), cudaMemcpyHostToDevice, cuda),
               "copying " + view.describe() + " to the device");
  }
  return device;
#else
  (void)stream;
  cuda_not_built("copying to a CUDA device");
#endif
}

Tensor allocate_on_backend(Backend backend, DType dtype, std::initializer_list<int64_t> dims, Stream stream) {
  if (backend == Backend::cpu) return Tensor::empty(dtype, dims, Device::cpu);
#if defined(SWITCHYARD_WITH_CUDA)
  return Tensor::empty(dtype, dims, Device::cuda, stream_device(stream), stream);
#else
  (void)stream;
  cuda_not_built("allocating a CUDA tensor");
#endif
}

void poison_on_backend(const TensorView& tensor, Stream stream) {
  if (!tensor.defined()) return;
  if (tensor.device == Device::cpu) {
    workload::poison(tensor);
    return;
  }
#if defined(SWITCHYARD_WITH_CUDA)
  if (tensor.data == nullptr || tensor.nbytes() == 0) return;
  const cudaStream_t cuda = cuda_stream(stream);
  check_cuda(cudaMemsetAsync(tensor.data, kPoisonByte, tensor.nbytes(), cuda),
             "cudaMemsetAsync poisoning " + tensor.describe());
  check_cuda(cudaStreamSynchronize(cuda), "cudaStreamSynchronize after poisoning " + tensor.describe());
#else
  (void)stream;
  cuda_not_built("poisoning a CUDA tensor");
#endif
}

size_t backend_cache_bytes(Backend backend, Stream stream) {
  if (backend == Backend::cpu) return 0;
#if defined(SWITCHYARD_WITH_CUDA)
  int l2_bytes = 0;
  const int device = stream_device(stream);
  check_cuda(cudaDeviceGetAttribute(&l2_bytes, cudaDevAttrL2CacheSize, device),
             "cudaDeviceGetAttribute(L2 cache size of GPU " + std::to_string(device) + ")");
  return l2_bytes > 0 ? static_cast<size_t>(l2_bytes) : 0;
#else
  (void)stream;
  cuda_not_built("the L2 size of a CUDA device");
#endif
}

}  // namespace switchyard::bench
