#include "device/cuda_check.hpp"
#include "device_digest.hpp"

namespace switchyard::moe_bench {

namespace {

// splitmix64's finaliser: every input bit reaches every output bit.
__device__ __forceinline__ uint64_t mix(uint64_t value) {
  value ^= value >> 30;
  value *= 0xbf58476d1ce4e5b9ull;
  value ^= value >> 27;
  value *= 0x94d049bb133111ebull;
  return value ^ (value >> 31);
}

__global__ void digest_words(const uint32_t* words, size_t count, unsigned long long* digest) {
  uint64_t mine = 0;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    mine ^= mix((static_cast<uint64_t>(i) << 32) ^ words[i]);
  }
  // XOR is associative and commutative: the digest does not depend on the order of these.
  if (mine != 0) atomicXor(digest, static_cast<unsigned long long>(mine));
}

}  // namespace

uint64_t device_digest(const void* data, size_t bytes, cudaStream_t stream) {
  unsigned long long* digest = nullptr;
  SY_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&digest), sizeof(*digest), stream));
  SY_CUDA_CHECK(cudaMemsetAsync(digest, 0, sizeof(*digest), stream));
  digest_words<<<1024, 256, 0, stream>>>(static_cast<const uint32_t*>(data), bytes / 4, digest);
  SY_CUDA_CHECK_LAUNCH();
  unsigned long long host = 0;
  SY_CUDA_CHECK(cudaMemcpyAsync(&host, digest, sizeof(host), cudaMemcpyDeviceToHost, stream));
  SY_CUDA_CHECK(cudaFreeAsync(digest, stream));
  SY_CUDA_CHECK(cudaStreamSynchronize(stream));
  return host;
}

}  // namespace switchyard::moe_bench
