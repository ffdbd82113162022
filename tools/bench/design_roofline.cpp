#include "design_roofline.hpp"

namespace switchyard::bench {
namespace {

// The passes of an engine that stages every row once between source and destination: the sender
// reads x and writes the staging area, the receiver reads it and writes recv_x; combine mirrors it
// without the last write, and writes one output row per source token.
DesignTraffic staged(const Traffic& traffic) {
  DesignTraffic design;
  design.dispatch_bytes = traffic.delivered_rows * (traffic.input_row_bytes + 3 * traffic.dispatch_row_bytes);
  design.combine_bytes = traffic.delivered_rows * 3 * traffic.combine_row_bytes +
                         traffic.source_tokens * traffic.combine_row_bytes;
  design.passes = "dispatch 4 per row, combine 3 per row + the output";
  return design;
}

// The normal engine with its heap-resident inputs read in place (docs/normal-in-place.md): each receiver
// reads a source's row where the source wrote it and writes recv_x; each home reads its tokens' rows where
// the expert ranks wrote them and writes one output row per token.
// With `staged` inputs (--normal-heap staged) each call first copies its input into the heap: x once per
// source token (read and write), y once per received row.
DesignTraffic in_place(const Traffic& traffic, bool staged) {
  DesignTraffic design;
  design.dispatch_bytes = traffic.delivered_rows * (traffic.input_row_bytes + traffic.dispatch_row_bytes);
  design.combine_bytes =
      traffic.delivered_rows * traffic.combine_row_bytes + traffic.source_tokens * traffic.combine_row_bytes;
  design.passes =
      "in place: dispatch 2 per row (read x in place, write recv_x), combine 1 per row + the output";
  if (staged) {
    design.dispatch_bytes = *design.dispatch_bytes + traffic.source_tokens * 2 * traffic.input_row_bytes;
    design.combine_bytes = *design.combine_bytes + traffic.delivered_rows * 2 * traffic.combine_row_bytes;
    design.passes += "; staged: + 2 per source token (x into the heap), + 2 per row (y into the heap)";
  }
  return design;
}

// The hierarchical normal engine (cuda/internode/, and the CPU twin in cpu/internode/), per role. Every
// (token, destination node) pair, the token's own node included, goes through the RDMA sender and a put: the
// kernels have a sender group and a forwarder group per node, and the own node's put lands in the rank's own
// receive ring.
DesignTraffic hierarchical(const Traffic& traffic, const NodeTraffic& nodes) {
  const int64_t x = traffic.input_row_bytes, d = traffic.dispatch_row_bytes, c = traffic.combine_row_bytes;
  const int64_t rows = traffic.delivered_rows, staged = nodes.staged_rows();
  DesignTraffic design;
  // Per staged pair: the RDMA sender reads x and writes the send buffer (x + d); the put reads the
  // send buffer and writes the peer's receive ring (2d). Per row: the forwarder reads the receive
  // ring and writes the wanted rank's NVLink ring (2d, the read once per destination rank, as the
  // kernel issues it); the NVLink receiver reads the ring and writes recv_x (2d).
  design.dispatch_bytes = staged * (x + 3 * d) + rows * 4 * d;
  // Per row: the NVLink sender reads y and writes the forwarder's ring (2c); the forwarder's
  // reduction reads it (c). Per staged pair: the reduction writes one bf16 partial into the send
  // buffer (c), the put reads and writes it (2c), the RDMA receiver reads it (c). Per source token:
  // the output write (c).
  design.combine_bytes = rows * 3 * c + staged * 4 * c + traffic.source_tokens * c;
  design.passes =
      "dispatch 4 per (token, node) (stage, put) + 4 per row (forward, receive), combine 3 per row (send, "
      "the "
      "reduction's read) + 4 per (token, node) (partial, put, the final read) + the output; nodes include "
      "the "
      "token's own";
  return design;
}

// low_latency across nodes (low_latency_dispatch.cu, low_latency_combine.cu): one node's passes, and
// the extra ones of rows that leave the node as puts from this rank's heap.
DesignTraffic direct_across_nodes(const Traffic& traffic, const DirectNodeTraffic& nodes) {
  const int64_t d = traffic.dispatch_row_bytes, c = traffic.combine_row_bytes;
  DesignTraffic design = staged(traffic);
  // The put reads the send area (d per RDMA row, its write is the one-node slot write); each leaving
  // token is staged once from shared memory into the send area (d).
  *design.dispatch_bytes += nodes.rdma_rows * d + nodes.leaving_tokens * d;
  // The bench combines without zero_copy: y is copied into the combine buffer (2c), which the put
  // reads (c; its write is the one-node write into the home's buffer).
  *design.combine_bytes += nodes.rdma_rows * 2 * c;
  design.passes =
      "dispatch 4 per row + 1 per RDMA row (the put's read) + 1 per token leaving the node (staged), combine "
      "3 "
      "per row + 2 per RDMA row (y into the combine buffer; no zero_copy) + the output";
  return design;
}

// The symmetric dispatch's bytes by its source (Buffer::symmetric_dispatch_path; unset: publish).
void symmetric_dispatch_design(const Traffic& traffic, std::optional<SymmetricDispatch> source,
                               DesignTraffic& design) {
  // bf16 rows: the dispatch row is the caller's x row (fp8 rows are about half of it, with scales, and
  // always published).
  const bool bf16 = traffic.dispatch_row_bytes == traffic.input_row_bytes;
  if (source == SymmetricDispatch::push) {
    // Each source reads its token once and writes every row of it (bf16 as it is, fp8 cast in registers).
    design.dispatch_bytes =
        traffic.source_tokens * traffic.input_row_bytes + traffic.delivered_rows * traffic.dispatch_row_bytes;
    design.passes = "dispatch push, 1 per source token (read x) + 1 per row (write recv_x), combine ";
    return;
  }
  if (source == SymmetricDispatch::zero_copy && bf16) {
    // Each receiver reads the source's x row in place once per row, and writes recv_x.
    design.dispatch_bytes = traffic.delivered_rows * (traffic.input_row_bytes + traffic.dispatch_row_bytes);
    design.passes = "dispatch zero_copy, 2 per row (read x in place, write recv_x), combine ";
    return;
  }
  design.dispatch_bytes = traffic.source_tokens * (traffic.input_row_bytes + traffic.dispatch_row_bytes) +
                          traffic.delivered_rows * 2 * traffic.dispatch_row_bytes;
  design.passes =
      "dispatch publish, 2 per source token (copy into the input buffer) + 2 per row (pull), combine ";
}

}  // namespace

DesignTraffic design_traffic(BenchEngine engine, const Traffic& traffic, bool single_node,
                             std::optional<SymmetricCombine> symmetric_combine,
                             std::optional<SymmetricDispatch> symmetric_dispatch, bool normal_rows_in_place,
                             bool normal_inputs_staged) {
  DesignTraffic design;
  switch (engine) {
    case BenchEngine::normal:
      if (single_node && normal_rows_in_place) return in_place(traffic, normal_inputs_staged);
      if (single_node) return staged(traffic);
      if (!traffic.nodes) {
        design.why_not = "not counted across nodes (the rows by link were not counted)";
        return design;
      }
      return hierarchical(traffic, *traffic.nodes);
    case BenchEngine::low_latency:
      if (single_node) return staged(traffic);
      if (!traffic.direct_nodes) {
        design.why_not = "not counted across nodes (the rows by link were not counted)";
        return design;
      }
      return direct_across_nodes(traffic, *traffic.direct_nodes);
    case BenchEngine::symmetric:
      if (!single_node) {
        design.why_not = "not counted across nodes (the symmetric engine runs on one node only)";
        return design;
      }
      symmetric_dispatch_design(traffic, symmetric_dispatch, design);
      if (!symmetric_combine) {
        design.passes += "not counted (no Buffer reported its path)";
        return design;
      }
      if (*symmetric_combine == SymmetricCombine::pull) {
        // Each home reads every row of its tokens once, from the expert's y in place.
        design.combine_bytes = traffic.delivered_rows * traffic.combine_row_bytes +
                               traffic.source_tokens * traffic.combine_row_bytes;
        design.passes += "pull, 1 per row (the home reads y in place) + the output";
      } else {
        design.combine_bytes = traffic.delivered_rows * 3 * traffic.combine_row_bytes +
                               traffic.source_tokens * traffic.combine_row_bytes;
        design.passes +=
            "push, 3 per row (read y, write the home's buffer, the reduction's read) + the output";
      }
      return design;
    case BenchEngine::nccl:
      design.why_not =
          "not counted (NCCL's send/recv stages rows through its own buffers by a protocol it picks at run "
          "time)";
      return design;
  }
  design.why_not = "not counted";
  return design;
}

}  // namespace switchyard::bench
