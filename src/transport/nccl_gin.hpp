#pragma once
// `nccl_gin`: the device transport (device_transport.cuh) on NCCL's device API (NCCL >= 2.28), for
// real clusters. Host setup, collective over the caller's NCCL communicator:
//   - the heap is allocated with ncclMemAlloc and registered as one symmetric window
//     (ncclCommWindowRegister, NCCL_WIN_COLL_SYMMETRIC), so a heap offset names the same object on
//     every rank, for puts (GIN) and for load/store within the node (LSA pointers);
//   - an ncclDevComm with GIN contexts and the signals the engine asks for (ncclDevCommCreate).
// Kernels receive NcclGinDevice by value; WarpSession<NcclGinDevice> (nccl_gin.cuh) maps the
// session's operations onto ncclGin put / put with ncclGin_SignalAdd / signal / flush.
//
// GIN needs an IB or RoCE NIC with GPU-initiated networking; without one, construction throws
// Unsupported with NCCL's reason. When NCCL or its device API was absent at configure time, this
// compiles out and construction throws Unsupported saying so (compiled_out_reason()).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#if SWITCHYARD_WITH_NCCL_GIN
#include <cuda_runtime.h>
#include <nccl.h>
#include <nccl_device.h>
#endif

namespace switchyard::transport {

struct NcclGinOptions {
  int num_contexts = 4;  // a hint: NCCL may create fewer (NcclGinDevice::comm.ginContextCount)
  int num_signals = 0;   // the engine's signal ids are [0, num_signals)
};

#if SWITCHYARD_WITH_NCCL_GIN
// The kernel argument.
struct NcclGinDevice {
  ncclDevComm comm;
  ncclWindow_t window;  // the heap
  // Where this transport's signals start among the communicator's GIN signals: an engine that runs several
  // transports over one communicator (the hierarchical engine's RDMA counters and its barrier words)
  // gives each its own range; signal i of the session is GIN signal first_signal + i.
  uint32_t first_signal = 0;
};
#endif

class NcclGinTransport {
 public:
  // Whether this build has NCCL's device API; if not, why not (empty when it has).
  static bool compiled_in();
  static std::string compiled_out_reason();

  // Collective: every rank of `nccl_comm` constructs it with the same sizes. `nccl_comm` is the
  // caller's ncclComm_t (the library never creates one: that needs the caller's bootstrap), passed
  // untyped so that this header does not need nccl.h. The heap starts zeroed.
  NcclGinTransport(void* nccl_comm, size_t heap_bytes, const NcclGinOptions& options);
  // Collective as well (window deregistration).
  ~NcclGinTransport();
  NcclGinTransport(const NcclGinTransport&) = delete;
  NcclGinTransport& operator=(const NcclGinTransport&) = delete;

  uint8_t* heap_base() const;
  size_t heap_bytes() const;  // rounded up to NCCL's window alignment
  int rank() const;
  int num_ranks() const;
  int lsa_size() const;  // ranks that share this rank's load/store domain (its node)
  int num_contexts() const;
#if SWITCHYARD_WITH_NCCL_GIN
  const NcclGinDevice& device() const;
#endif

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace switchyard::transport
