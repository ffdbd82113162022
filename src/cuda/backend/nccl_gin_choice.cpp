#include "cuda/backend/nccl_gin_choice.hpp"

#include <cuda_runtime.h>

#include <cstddef>
#include <string>

#include "device/cuda_check.hpp"
#include "switchyard/errors.hpp"
#include "transport/nccl_gin.hpp"

namespace switchyard::cuda {

namespace {
// NOTES: the probe's window; NCCL rounds it up to its alignment.
constexpr size_t kProbeHeapBytes = size_t{1} << 21;
}  // namespace

void refuse_nccl_gin(const TransportOptions& transport, int device) {
  if (!transport::NcclGinTransport::compiled_in()) {
    throw Unsupported("transport.kind: nccl_gin is not in this build of switchyard (" +
                      transport::NcclGinTransport::compiled_out_reason() +
                      "); configure with NCCL >= 2.28 and its device API, or use loopback");
  }
  SY_CUDA_CHECK(cudaSetDevice(device));
  {
    transport::NcclGinOptions options;
    options.num_contexts = 1;
    options.num_signals = 1;
    // Throws Unsupported with NCCL's reason where GIN cannot run (no IB or RoCE NIC with GPU-initiated
    // networking); destroyed collectively, as every rank reaches this point alike.
    const transport::NcclGinTransport probe(transport.nccl_comm, kProbeHeapBytes, options);
  }
  throw Unsupported(
      "transport.kind: nccl_gin runs on this machine (NCCL's GIN probe passed), but switchyard's engines "
      "launch "
      "their kernels for the loopback transport only so far (src/cuda/internode, src/cuda/low_latency); use "
      "loopback");
}

}  // namespace switchyard::cuda
