#include "core/expert_capacity.hpp"

namespace switchyard::detail {

std::string expert_capacity_message(int64_t capacity, int64_t expert, int expert_rank, int64_t rows) {
  return "expert_capacity: expected at most " + std::to_string(capacity) + " rows per local expert, got " +
         std::to_string(rows) + " for expert " + std::to_string(expert) + " (on rank " +
         std::to_string(expert_rank) + "); rows at and past " + std::to_string(capacity) +
         " were not written, recv_count and layout_range hold the true counts";
}

}  // namespace switchyard::detail
