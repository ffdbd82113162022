#include "nccl_communicator.hpp"

#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>
#include <stdexcept>
#include <thread>
#include <vector>

#include "cuda_check.hpp"
#include "switchyard/errors.hpp"

namespace switchyard::bench {
namespace {

std::string seconds_text(double seconds) {
  char text[32];
  std::snprintf(text, sizeof(text), "%g", seconds);
  return text;
}

}  // namespace

NcclCommunicator::NcclCommunicator(Group& group, double timeout_seconds)
    : rank_(group.rank()), size_(group.size()), timeout_seconds_(timeout_seconds) {
  // Rank 0 makes the id; the group's allgather carries it to every rank, as a framework's store or
  // MPI broadcast would.
  Bytes mine;
  if (rank_ == 0) {
    ncclUniqueId id;
    check(ncclGetUniqueId(&id), "ncclGetUniqueId");
    const uint8_t* bytes = reinterpret_cast<const uint8_t*>(&id);
    mine.assign(bytes, bytes + sizeof(id));
  }
  const std::vector<Bytes> all = group.allgather(mine);
  if (all.at(0).size() != sizeof(ncclUniqueId)) {
    throw std::logic_error("switchyard-bench: nccl rank " + std::to_string(rank_) + ": expected a " +
                           std::to_string(sizeof(ncclUniqueId)) + "-byte unique id from rank 0, got " +
                           std::to_string(all.at(0).size()) + " bytes");
  }
  ncclUniqueId id;
  std::memcpy(&id, all[0].data(), sizeof(id));
  check(ncclCommInitRank(&comm_, size_, id, rank_), "ncclCommInitRank");
}

NcclCommunicator::~NcclCommunicator() {
  if (!comm_) return;
  // NOTES: a destroy flushes the communicator and synchronises with its peers; after a failure, or
  // while an exception unwinds this rank, a peer may never get there: abort, which is local.
  if (failed_ || std::uncaught_exceptions() > 0) {
    ncclCommAbort(comm_);
  } else {
    ncclCommDestroy(comm_);
  }
}

void NcclCommunicator::fail_with(const std::string& message, bool timed_out) {
  failed_ = true;
  const std::string text = "switchyard-bench: nccl rank " + std::to_string(rank_) + ": " + message;
  if (timed_out) throw TimeoutError(text);
  throw SystemError(text);
}

void NcclCommunicator::check(ncclResult_t result, const std::string& what) {
  if (result == ncclSuccess) return;
  std::string detail = ncclGetErrorString(result);
  const char* last = ncclGetLastError(comm_);
  if (last && *last) detail += ": " + std::string(last);
  fail_with(what + " failed: " + detail, false);
}

void NcclCommunicator::wait(cudaStream_t stream, const std::string& what) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_seconds_);
  for (;;) {
    const cudaError_t status = cudaStreamQuery(stream);
    if (status == cudaSuccess) return;
    if (status != cudaErrorNotReady) {
      fail_with(
          "waiting for " + what + ": " + cudaGetErrorName(status) + " (" + cudaGetErrorString(status) + ")",
          false);
    }
    ncclResult_t async_error = ncclSuccess;
    check(ncclCommGetAsyncError(comm_, &async_error), "ncclCommGetAsyncError");
    if (async_error != ncclSuccess && async_error != ncclInProgress) {
      check(async_error, "waiting for " + what);
    }
    if (std::chrono::steady_clock::now() > deadline) {
      // Ends this rank's NCCL kernels, so that the stream (and the process) can finish; the peers
      // time out the same way.
      ncclCommAbort(comm_);
      comm_ = nullptr;
      fail_with("timed out after " + seconds_text(timeout_seconds_) + " s (--timeout) waiting for " + what +
                    ": a peer did not send or receive; the communicator was aborted",
                true);
    }
    // NOTES: a yield, not a sleep: this wait lies inside the timed dispatch (the counts), where a
    // sleep's granularity would show up in the measured time.
    std::this_thread::yield();
  }
}

std::string nccl_runtime_version() {
  int version = 0;
  if (ncclGetVersion(&version) != ncclSuccess) return "unknown";
  // Since NCCL 2.9: major * 10000 + minor * 100 + patch.
  return std::to_string(version / 10000) + "." + std::to_string(version / 100 % 100) + "." +
         std::to_string(version % 100);
}

}  // namespace switchyard::bench
