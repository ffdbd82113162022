#pragma once
// The stream one rank's calls run on. On cuda each rank owns a non-blocking stream on its device
// (--devices), so that all ranks' kernels run concurrently (they spin-wait on each other, also when
// they share a GPU) and none is ordered behind the legacy default stream. On cpu there is none
// (nullptr).
#include "switchyard/buffer.hpp"

namespace switchyard::bench {

class RankStream {
 public:
  // On cuda, also makes `device` current on the calling thread (the rank's thread). Throws
  // SystemError when a CUDA call fails, Unsupported for cuda in a build without the CUDA backend.
  RankStream(Backend backend, int device);
  // Destroys the stream; work still queued on it completes first (cudaStreamDestroy does not wait).
  ~RankStream();
  RankStream(const RankStream&) = delete;
  RankStream& operator=(const RankStream&) = delete;

  Stream get() const { return stream_; }

 private:
  Stream stream_ = nullptr;
};

}  // namespace switchyard::bench
