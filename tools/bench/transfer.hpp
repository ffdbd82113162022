#pragma once
// The one place that knows where the library's tensors live. The check, the synthetic expert and
// the dump work on host tensors; on the CUDA backend the library takes and returns device tensors.
#include <initializer_list>

#include "switchyard/buffer.hpp"
#include "switchyard/tensor.hpp"

namespace switchyard::bench {

// A host copy of `tensor`. A host tensor is shared, not copied. Undefined stays undefined.
Tensor to_host(const TensorView& tensor);

// `host` placed where `backend` computes: shared as it is on cpu.
Tensor to_backend(const Tensor& host, Backend backend);

// Uninitialised storage where `backend` computes.
Tensor allocate_on_backend(Backend backend, DType dtype, std::initializer_list<int64_t> dims);

// Fills a tensor of either device with workload::poison's pattern.
void poison_on_backend(const TensorView& tensor);

}  // namespace switchyard::bench
