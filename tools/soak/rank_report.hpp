#pragma once
// What one rank reports of a case: the outputs that differ from the reference, and whether it
// flipped the self-test's bit. Text lines, so that a rank process can send it through a pipe.
#include <string>
#include <vector>

#include "switchyard/tensor.hpp"

namespace switchyard::soak {

struct RankReport {
  std::vector<std::string> mismatches;  // "round R: rank N <output>: <first difference>"
  bool corrupted = false;

  // Appends `lines`, each prefixed with the round.
  void add_round(int round, const std::vector<std::string>& lines);
  std::string serialize() const;
  static RankReport deserialize(const std::string& text);
};

// --self-test-corrupt: flips the lowest bit of a host tensor's first byte, after the engine wrote
// it and before it is compared, so that the comparison must catch it. False when the tensor is
// empty (nothing to flip).
bool flip_one_bit(const TensorView& host);

}  // namespace switchyard::soak
