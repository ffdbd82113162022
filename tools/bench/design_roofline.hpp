#pragma once
// The design roofline: the bytes each engine's design must move through memory per phase, all ranks
// together, next to the minimal roofline's one read and one write per delivered row (metrics.hpp).
// The minimal roofline says how far an engine is from the hardware; the design roofline says how far
// it is from what its own protocol allows, so the two fractions separate "the design moves too
// much" from "the kernels move it slowly". Counted on the host from the run's Traffic (rows, source
// tokens, row sizes); --help and README.md list each engine's passes.
#include <cstdint>
#include <optional>
#include <string>

#include "options.hpp"
#include "problem.hpp"

namespace switchyard::bench {

struct DesignTraffic {
  // Absent when the bench cannot count the engine's passes; `why_not` says why.
  std::optional<int64_t> dispatch_bytes, combine_bytes;
  std::string passes;   // what was counted, for the output ("4 per row", ...)
  std::string why_not;  // empty when counted
};

// `traffic` is the engine's own (engine_traffic); `single_node`: ranks_per_node == ranks.
//   normal, low_latency: dispatch = rows x (x row read + 3 x dispatch row): the sender reads x and
//     writes the ring (or the receive slot), the receiver reads it and writes recv_x; combine = rows
//     x 3 x combine row (the sender reads y and writes the ring or the home's receive buffer, the
//     receiver reads it) + source tokens x combine row (the output write).
//   symmetric: dispatch = source tokens x (x row read + dispatch row write) (publish, once per token,
//     not per row) + rows x 2 x dispatch row (the pull: read the source's input buffer, write
//     recv_x); combine = rows x 2 x combine row (the push) + rows x combine row (the reduction's
//     read) + source tokens x combine row (the output).
//   nccl: not counted (NCCL's send/recv stages rows through its own buffers by a protocol it picks
//     at run time). normal across nodes: not counted (its forwarding stages are not modelled).
DesignTraffic design_traffic(BenchEngine engine, const Traffic& traffic, bool single_node);

}  // namespace switchyard::bench
