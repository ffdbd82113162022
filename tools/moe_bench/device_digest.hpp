#pragma once
// A digest of a device buffer, on the device: the tile sweep checks that every CUTLASS tile gives the
// m128 tile's bits without keeping a second copy of gigabytes of GEMM output.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace switchyard::moe_bench {

// The XOR over the buffer's 32-bit words of a 64-bit mix of (word, index): independent of the order the
// threads add it in, so the same bytes always give the same digest, and a changed word changes it (but
// for a 2^-64 chance). `bytes` a multiple of 4; on `stream`, which it synchronises.
uint64_t device_digest(const void* data, size_t bytes, cudaStream_t stream);

}  // namespace switchyard::moe_bench
