#pragma once
// A copy between pageable host memory and the device, ordered on a stream, that never makes the driver
// wait for that stream.
//
// NOTES: cudaMemcpyAsync to or from pageable memory (plain malloc'd host memory) is synchronous: the
// driver first waits, inside the call, for the work already queued on the stream, then stages the bytes
// through its own pinned buffers. With ranks as threads of one process, a rank whose stream holds a
// kernel that spins waiting for peers then sits in the driver until those peers' kernels run, and the
// peers' threads were seen to stall in their own CUDA calls meanwhile (a pageable upload before their
// next dispatch): every rank waits until a bounded wait gives up (bench/NOTES.md, session 10: the GPU
// suites' order-dependent 10-15 s waits). Waiting for the stream first, in cudaStreamSynchronize, which
// holds nothing, leaves the copy nothing to wait for. Only for host memory that is not pinned; pinned
// copies stay asynchronous (the engines' own host copies use pinned memory).
#include <cuda_runtime.h>

#include <cstddef>

namespace switchyard::cuda {

// Copies `bytes` (host <-> device, `kind`) on `stream` after everything queued on it, and returns
// once the copy is done: the host memory may be reused right away. Returns the first error.
inline cudaError_t copy_pageable(void* destination, const void* source, size_t bytes, cudaMemcpyKind kind,
                                 cudaStream_t stream) {
  cudaError_t status = cudaStreamSynchronize(stream);
  if (status == cudaSuccess && bytes > 0) status = cudaMemcpyAsync(destination, source, bytes, kind, stream);
  if (status == cudaSuccess) status = cudaStreamSynchronize(stream);
  return status;
}

}  // namespace switchyard::cuda
