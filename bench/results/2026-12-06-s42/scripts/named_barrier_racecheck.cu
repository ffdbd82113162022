// Does compute-sanitizer's racecheck see a __syncthreads between warps that earlier took part in a named
// barrier with a thread count (bar.sync 1, N) and warps that did not? Session 42's symmetric-table reports
// all have a routing warp (named barrier 1) on one side. Variant A: warps 2-3 sync on barrier 1 first;
// variant B: no named barrier. Both then: warps 0-3 write s[warp], __syncthreads, warp 0 lane i reads s[i].
#include <cstdio>
#include <cstdlib>
__global__ void probe(int use_named, int* out) {
  __shared__ int s[32];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (use_named && (warp == 2 || warp == 3)) asm volatile("bar.sync 1, 64;" ::: "memory");
  __syncthreads();
  if (warp < 4 && lane == 0) s[warp] = warp + 1;
  __syncthreads();
  if (warp == 0 && lane < 4) out[lane] = s[lane];
}
int main(int argc, char** argv) {
  int* out;
  cudaMalloc(&out, 4 * sizeof(int));
  const int named = argc > 1 ? std::atoi(argv[1]) : 0;
  {
    probe<<<1, 512>>>(named, out);
    int host[4];
    cudaMemcpy(host, out, sizeof(host), cudaMemcpyDeviceToHost);
    std::printf("named barrier %s: %d %d %d %d (%s)\n", named ? "before" : "none", host[0], host[1], host[2],
                host[3], cudaGetErrorString(cudaGetLastError()));
  }
  return 0;
}
