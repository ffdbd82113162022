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

}  // namespace

DesignTraffic design_traffic(BenchEngine engine, const Traffic& traffic, bool single_node) {
  DesignTraffic design;
  switch (engine) {
    case BenchEngine::normal:
      if (!single_node) {
        design.why_not =
            "not counted across nodes (the internode path's RDMA and forwarding stages are not modelled)";
        return design;
      }
      return staged(traffic);
    case BenchEngine::low_latency:
      return staged(traffic);
    case BenchEngine::symmetric:
      design.dispatch_bytes = traffic.source_tokens * (traffic.input_row_bytes + traffic.dispatch_row_bytes) +
                              traffic.delivered_rows * 2 * traffic.dispatch_row_bytes;
      design.combine_bytes = traffic.delivered_rows * 3 * traffic.combine_row_bytes +
                             traffic.source_tokens * traffic.combine_row_bytes;
      design.passes =
          "dispatch 2 per source token (publish) + 2 per row (pull), combine 3 per row + the output";
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
