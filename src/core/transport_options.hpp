#pragma once
// The checks of BufferOptions::transport that need no backend (the backends refuse what they cannot
// run: cpu/backend, cuda/backend).
#include "switchyard/buffer.hpp"

namespace switchyard::detail {

// InvalidArgument naming the field: an unknown kind, a loopback delay above
// TransportOptions::kMaxLoopbackDelayMicroseconds, loopback knobs with nccl_gin, nccl_gin without a
// communicator, or a communicator with loopback.
void check_transport_options(const TransportOptions& transport);

}  // namespace switchyard::detail
