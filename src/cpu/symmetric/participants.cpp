#include "cpu/symmetric/participants.hpp"

namespace switchyard::cpu {

std::string waiting_for(const common::SymHeap& heap, const std::string& operation,
                        const std::vector<int>& missing, const char* what) {
  std::string ranks;
  for (int rank : missing) ranks += (ranks.empty() ? "" : ", ") + std::to_string(rank);
  return "rank " + std::to_string(heap.rank) + " (cpu " + operation + ") waiting for rank(s) " + ranks +
         " to " + what;
}

}  // namespace switchyard::cpu
