#pragma once
// Expert-major cases across nodes (ranks_per_node < num_ranks), shared by the CPU and CUDA suites of
// the low_latency engine across nodes: a case on a topology, run with the loopback transport's
// delays off and on, and the reference's outputs for it (which do not depend on the topology:
// DESIGN.md, "low_latency and symmetric interface: expert-major" and Nodes).
#include <cstdint>
#include <iosfwd>
#include <vector>

#include "support/expert_major_cases.hpp"
#include "switchyard/buffer.hpp"

namespace switchyard::testing::expert_major {

// A case (its ranks = nodes * ranks_per_node) on a topology of several nodes.
struct NodesCase {
  Case c;
  int ranks_per_node = 1;
  bool delays = false;  // the loopback transport's delays and reordering (support/loopback_delays.hpp)

  Topology topology() const { return Topology{c.ranks, ranks_per_node}; }
};

// GoogleTest prints a parameter by its case, topology and delays (each suite names it itself).
void PrintTo(const NodesCase& n, std::ostream* out);

// Every shape with the delays off, then every shape with them on.
std::vector<NodesCase> delays_off_and_on(const std::vector<NodesCase>& shapes);

// Every rank's inputs of `c` from `seed`, with the reference's outputs (the reference is run for
// `topology`, though its outputs do not depend on it).
Expected expected_on(const Case& c, const Topology& topology, uint64_t seed);

}  // namespace switchyard::testing::expert_major
