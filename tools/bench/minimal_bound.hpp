#pragma once
// The minimal bound: the least time a phase can take on this machine, a true lower bound. Every input
// byte is read once and every output byte written once, in each device's memory, in the engine's own
// output layout; the rows between ranks on different GPUs also cross a link once. Both over the copy
// bandwidths measured in the same run, and the larger of the two, since they use different resources.
//   dispatch memory bytes = routed tokens x x row (each token with a destination read once)
//                         + rows x dispatch row (each delivered row written once)
//   combine memory bytes  = rows x combine row (each expert output row read once)
//                         + tokens x combine row (each output row written once)
// Rows are the engine's: (token, destination rank) for normal and nccl, (token, expert) for the
// expert-major engines. Only row payloads count: metadata would only raise the bound, and a bound
// that leaves something out stays a lower bound. A measured time below it is a bench bug.
#include <cstdint>
#include <optional>

#include "copy_bandwidth.hpp"
#include "problem.hpp"

namespace switchyard::bench {

struct MinimalBytes {
  int64_t dispatch = 0, combine = 0;  // bytes read + written in device memory, all ranks
};

MinimalBytes minimal_bytes(const Traffic& traffic);

// max(memory bytes / local copy bandwidth, remote bytes / peer copy bandwidth); absent without the
// bandwidths it needs.
std::optional<double> minimal_seconds(int64_t memory_bytes, int64_t remote_bytes, const CopyBandwidth& copy);

}  // namespace switchyard::bench
