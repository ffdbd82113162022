#pragma once
// Ranks agreeing whether an optional row can be timed: every rank times it or none does, since a rank
// going on alone would wait for its peers until the timeout.
#include <string>
#include <vector>

#include "switchyard/group.hpp"

namespace switchyard::bench {

// Every rank passes its own failure ("" for none) and gets the same answer: "" when no rank failed,
// else "<what> on N of R ranks; rank r: <the lowest failing rank's failure>". A collective: every rank
// must call it.
inline std::string agree_on_failure(Group& group, const std::string& what, const std::string& mine) {
  const std::vector<Bytes> failures = group.allgather(Bytes(mine.begin(), mine.end()));
  int failed = 0, first = -1;
  for (int rank = 0; rank < static_cast<int>(failures.size()); ++rank) {
    if (failures[rank].empty()) continue;
    ++failed;
    if (first < 0) first = rank;
  }
  if (failed == 0) return "";
  const Bytes& message = failures[first];
  return what + " on " + std::to_string(failed) + " of " + std::to_string(failures.size()) + " ranks; rank " +
         std::to_string(first) + ": " + std::string(message.begin(), message.end());
}

}  // namespace switchyard::bench
