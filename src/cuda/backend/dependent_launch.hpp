#pragma once
// Engine kernels launched as programmatic dependents of the stream's previous kernel (CUDA's programmatic
// dependent launch), where SWITCHYARD_DEPENDENT_LAUNCH=on: the driver sets the grid up while that kernel
// still runs, so the kernel's blocks start as soon as it ends instead of a launch's latency later (session
// 49, one H100, 128 tokens x 8 processes: symmetric 112 / 78 -> 105.5 / 73.8 us, low_latency 177 / 166 -> 174
// / 157, normal 178 / 182 -> 171 / 171). Every kernel launched so calls ptx::wait_for_previous_grid() before
// its first global access, which returns once the previous kernel has completed and its writes are visible:
// the results are what a plain launch gives. Where the previous stream operation is not a kernel (an event, a
// copy), the launch is an ordinary one. Off by default until compute-sanitizer is shown clean with it: under
// memcheck, a dispatch behind a kernel that triggers its dependents early read its inputs before they were
// written (bench/NOTES.md, session 49), which it never did without the tool. =off or unset: ordinary
// launches.
#include <cuda_runtime.h>

#include <utility>

#include "device/cuda_check.hpp"

namespace switchyard::cuda {

// SWITCHYARD_DEPENDENT_LAUNCH read now: on gives true, off (or unset or empty) false; anything else is
// refused naming the variable.
bool dependent_launch_from_environment();

// The process's choice, read at its first use (the CUDA backend reads it when a buffer is made, so a bad
// value is refused there) and kept.
bool dependent_launches();

// Launches `kernel` as a programmatic dependent where dependent_launches() allows, else as <<<...>>> would.
// The kernel must call ptx::wait_for_previous_grid() before touching global memory.
template <typename... Params, typename... Args>
void launch_dependent(void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared_bytes,
                      cudaStream_t stream, Args&&... args) {
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = dependent_launches() ? 1 : 0;
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = shared_bytes;
  config.stream = stream;
  config.attrs = &attribute;
  config.numAttrs = 1;
  SY_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...));
}

}  // namespace switchyard::cuda
