#pragma once
// Host <-> device copies for the GPU tests, ordered on the rank's stream. Nothing here synchronises
// the whole device: with ranks as threads on one GPU, a device-wide sync (cudaDeviceSynchronize,
// cudaFree, cudaMemset) waits for a peer's kernel that is waiting for this rank, a deadlock.
#include <cuda_runtime.h>

#include "switchyard/tensor.hpp"

namespace switchyard::testing {

// A device copy of a host tensor (undefined stays undefined); complete when this returns.
Tensor to_device(const TensorView& host, int device, cudaStream_t stream);
// A host copy of a device tensor (undefined stays undefined), after the work queued on `stream`.
Tensor to_host(const TensorView& device_tensor, cudaStream_t stream);
// A device tensor filled with the poison byte 0xA5.
Tensor poisoned_device(DType dtype, std::initializer_list<int64_t> dims, int device, cudaStream_t stream);
// Copies host bytes into an existing device tensor.
void upload(const TensorView& device_tensor, const TensorView& host, cudaStream_t stream);

}  // namespace switchyard::testing
