#pragma once
// The one place that knows where the library's tensors live. The check, the synthetic expert and
// the dump work on host tensors; on the CUDA backend the library takes and returns device tensors.
// CUDA copies and fills run on the rank's `stream` (ordered after the work that produced the tensor)
// and are complete when these functions return; nullptr means the legacy default stream.
// New device tensors go on the device of `stream` (the rank's, --devices); with nullptr, on the
// calling thread's current device.
#include <cstddef>
#include <initializer_list>

#include "switchyard/buffer.hpp"
#include "switchyard/tensor.hpp"

namespace switchyard::bench {

// The CUDA device `stream` belongs to (the current device for nullptr). Only on cuda.
int stream_device(Stream stream);

// A host copy of `tensor`. A host tensor is shared, not copied. Undefined stays undefined.
Tensor to_host(const TensorView& tensor, Stream stream);

// `host` placed where `backend` computes: shared as it is on cpu; a new device copy on cuda.
Tensor to_backend(const Tensor& host, Backend backend, Stream stream);

// Copies `from` (of either device) into `destination` (of either device, the same byte count), ordered
// on `stream`: how a rank fills a view it does not own, such as a Buffer's heap-resident tensors.
void copy_into(const TensorView& destination, const TensorView& from, Stream stream);

// Uninitialised storage where `backend` computes.
// CUDA memory is stream-ordered on `stream` (which must outlive it): freeing it never waits for the
// whole device, where other ranks' kernels may be waiting for this one.
Tensor allocate_on_backend(Backend backend, DType dtype, std::initializer_list<int64_t> dims, Stream stream);

// Fills a tensor of either device with workload::poison's pattern.
void poison_on_backend(const TensorView& tensor, Stream stream);

// The cache that inputs rotating between iterations must exceed so that each iteration reads them
// from memory: the L2 of the device of `stream` on cuda; 0 on cpu, where one input set serves every
// iteration.
size_t backend_cache_bytes(Backend backend, Stream stream);

// Input sets (copies of a rank's inputs at different addresses) to rotate through: the fewest whose
// total exceeds twice `cache_bytes`, at most kMaxInputSets; one without a cache.
constexpr size_t kMaxInputSets = 4;
int input_set_count(size_t set_bytes, size_t cache_bytes);

}  // namespace switchyard::bench
