#pragma once
// BufferOptions::transport = nccl_gin on the CUDA backend: whether GIN runs here, asked of NCCL itself.
#include "switchyard/buffer.hpp"

namespace switchyard::cuda {

// Always throws Unsupported, before the Buffer allocates anything: with NCCL's reason where this build or
// this machine has no GIN (a probe transport over `transport.nccl_comm`, collective: every rank builds its
// Buffer, so every rank probes), else because the engines' kernels are built for the loopback transport
// only so far. `device`: the rank's GPU.
[[noreturn]] void refuse_nccl_gin(const TransportOptions& transport, int device);

}  // namespace switchyard::cuda
