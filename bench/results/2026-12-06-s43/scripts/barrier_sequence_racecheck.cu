// Session 43: which barrier sequence makes compute-sanitizer's racecheck report a write by warps 2-3, a
// __syncthreads, then a read by warp 0 (the symmetric row tables' reports)? Session 42's minimal kernel (a
// counted named barrier 1 of warps 2-3 before the __syncthreads) was clean, and the reports come only from
// the cases whose routing runs in every block: there the routing warps' named barrier 1 comes both before and
// after a grid sync (__syncthreads, then __syncthreads_and). Each variant (argv[1], 0-5) runs one block of
// 512 threads: the named-barrier / block-barrier sequence given below, then warps 0-3 write s[warp],
// __syncthreads, warp 0 reads s[0..3].
//   0: nothing before
//   1: bar1(2-3), bar0, bar.red.and, bar1(2-3)        (the routing in every block)
//   2: bar1(2-3), bar0, bar.red.and                   (no named barrier after the reduction)
//   3: bar1(2-3), bar0, bar0, bar1(2-3)                (a plain barrier in place of the reduction)
//   4: bar.red.and, bar1(2-3)                          (the reduction, then a named barrier)
//   5: bar1(2-3), bar.red.and, bar1(2-3), bar0, bar.red.and, bar0, bar0, bar0  (the kernel's sequence up to
//   the
//      tables)
#include <cstdio>
#include <cstdlib>
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
