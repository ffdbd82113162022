#include "core/plan_context.hpp"

#include <string>

#include "switchyard/errors.hpp"

namespace switchyard::detail {

void check_num_experts(int num_experts, int num_ranks) {
  if (num_experts < 1 || num_experts > kMaxExperts || num_experts % num_ranks != 0) {
    throw InvalidArgument("num_experts: expected a positive multiple of num_ranks (" +
                          std::to_string(num_ranks) + ") up to " + std::to_string(kMaxExperts) + ", got " +
                          std::to_string(num_experts));
  }
}

void check_sizing(const BufferSizing& sizing) {
  if (sizing.hidden < 1 || sizing.hidden > kMaxHidden) {
    throw InvalidArgument("sizing.hidden: expected 1.." + std::to_string(kMaxHidden) + ", got " +
                          std::to_string(sizing.hidden));
  }
  if (sizing.topk < 1 || sizing.topk > kMaxTopk) {
    throw InvalidArgument("sizing.topk: expected 1.." + std::to_string(kMaxTopk) + ", got " +
                          std::to_string(sizing.topk));
  }
  if (sizing.num_experts < 1 || sizing.num_experts > kMaxExperts) {
    throw InvalidArgument("sizing.num_experts: expected 1.." + std::to_string(kMaxExperts) + ", got " +
                          std::to_string(sizing.num_experts));
  }
}

void check_topk(int64_t topk) {
  if (topk < 1 || topk > kMaxTopk) {
    throw InvalidArgument("topk_idx: expected 1.." + std::to_string(kMaxTopk) + " columns (k), got " +
                          std::to_string(topk));
  }
}

}  // namespace switchyard::detail
