// Session 43: which pattern makes compute-sanitizer's racecheck report a write by warps 2-3, a __syncthreads,
// then a read by warp 0, as it reports RowTables::build in the symmetric dispatch (28 of its 31 one-rank
// cases)? Session 42's minimal kernel (a counted named barrier 1 of warps 2-3 before the __syncthreads) was
// clean. The dispatch's routing warps take named barrier 1 on both sides of a grid sync (__syncthreads, then
// __syncthreads_and), and the reported write is a store inside the build's warp scan (shuffles). Each variant
// (argv[1]) runs one block of 512 threads: the sequence given, then warps 0-3 write s[warp], __syncthreads,
// warp 0 reads s[0..3] (variants 0-5), or the build's two scans (6-7).
//   0: nothing before
//   1: bar1(2-3), bar0, bar.red.and, bar1(2-3)
//   2: bar1(2-3), bar0, bar.red.and
//   3: bar1(2-3), bar0, bar0, bar1(2-3)
//   4: bar.red.and, bar1(2-3)
//   5: bar1(2-3), bar.red.and, bar1(2-3), bar0, bar.red.and, bar0, bar0, bar0 (the kernel's, up to the
//   tables) 6: nothing before, then RowTables::build's two warp scans (device/warp_scan.cuh) at one rank and
//   8 local
//      experts: warp l writes begin[l], warp 0 reads them all
//   7: variant 5's sequence, then variant 6's scans
// Measured (s43 c3, H100): variants 3 and 5 reported (4 RAW hazards, warps 2-3's writes against warp 0's
// reads, though every thread reaches every __syncthreads: a false report); 0, 1, 2, 4, 6 and 7 clean.
#include <cstdio>
#include <cstdlib>

#include "device/warp_scan.cuh"

__device__ __forceinline__ void named(int warp) {
  if (warp == 2 || warp == 3) asm volatile("bar.sync 1, 64;" ::: "memory");
}
__global__ void probe(int variant, int* out) {
  extern __shared__ int s[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  int ok = 1;
  switch (variant) {
    case 1:
      named(warp);
      __syncthreads();
      ok = __syncthreads_and(ok);
      named(warp);
      break;
    case 2:
      named(warp);
      __syncthreads();
      ok = __syncthreads_and(ok);
      break;
    case 3:
      named(warp);
      __syncthreads();
      __syncthreads();
      named(warp);
      break;
    case 4:
      ok = __syncthreads_and(ok);
      named(warp);
      break;
    case 5:
      named(warp);
      ok = __syncthreads_and(ok);
      named(warp);
      __syncthreads();
      ok = __syncthreads_and(ok);
      __syncthreads();
      __syncthreads();
      __syncthreads();
      break;
    default:
      break;
  }
  if (variant >= 6) {
    if (variant == 7) {
      named(warp);
      ok = __syncthreads_and(ok);
      named(warp);
      __syncthreads();
      ok = __syncthreads_and(ok);
      __syncthreads();
      __syncthreads();
      __syncthreads();
    }
    // RowTables::build at one rank and 8 local experts: count, begin and start carved from s.
    constexpr int kExperts = 8;
    int* count = s;
    int* begin = s + kExperts;
    int* start = s + 2 * kExperts;
    if (threadIdx.x < kExperts) count[threadIdx.x] = static_cast<int>(threadIdx.x) + ok;
    __syncthreads();
    for (int l = warp; l < kExperts; l += blockDim.x / 32) {
      switchyard::cuda::warp_exclusive_scan(
          1, [&](int) { return count[l]; }, [&](int, int before) { begin[l] = before; });
    }
    __syncthreads();
    if (warp == 0) {
      const int rows = switchyard::cuda::warp_exclusive_scan(
          kExperts, [&](int l) { return count[l] - begin[l]; },
          [&](int l, int before) { start[l] = before; });
      if (lane < 4) out[lane] = rows + start[lane];
    }
    return;
  }
  __syncthreads();
  if (warp < 4 && lane == 0) s[warp] = warp + ok;
  __syncthreads();
  if (warp == 0 && lane < 4) out[lane] = s[lane];
}
int main(int argc, char** argv) {
  int* out;
  cudaMalloc(&out, 4 * sizeof(int));
  const int variant = argc > 1 ? std::atoi(argv[1]) : 0;
  probe<<<1, 512, 1024>>>(variant, out);
  int host[4];
  cudaMemcpy(host, out, sizeof(host), cudaMemcpyDeviceToHost);
  std::printf("variant %d: %d %d %d %d (%s)\n", variant, host[0], host[1], host[2], host[3],
              cudaGetErrorString(cudaGetLastError()));
  return 0;
}
