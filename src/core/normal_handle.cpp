#include "core/normal_handle.hpp"

#include "core/backend.hpp"

namespace switchyard::detail {

std::shared_ptr<NormalHandleData> new_normal_handle(const DispatchPlan& plan, detail::BufferId owner) {
  auto handle = std::make_shared<NormalHandleData>();
  handle->owner = owner;
  handle->rank = plan.rank;
  handle->topology = plan.topology;
  handle->num_channels = plan.config.num_channels;
  handle->num_experts = plan.num_experts;
  handle->expert_alignment = plan.expert_alignment;
  handle->topk = plan.topk;
  handle->num_tokens = plan.num_tokens;
  handle->num_worst_tokens = plan.num_worst_tokens;
  if (const NormalHandleData* cached = plan.cached) {
    handle->is_token_in_rank = cached->is_token_in_rank;
    handle->recv_channel_start = cached->recv_channel_start;
    handle->num_recv_tokens = cached->num_recv_tokens;
    handle->num_recv_tokens_per_expert = cached->num_recv_tokens_per_expert;
    handle->recv_expert_counts = cached->recv_expert_counts;
    handle->recv_token_count = cached->recv_token_count;
    handle->routing_epoch = cached->routing_epoch;
    handle->send_list = cached->send_list;
    handle->send_channel_prefix = cached->send_channel_prefix;
    handle->send_slot = cached->send_slot;
  }
  return handle;
}

}  // namespace switchyard::detail
