#pragma once
#include <string>

namespace switchyard {

// R ranks in nodes of ranks_per_node; a node is one load/store (NVLink) domain.
struct Topology {
  int num_ranks = 1;
  int ranks_per_node = 1;

  int num_nodes() const { return ranks_per_node > 0 ? num_ranks / ranks_per_node : 0; }
  int node_of(int rank) const { return rank / ranks_per_node; }
  bool is_single_node() const { return ranks_per_node == num_ranks; }
  // Throws InvalidArgument unless 1 <= ranks_per_node <= num_ranks and ranks_per_node | num_ranks.
  void validate() const;
  std::string to_string() const;

  static Topology single_node(int num_ranks) { return Topology{num_ranks, num_ranks}; }
};

inline bool operator==(const Topology& a, const Topology& b) {
  return a.num_ranks == b.num_ranks && a.ranks_per_node == b.ranks_per_node;
}
inline bool operator!=(const Topology& a, const Topology& b) {
  return !(a == b);
}

}  // namespace switchyard
