#pragma once
// Loads a kernel into the context before its first launch.
//
// NOTES: since CUDA 12.2 kernels load lazily (CUDA_MODULE_LOADING=LAZY is the default), on their first
// launch, and loading may synchronise the context. When ranks share a GPU (threads of one process) and
// one rank's kernel spins waiting for a peer, a peer's first launch of another kernel then waits for
// that spinning kernel: a deadlock that only the wait's timeout breaks. Every engine therefore loads
// all of its kernels once, up front, before any rank launches one; querying a kernel's attributes
// loads it.
#include <cuda_runtime.h>

#include "device/cuda_check.hpp"

namespace switchyard::cuda {

template <typename Kernel>
void preload_kernel(Kernel* kernel) {
  cudaFuncAttributes attributes{};
  SY_CUDA_CHECK(cudaFuncGetAttributes(&attributes, reinterpret_cast<const void*>(kernel)));
}

}  // namespace switchyard::cuda
