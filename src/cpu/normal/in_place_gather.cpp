#include "cpu/normal/in_place_gather.hpp"

#include <cstring>
#include <string>

#include "switchyard/errors.hpp"

namespace switchyard::cpu {

void leave_routing(const common::SymHeap& heap, const detail::DispatchPlan& plan,
                   const uint8_t* is_token_in_rank) {
  const common::NormalInputLayout& input = plan.input;
  const int num_ranks = plan.topology.num_ranks, num_channels = plan.config.num_channels;
  for (int destination = 0; destination < num_ranks; ++destination) {
    int32_t* list = input.send_list(heap.base, destination);
    int32_t position = 0;
    // Channel by channel, tokens ascending: the order in which the destination's notify lays out this
    // source's rows.
    for (int channel = 0; channel < num_channels; ++channel) {
      const int64_t end = common::channel_begin(plan.num_tokens, num_channels, channel + 1);
      for (int64_t token = common::channel_begin(plan.num_tokens, num_channels, channel); token < end;
           ++token) {
        if (is_token_in_rank[token * num_ranks + destination]) list[position++] = static_cast<int32_t>(token);
      }
    }
  }
  const size_t slots = static_cast<size_t>(plan.num_tokens) * plan.topk;
  if (plan.topk > 0) std::memcpy(heap.base + input.topk_idx_offset(), plan.args.topk_idx.data, slots * 8);
  if (plan.has_weights)
    std::memcpy(heap.base + input.topk_weights_offset(), plan.args.topk_weights.data, slots * 4);
}

namespace {

// Refuses an index that came from a peer (or, cached, from this Buffer's handle) and would send a read
// outside that peer's heap input: whatever the heap holds there is not a row.
void check_index(const DispatchContext& context, const char* what, int64_t index, int source, int64_t row) {
  if (index >= 0 && index < context.input.max_tokens) return;
  throw SystemError("dispatch: rank " + std::to_string(context.rank) + "'s receiver found " + what + " " +
                    std::to_string(index) + " for its row " + std::to_string(row) + " from rank " +
                    std::to_string(source) + ", outside that rank's heap input of " +
                    std::to_string(context.input.max_tokens) + " tokens; nothing was read");
}

}  // namespace

void gather_rows(const DispatchContext& context, const int32_t* cached_recv_src_token, int channel) {
  const uint32_t row_bytes = context.row_bytes, num_scales = context.num_scales;
  const int topk = static_cast<int>(context.message.topk);
  for (int source = 0; source < context.num_ranks; ++source) {
    const int index = source * context.num_channels + channel;
    uint8_t* source_heap = context.heap->peer_base(source);
    const uint8_t* x = source_heap + context.input.x_offset();
    const float* scales = reinterpret_cast<const float*>(source_heap + context.input.scales_offset());
    const int32_t* send_list = context.input.send_list(source_heap, context.rank);
    const auto* topk_idx = reinterpret_cast<const int64_t*>(source_heap + context.input.topk_idx_offset());
    const auto* topk_weights =
        reinterpret_cast<const float*>(source_heap + context.input.topk_weights_offset());
    const int64_t first_row = context.recv_channel_start[source * context.num_channels];
    for (int64_t row = context.recv_channel_start[index]; row < context.recv_channel_start[index + 1];
         ++row) {
      int64_t token;
      if (cached_recv_src_token) {
        token = cached_recv_src_token[row];
      } else {
        check_index(context, "send-list entry", row - first_row, source, row);
        token = send_list[row - first_row];
      }
      check_index(context, "token", token, source, row);
      std::memcpy(context.recv_x + row * row_bytes, x + token * row_bytes, row_bytes);
      if (context.recv_x_scales) {
        std::memcpy(context.recv_x_scales + row * num_scales, scales + token * num_scales,
                    num_scales * sizeof(float));
      }
      for (int k = 0; k < topk; ++k) {
        // Routing as this rank sees it: its local expert id, or -1 (weight 0) for other ranks' slots.
        const int64_t local =
            common::local_expert_id(topk_idx[token * topk + k], context.rank, context.local_experts);
        context.recv_topk_idx[row * topk + k] = local;
        if (context.recv_topk_weights)
          context.recv_topk_weights[row * topk + k] = local >= 0 ? topk_weights[token * topk + k] : 0.0f;
      }
      context.recv_src_token[row] = static_cast<int32_t>(token);
    }
  }
}

}  // namespace switchyard::cpu
