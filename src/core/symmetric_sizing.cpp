#include "core/symmetric_sizing.hpp"

#include <algorithm>

#include "common/fp8_cast.hpp"
#include "core/plan_context.hpp"

namespace switchyard::detail {

common::SymmetricToken symmetric_token(int hidden, bool use_fp8, int topk) {
  common::SymmetricToken token{};
  token.row_bytes = static_cast<uint32_t>(hidden) * (use_fp8 ? 1u : 2u);
  token.num_scales = use_fp8 ? static_cast<uint32_t>(hidden / common::kFp8CastBlock) : 0u;
  token.topk = static_cast<uint32_t>(topk);
  return token;
}

common::SymmetricLayout symmetric_layout(const Topology& topology, const BufferSizing& sizing,
                                         size_t region_offset) {
  common::SymmetricLayout layout{};
  layout.region_offset = region_offset;
  layout.num_ranks = topology.num_ranks;
  layout.local_experts = sizing.num_experts / std::max(1, topology.num_ranks);
  layout.topk = sizing.topk;
  layout.max_tokens_per_rank = sizing.symmetric_max_tokens_per_rank;
  layout.hidden = sizing.hidden;
  // fp8 rows are smaller but carry scales: the token stride holds either.
  size_t token = std::max(symmetric_token(sizing.hidden, false, sizing.topk).bytes(),
                          symmetric_token(sizing.hidden, true, sizing.topk).bytes());
  layout.token_bytes = static_cast<uint32_t>(token);
  layout.combine_row_bytes = static_cast<uint32_t>(
      common::align_up(static_cast<size_t>(sizing.hidden) * 2, common::kSymmetricAlignment));
  return layout;
}

}  // namespace switchyard::detail

namespace switchyard {

size_t symmetric_heap_bytes(const Topology& topology, const BufferSizing& sizing) {
  topology.validate();
  if (sizing.symmetric_max_tokens_per_rank <= 0) return 0;
  detail::check_sizing(sizing);
  return detail::symmetric_layout(topology, sizing, 0).region_bytes();
}

}  // namespace switchyard
