#pragma once
// The design roofline: the bytes each engine's design must move through memory per phase, all ranks
// together, next to the minimal bound's one read of every input and one write of every output
// (minimal_bound.hpp). The minimal bound says how far an engine is from the hardware; the design roofline
// says how far it is from what its own protocol allows, so the two fractions separate "the design moves too
// much" from "the kernels move it slowly". Counted on the host from the run's Traffic (rows, source
// tokens, row sizes, and across nodes the rows by link); --help and README.md list each engine's
// passes. Row payloads only: ring and slot metadata (ids, weights, source fields, signals) are left
// out.
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

// `traffic` is the engine's own (engine_traffic); `single_node`: ranks_per_node == ranks. Below, rows
// are delivered rows, tokens the source tokens, x / d / c the x row, dispatch row and combine row.
//   normal, low_latency on one node: dispatch = rows x (x + 3d): the sender reads x and writes the
//     ring (or the receive slot), the receiver reads it and writes recv_x; combine = rows x 3c (the
//     sender reads y and writes the ring or the home's receive buffer, the receiver reads it) +
//     tokens x c (the output write).
//   normal across nodes (the hierarchy; staged = (token, destination node) pairs, the own node
//     included, which also goes through the RDMA path as a put to itself): dispatch = staged x
//     (x + 3d) (the RDMA sender reads x and writes the send buffer, the put reads it and writes the
//     peer's receive ring) + rows x 4d (the forwarder reads the receive ring and writes each wanted
//     rank's NVLink ring, the NVLink receiver reads it and writes recv_x); combine = rows x 3c (the
//     NVLink sender reads y and writes the forwarder's ring, the forwarder's reduction reads it) +
//     staged x 4c (the reduction writes one bf16 partial per node, the put reads and writes it, the
//     RDMA receiver reads it) + tokens x c (the output).
//   low_latency across nodes: as on one node, and a row to another node is a put from this rank's
//     heap, which adds passes: dispatch + RDMA rows x d (the put reads the send area) + leaving
//     tokens x d (each staged once into the send area, from shared memory); combine + RDMA rows x
//     2c (without zero_copy, as the bench calls it, y is first copied into the combine buffer).
//   symmetric: dispatch by the source that ran (Buffer::symmetric_dispatch_path): publish = tokens x
//     (x + d) (publish, once per token, not per row) + rows x 2d (the pull: read the source's input
//     buffer, write recv_x); zero_copy with bf16 rows = rows x (x + d) (the pull reads the caller's x
//     in place and writes recv_x); push = tokens x x + rows x d (each source reads its token once and
//     writes its rows: CUDA under auto, bf16 or fp8); fp8 pulls publish. Combine by the path
//     that ran (Buffer::symmetric_combine_path): push = rows x 3c (push and the reduction's read) + tokens x
//     c (the output); pull = rows x c (each home reads the expert's y once) + tokens x c. One node only (the
//     library refuses more).
//   nccl: not counted (NCCL's send/recv stages rows through its own buffers by a protocol it picks
//     at run time).
// `symmetric_combine`: the symmetric engine's combine path as its Buffer reported it (push or pull);
// unset for the other engines, or when no Buffer connected (the combine is then not counted).
// `symmetric_dispatch`: its dispatch source likewise (publish, zero_copy or push); unset counts the publish.
// `normal_rows_in_place`: the normal engine reads x and y in place from its heap-resident inputs
// (--normal-heap on, on a backend that does: docs/normal-in-place.md): dispatch rows x (x + d) (each receiver
// reads the source's row in place and writes recv_x; the routing-only ring messages are not counted), combine
// rows x c (each home reads the expert's row in place) + tokens x c. `normal_inputs_staged` (--normal-heap
// staged): each call first copies its input into the heap, dispatch + tokens x 2x, combine + rows x 2c.
DesignTraffic design_traffic(BenchEngine engine, const Traffic& traffic, bool single_node,
                             std::optional<SymmetricCombine> symmetric_combine,
                             std::optional<SymmetricDispatch> symmetric_dispatch = std::nullopt,
                             bool normal_rows_in_place = false, bool normal_inputs_staged = false);

}  // namespace switchyard::bench
