#include "rank_stream.hpp"

#include <string>

#include "cuda_check.hpp"
#include "switchyard/errors.hpp"

namespace switchyard::bench {

RankStream::RankStream(Backend backend, int device) {
  if (backend == Backend::cpu) return;
#if defined(SWITCHYARD_WITH_CUDA)
  check_cuda(cudaSetDevice(device), "cudaSetDevice(" + std::to_string(device) + ") on a rank's thread");
  cudaStream_t stream = nullptr;
  check_cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
             "cudaStreamCreateWithFlags (a rank's non-blocking stream)");
  stream_ = stream;
#else
  (void)device;
  throw Unsupported("switchyard-bench: a rank's CUDA stream needs a build with the CUDA backend");
#endif
}

RankStream::~RankStream() {
#if defined(SWITCHYARD_WITH_CUDA)
  if (stream_) cudaStreamDestroy(cuda_stream(stream_));
#endif
}

}  // namespace switchyard::bench
