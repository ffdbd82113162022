#include "core/plan_context.hpp"

#include <string>

#include "switchyard/errors.hpp"

namespace switchyard::detail {

void check_num_experts(int num_experts, int num_ranks) {
  if (num_experts < 1 || num_experts % num_ranks != 0) {
    throw InvalidArgument("num_experts: expected a positive multiple of num_ranks (" + std::to_string(num_ranks) +
                          "), got " + std::to_string(num_experts));
  }
}

void check_topk(int64_t topk) {
  if (topk < 1 || topk > kMaxTopk) {
    throw InvalidArgument("topk_idx: expected 1.." + std::to_string(kMaxTopk) + " columns (k), got " +
                          std::to_string(topk));
  }
}

}  // namespace switchyard::detail
