#pragma once
// The stream one rank's calls run on. On cuda each rank owns a non-blocking stream on kCudaDevice, so
// that all ranks' kernels run concurrently (they spin-wait on each other) and none is ordered behind
// the legacy default stream. On cpu there is none (nullptr).
#include "switchyard/buffer.hpp"

namespace switchyard::bench {

class RankStream {
 public:
  // On cuda, also makes kCudaDevice current on the calling thread (the rank's thread). Throws
  // SystemError when a CUDA call fails, Unsupported for cuda in a build without the CUDA backend.
  explicit RankStream(Backend backend);
  // Destroys the stream; work still queued on it completes first (cudaStreamDestroy does not wait).
  ~RankStream();
  RankStream(const RankStream&) = delete;
  RankStream& operator=(const RankStream&) = delete;

  Stream get() const { return stream_; }

 private:
  Stream stream_ = nullptr;
};

}  // namespace switchyard::bench
