#pragma once
// Device allocations for Tensor::empty; implemented by the CUDA backend, or by a stub that throws
// Unsupported in builds without CUDA.
#include <cstddef>
#include <memory>

namespace switchyard::detail {

std::shared_ptr<void> allocate_cuda_bytes(size_t bytes, int device_index);
bool cuda_backend_available();

}  // namespace switchyard::detail
