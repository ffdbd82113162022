#pragma once
// One rank's NCCL communicator for the nccl baseline, as a framework holds it: one per rank (here, one
// per rank thread, each on its own GPU), blocking (PyTorch's default), made from a unique id that
// rank 0 creates and the caller's allgather shares. Every host wait on the rank's stream is bounded:
// on a timeout the communicator is aborted, which ends its kernels, and the wait throws.
// Only in builds with NCCL (SWITCHYARD_BENCH_WITH_NCCL).
#include <cuda_runtime.h>
#include <nccl.h>

#include <string>

#include "switchyard/group.hpp"

namespace switchyard::bench {

class NcclCommunicator {
 public:
  // Collective over `group` (every rank calls it): the calling thread's current device must be the
  // rank's GPU, and no two ranks may share one (NCCL refuses that). Throws SystemError naming the rank
  // when NCCL fails.
  NcclCommunicator(Group& group, double timeout_seconds);
  // ncclCommDestroy; ncclCommAbort instead after a failure, or while an exception unwinds (a peer may
  // never arrive for the destroy's last synchronisation).
  ~NcclCommunicator();
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  ncclComm_t get() const { return comm_; }
  int rank() const { return rank_; }
  int size() const { return size_; }

  // Throws SystemError naming the rank, `what` and NCCL's own words when `result` is not success.
  void check(ncclResult_t result, const std::string& what);
  // Waits until `stream` has run everything queued on it, at most the timeout: polls the stream and
  // NCCL's asynchronous error. A CUDA or NCCL error throws SystemError; the deadline aborts the
  // communicator and throws TimeoutError naming the rank and `what` it waited for.
  void wait(cudaStream_t stream, const std::string& what);

 private:
  [[noreturn]] void fail_with(const std::string& message, bool timed_out);
  ncclComm_t comm_ = nullptr;
  int rank_ = 0;
  int size_ = 0;
  double timeout_seconds_ = 0;
  bool failed_ = false;
};

// "2.28.9": the NCCL the process loaded (ncclGetVersion).
std::string nccl_runtime_version();

}  // namespace switchyard::bench
