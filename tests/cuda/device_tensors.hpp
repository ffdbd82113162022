#pragma once
// Host <-> device copies for the GPU tests: inputs go up, outputs come down to be compared with the
// reference on the host.
#include <cuda_runtime.h>

#include "switchyard/tensor.hpp"

namespace switchyard::testing {

// A device copy of a host tensor (undefined stays undefined).
Tensor to_device(const TensorView& host, int device);
// A host copy of a device tensor (undefined stays undefined). Synchronises the device.
Tensor to_host(const TensorView& device_tensor);
// A device tensor filled with the poison byte 0xA5.
Tensor poisoned_device(DType dtype, std::initializer_list<int64_t> dims, int device);

}  // namespace switchyard::testing
