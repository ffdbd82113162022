#include "core/transport_options.hpp"

#include <string>

#include "switchyard/errors.hpp"

namespace switchyard::detail {

void check_transport_options(const TransportOptions& transport) {
  switch (transport.kind) {
    case TransportKind::loopback:
      if (transport.nccl_comm != nullptr) {
        throw InvalidArgument(
            "transport.nccl_comm: expected none with transport.kind loopback (a communicator is for "
            "nccl_gin), "
            "got one");
      }
      if (transport.loopback_max_delay_us &&
          *transport.loopback_max_delay_us > TransportOptions::kMaxLoopbackDelayMicroseconds) {
        throw InvalidArgument("transport.loopback_max_delay_us: expected 0.." +
                              std::to_string(TransportOptions::kMaxLoopbackDelayMicroseconds) + ", got " +
                              std::to_string(*transport.loopback_max_delay_us));
      }
      return;
    case TransportKind::nccl_gin:
      if (transport.loopback_max_delay_us || transport.loopback_seed) {
        throw InvalidArgument(
            "transport.loopback_max_delay_us / loopback_seed: expected them unset with transport.kind "
            "nccl_gin "
            "(they tune the loopback transport), got them set");
      }
      if (transport.nccl_comm == nullptr) {
        throw InvalidArgument(
            "transport.nccl_comm: expected the caller's ncclComm_t over every rank with transport.kind "
            "nccl_gin, "
            "got null");
      }
      return;
  }
  throw InvalidArgument("transport.kind: expected loopback or nccl_gin, got " +
                        std::to_string(static_cast<int>(transport.kind)));
}

}  // namespace switchyard::detail
