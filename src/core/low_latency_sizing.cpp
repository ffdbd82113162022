#include "core/low_latency_sizing.hpp"

#include <algorithm>

#include "common/logfmt_wire.hpp"
#include "core/plan_context.hpp"

namespace switchyard::detail {

common::LowLatencyDispatchMessage low_latency_dispatch_message(int hidden, bool use_fp8) {
  common::LowLatencyDispatchMessage message{};
  message.row_bytes = static_cast<uint32_t>(hidden) * (use_fp8 ? 1u : 2u);
  message.num_scales = use_fp8 ? static_cast<uint32_t>(hidden / common::kFp8CastBlock) : 0u;
  return message;
}

common::LowLatencyLayout low_latency_layout(const Topology& topology, const BufferSizing& sizing,
                                            size_t region_offset) {
  common::LowLatencyLayout layout{};
  layout.region_offset = region_offset;
  layout.num_ranks = topology.num_ranks;
  // Across nodes the region also holds rows-landed counters and the transport's send sources.
  layout.ranks_per_node = topology.ranks_per_node;
  layout.local_experts = sizing.num_experts / std::max(1, topology.num_ranks);
  layout.topk = sizing.topk;
  layout.max_tokens_per_rank = sizing.low_latency_max_tokens_per_rank;
  layout.hidden = sizing.hidden;
  // fp8 rows are smaller but carry scales: the slot holds either.
  size_t slot = std::max(low_latency_dispatch_message(sizing.hidden, false).bytes(),
                         low_latency_dispatch_message(sizing.hidden, true).bytes());
  layout.dispatch_slot_bytes = static_cast<uint32_t>(slot);
  // A combine row holds a bf16 row or its LogFMT-10 packing (use_logfmt, any hidden up to the
  // capacity's that is a multiple of 128), whose worst case (no block cast) is larger by its cast bits.
  const size_t bf16_row = static_cast<size_t>(sizing.hidden) * 2;
  const size_t logfmt_row =
      common::logfmt_wire_max_row_bytes(sizing.hidden / common::kLogfmtBlock * common::kLogfmtBlock);
  layout.combine_row_bytes =
      static_cast<uint32_t>(common::align_up(std::max(bf16_row, logfmt_row), common::kLowLatencyAlignment));
  return layout;
}

}  // namespace switchyard::detail

namespace switchyard {

size_t low_latency_heap_bytes(const Topology& topology, const BufferSizing& sizing) {
  topology.validate();
  if (sizing.low_latency_max_tokens_per_rank <= 0) return 0;
  detail::check_sizing(sizing);
  return detail::low_latency_layout(topology, sizing, 0).region_bytes();
}

}  // namespace switchyard
