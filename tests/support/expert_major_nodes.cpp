#include "support/expert_major_nodes.hpp"

#include <ostream>

#include "workload/workload.hpp"

namespace switchyard::testing::expert_major {

void PrintTo(const NodesCase& n, std::ostream* out) {
  *out << n.c.name << " (" << n.topology().to_string() << ", loopback delays " << (n.delays ? "on" : "off")
       << ")";
}

std::vector<NodesCase> delays_off_and_on(const std::vector<NodesCase>& shapes) {
  std::vector<NodesCase> cases;
  for (bool delays : {false, true}) {
    for (NodesCase n : shapes) {
      n.delays = delays;
      cases.push_back(n);
    }
  }
  return cases;
}

Expected expected_on(const Case& c, const Topology& topology, uint64_t seed) {
  workload::Shape shape = shape_of(c);
  shape.topology = topology;
  return expected_from(workload::generate(shape, seed), c.num_experts, topology, c.max_tokens, c.fp8);
}

}  // namespace switchyard::testing::expert_major
