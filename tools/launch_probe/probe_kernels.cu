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

// Where the resident consumer's kept values end up (never read): a real word, so that the store that keeps
// them live is always safe.
__device__ float resident_sink;

// The resident consumer: every block stays on its SM for `spin_ns` after block 0 noted the clock, as an
// engine's kernel does while it waits for its peers; kLive values are kept live through the spin so that the
// kernel holds about as many registers as the engines' (the symmetric dispatch: 116 a thread at 512 threads).
template <int kLive>
__global__ void __launch_bounds__(512, 1)
    resident_kernel(uint64_t* start_ns, size_t shared_bytes, uint64_t spin_ns, float seed) {
  extern __shared__ uint8_t shared[];
  const uint64_t begin = cuda::ptx::globaltimer_ns();
  if (blockIdx.x == 0 && threadIdx.x == 0) *start_ns = begin;
  if (threadIdx.x == 0 && shared_bytes > 0) shared[0] = 0;
  constexpr int kSlots = kLive > 0 ? kLive : 1;
  float live[kSlots];
#pragma unroll
  for (int i = 0; i < kLive; ++i) live[i] = seed * static_cast<float>(threadIdx.x + i);
  while (cuda::ptx::globaltimer_ns() - begin < spin_ns) {
#pragma unroll
    for (int i = 0; i < kLive; ++i) live[i] = fmaf(live[i], 1.0001f, live[(i + 1) % kSlots]);
  }
  float sum = 0;
#pragma unroll
  for (int i = 0; i < kLive; ++i) sum += live[i];
  if (kLive > 0 && sum == 12345.0f) resident_sink = sum;  // almost never true: keeps the values live
}

// The busy consumer: resident like the one above, but every thread streams 16-byte vectors from the first
// half of `buffer` to its second half until `spin_ns` have passed, as an engine's kernel loads and stores
// rows once it runs: whether the memory traffic of the ranks already started delays the launches of the ones
// after.
__global__ void __launch_bounds__(512, 1)
    busy_kernel(uint64_t* start_ns, size_t shared_bytes, uint64_t spin_ns, int4* buffer, size_t vectors) {
  extern __shared__ uint8_t shared[];
  const uint64_t begin = cuda::ptx::globaltimer_ns();
  if (blockIdx.x == 0 && threadIdx.x == 0) *start_ns = begin;
  if (threadIdx.x == 0 && shared_bytes > 0) shared[0] = 0;
  const size_t half = vectors / 2;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  size_t next = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  constexpr int kInFlight = 4;
  while (cuda::ptx::globaltimer_ns() - begin < spin_ns) {
    int4 values[kInFlight];
#pragma unroll
    for (int u = 0; u < kInFlight; ++u) values[u] = buffer[(next + u * stride) % half];
#pragma unroll
    for (int u = 0; u < kInFlight; ++u) buffer[half + (next + u * stride) % half] = values[u];
    next += kInFlight * stride;
  }
}

// The resident consumer with about as much code as the symmetric dispatch (19 K instructions, ~300 KB of
// SASS): kBigCodeFmas fused multiply-adds with distinct constants, straight-line. `run`: every thread
// executes them once after block 0 noted the clock (a cold instruction stream from the first microseconds, as
// the dispatch walks routing, barrier and table code once per call); else none does, and only the size is
// there.
constexpr int kBigCodeFmas = 16384;
__global__ void __launch_bounds__(512, 1)
    big_code_kernel(uint64_t* start_ns, size_t shared_bytes, uint64_t spin_ns, float seed, bool run) {
  extern __shared__ uint8_t shared[];
  const uint64_t begin = cuda::ptx::globaltimer_ns();
  if (blockIdx.x == 0 && threadIdx.x == 0) *start_ns = begin;
  if (threadIdx.x == 0 && shared_bytes > 0) shared[0] = 0;
  float value = seed * static_cast<float>(threadIdx.x);
  if (run) {
#pragma unroll
    for (int i = 0; i < kBigCodeFmas; ++i) {
      value = fmaf(value, 1.0f + static_cast<float>(i) * 1e-6f, static_cast<float>(i & 1023));
    }
  }
  while (cuda::ptx::globaltimer_ns() - begin < spin_ns) {
  }
  if (value == 12345.0f) resident_sink = value;  // almost never true: keeps the code
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
  for (const void* kernel :
       {reinterpret_cast<const void*>(resident_kernel<0>), reinterpret_cast<const void*>(resident_kernel<96>),
        reinterpret_cast<const void*>(busy_kernel), reinterpret_cast<const void*>(big_code_kernel)}) {
    const cudaError_t set = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                 static_cast<int>(shared_bytes));
    if (set != cudaSuccess) return set;
  }
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

cudaError_t launch_resident(uint64_t* start_ns, int blocks, int threads, size_t shared_bytes,
                            uint64_t spin_ns, bool many_registers, cudaStream_t stream) {
  if (many_registers) {
    resident_kernel<96><<<blocks, threads, shared_bytes, stream>>>(start_ns, shared_bytes, spin_ns, 1e-3f);
  } else {
    resident_kernel<0><<<blocks, threads, shared_bytes, stream>>>(start_ns, shared_bytes, spin_ns, 1e-3f);
  }
  return cudaGetLastError();
}

cudaError_t launch_busy(uint64_t* start_ns, int blocks, int threads, size_t shared_bytes, uint64_t spin_ns,
                        void* buffer, size_t buffer_bytes, cudaStream_t stream) {
  busy_kernel<<<blocks, threads, shared_bytes, stream>>>(
      start_ns, shared_bytes, spin_ns, static_cast<int4*>(buffer), buffer_bytes / sizeof(int4));
  return cudaGetLastError();
}

cudaError_t launch_big_code(uint64_t* start_ns, int blocks, int threads, size_t shared_bytes,
                            uint64_t spin_ns, bool run, cudaStream_t stream) {
  big_code_kernel<<<blocks, threads, shared_bytes, stream>>>(start_ns, shared_bytes, spin_ns, 1e-3f, run);
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
