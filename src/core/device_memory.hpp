#pragma once
// Device allocations for Tensor::empty; implemented by the CUDA backend, or by a stub that throws
// Unsupported in builds without CUDA.
#include <cstddef>
#include <memory>

namespace switchyard::detail {

// `stream` (a cudaStream_t, may be null): see Tensor::empty.
std::shared_ptr<void> allocate_cuda_bytes(size_t bytes, int device_index, void* stream);
bool cuda_backend_available();

}  // namespace switchyard::detail
