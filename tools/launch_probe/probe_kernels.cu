#include "common/atomics.hpp"
#include "device/ptx.cuh"
#include "probe_kernels.hpp"

namespace switchyard::launch_probe {

namespace {

__global__ void signal_kernel(Mailbox mailbox, int32_t sample, uint64_t spin_ns) {
  if (threadIdx.x != 0) return;
  const uint64_t begin = cuda::ptx::globaltimer_ns();
  while (cuda::ptx::globaltimer_ns() - begin < spin_ns) {
  }
  *mailbox.end_ns = cuda::ptx::globaltimer_ns();
  __threadfence_system();
  // As the notify posts its counts (common/posted_counts.hpp): a generic release store at system scope.
  common::st_release_sys(const_cast<int32_t*>(mailbox.flag), sample);
}

__global__ void stamp_kernel(uint64_t* start_ns, size_t shared_bytes) {
  extern __shared__ uint8_t shared[];
  if (blockIdx.x == 0 && threadIdx.x == 0) *start_ns = cuda::ptx::globaltimer_ns();
  // Touch the shared memory, where there is some, so that it is really asked for.
  if (threadIdx.x == 0 && shared_bytes > 0) shared[0] = 0;
}

struct BigParams {
  uint64_t words[kBigParamBytes / sizeof(uint64_t)];
};

__global__ void stamp_big_params_kernel(uint64_t* start_ns, size_t shared_bytes,
                                        const __grid_constant__ BigParams params) {
  extern __shared__ uint8_t shared[];
  if (blockIdx.x == 0 && threadIdx.x == 0)
    *start_ns = cuda::ptx::globaltimer_ns() + (params.words[threadIdx.x] & 0);
  if (threadIdx.x == 0 && shared_bytes > 0) shared[0] = 0;
}

__global__ void filler_kernel(uint64_t spin_ns) {
  const uint64_t begin = cuda::ptx::globaltimer_ns();
  while (cuda::ptx::globaltimer_ns() - begin < spin_ns) {
  }
}

__global__ void catch_kernel(volatile const int32_t* flag, int32_t value, uint64_t* seen_ns,
                             uint64_t limit_ns) {
  const uint64_t begin = cuda::ptx::globaltimer_ns();
  uint64_t now = begin;
  while (*flag != value && now - begin < limit_ns) now = cuda::ptx::globaltimer_ns();
  *seen_ns = cuda::ptx::globaltimer_ns();
}

}  // namespace

cudaError_t launch_signal(Mailbox mailbox, int32_t sample, uint64_t spin_ns, cudaStream_t stream) {
  signal_kernel<<<1, 32, 0, stream>>>(mailbox, sample, spin_ns);
  return cudaGetLastError();
}

cudaError_t allow_stamp_shared(size_t shared_bytes) {
  const cudaError_t small = cudaFuncSetAttribute(stamp_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                 static_cast<int>(shared_bytes));
  if (small != cudaSuccess) return small;
  return cudaFuncSetAttribute(stamp_big_params_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                              static_cast<int>(shared_bytes));
}

cudaError_t launch_stamp_big_params(uint64_t* start_ns, int blocks, int threads, size_t shared_bytes,
                                    cudaStream_t stream) {
  BigParams params{};
  for (size_t i = 0; i < kBigParamBytes / sizeof(uint64_t); ++i) params.words[i] = i;
  stamp_big_params_kernel<<<blocks, threads, shared_bytes, stream>>>(start_ns, shared_bytes, params);
  return cudaGetLastError();
}

cudaError_t launch_stamp(uint64_t* start_ns, int blocks, int threads, size_t shared_bytes,
                         cudaStream_t stream) {
  stamp_kernel<<<blocks, threads, shared_bytes, stream>>>(start_ns, shared_bytes);
  return cudaGetLastError();
}

cudaError_t launch_filler(int blocks, int carveout_percent, cudaStream_t stream) {
  const cudaError_t set =
      cudaFuncSetAttribute(filler_kernel, cudaFuncAttributePreferredSharedMemoryCarveout, carveout_percent);
  if (set != cudaSuccess) return set;
  filler_kernel<<<blocks, 1024, 0, stream>>>(20'000);
  return cudaGetLastError();
}

cudaError_t launch_catch(volatile const int32_t* flag, int32_t value, uint64_t* seen_ns, uint64_t limit_ns,
                         cudaStream_t stream) {
  catch_kernel<<<1, 1, 0, stream>>>(flag, value, seen_ns, limit_ns);
  return cudaGetLastError();
}

}  // namespace switchyard::launch_probe
