#pragma once
// Device allocations for Tensor::empty; implemented by the CUDA backend, or by a stub that throws
// Unsupported in builds without CUDA.
#include <cstddef>
#include <memory>

namespace switchyard::detail {

// `stream` (a cudaStream_t, may be null): see Tensor::empty.
std::shared_ptr<void> allocate_cuda_bytes(size_t bytes, int device_index, void* stream);
bool cuda_backend_available();
// `height` rows of `width` bytes from `source` (rows `source_pitch` bytes apart) to `destination` (rows
// `destination_pitch` apart), both device memory of `device_index`, on `stream` (a cudaStream_t; null: the
// legacy default stream), asynchronously.
void copy_cuda_rows(void* destination, size_t destination_pitch, const void* source, size_t source_pitch,
                    size_t width, size_t height, int device_index, void* stream);

}  // namespace switchyard::detail
