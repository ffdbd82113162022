// Session 49, for the next GPU call: does compute-sanitizer honour griddepcontrol.wait behind a kernel that
// triggers its dependents early? Outside the library: a writer kernel triggers at its start, sleeps, then
// writes `kWords` words; a reader launched with programmatic stream serialization waits (griddepcontrol.wait)
// and sums them. Prints the sum and whether it matches. Run plain, then under `compute-sanitizer --tool
// memcheck`.
//   nvcc -arch=sm_90a -o pdl_repro pdl_sanitizer_repro.cu && ./pdl_repro && compute-sanitizer ./pdl_repro
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>

constexpr int kWords = 1 << 16;

__global__ void late_writer(uint32_t* words, uint64_t delay_ns) {
  asm volatile("griddepcontrol.launch_dependents;");
  uint64_t begin = 0, now = 0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(begin));
  do {
    __nanosleep(1000);
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - begin < delay_ns);
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < kWords; i += gridDim.x * blockDim.x) words[i] = 1;
}

__global__ void waiting_reader(const uint32_t* words, unsigned long long* sum) {
  asm volatile("griddepcontrol.wait;" ::: "memory");
  unsigned long long mine = 0;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < kWords; i += gridDim.x * blockDim.x)
    mine += words[i];
  atomicAdd(sum, mine);
}

int main() {
  uint32_t* words = nullptr;
  unsigned long long* sum = nullptr;
  cudaStream_t stream = nullptr;
  cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  cudaMalloc(&words, kWords * sizeof(uint32_t));
  cudaMallocManaged(&sum, sizeof(*sum));
  int failures = 0;
  for (int round = 0; round < 5; ++round) {
    cudaMemsetAsync(words, 0, kWords * sizeof(uint32_t), stream);
    *sum = 0;
    late_writer<<<8, 256, 0, stream>>>(words, 300'000);
    cudaLaunchAttribute attribute{};
    attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attribute.val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t config{};
    config.gridDim = dim3(8);
    config.blockDim = dim3(256);
    config.stream = stream;
    config.attrs = &attribute;
    config.numAttrs = 1;
    const cudaError_t launched =
        cudaLaunchKernelEx(&config, waiting_reader, static_cast<const uint32_t*>(words), sum);
    const cudaError_t done = cudaStreamSynchronize(stream);
    std::printf("round %d: launch %s, sync %s, sum %llu of %d%s\n", round, cudaGetErrorName(launched),
                cudaGetErrorName(done), *sum, kWords,
                *sum == kWords ? "" : "  <-- read before the writer finished");
    failures += *sum != kWords;
  }
  return failures == 0 ? 0 : 1;
}
