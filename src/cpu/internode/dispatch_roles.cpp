#include "cpu/internode/dispatch_roles.hpp"

#include <algorithm>
#include <cstring>
#include <sstream>

namespace switchyard::cpu {

RdmaDispatchSender::RdmaDispatchSender(const InternodeDispatchContext& context, const RdmaLink& link,
                                       std::vector<RdmaSendQueue>& queues)
    : context_(context), link_(link), queues_(queues) {
  const DispatchContext& intranode = *context.intranode;
  begin_ = common::channel_begin(intranode.num_tokens, intranode.num_channels, link.channel);
  end_ = common::channel_begin(intranode.num_tokens, intranode.num_channels, link.channel + 1);
  cursors_.assign(context.num_nodes, begin_);
  for (int node = 0; node < context.num_nodes; ++node) {
    uint64_t total = 0;
    for (int64_t token = begin_; token < end_; ++token) total += mask_of(token, node).any() ? 1 : 0;
    queues_[node].total = total;
  }
}

common::RankMask RdmaDispatchSender::mask_of(int64_t token, int node) const {
  const DispatchContext& intranode = *context_.intranode;
  const uint8_t* in_rank =
      intranode.is_token_in_rank + token * intranode.num_ranks + node * context_.ranks_per_node;
  common::RankMask mask;
  mask.clear();
  for (int local = 0; local < context_.ranks_per_node; ++local) {
    if (in_rank[local]) mask.set(local);
  }
  return mask;
}

void RdmaDispatchSender::write_message(int64_t token, const common::RankMask& mask, uint8_t* slot) const {
  const DispatchContext& intranode = *context_.intranode;
  const common::InternodeDispatchMessage& message = context_.rdma_message;
  std::memcpy(message.row(slot), intranode.x + token * message.row_bytes, message.row_bytes);
  if (message.num_scales) {
    common::copy_token_scales(intranode.x_scales, intranode.x_scales_layout, token, message.scales(slot));
  }
  const int topk = static_cast<int>(message.topk);
  int32_t* ids = message.topk_idx(slot);
  for (int k = 0; k < topk; ++k) ids[k] = static_cast<int32_t>(intranode.topk_idx[token * topk + k]);
  if (message.has_weights) {
    std::memcpy(message.topk_weights(slot), intranode.topk_weights + token * topk, topk * sizeof(float));
  }
  *message.src_token(slot) = static_cast<int32_t>(token);
  *message.rank_mask(slot) = mask;
}

bool RdmaDispatchSender::step() {
  bool progressed = false;
  for (int node = 0; node < context_.num_nodes; ++node) {
    RdmaSendQueue& queue = queues_[node];
    int64_t& cursor = cursors_[node];
    // At most one chunk per step, so the coordinator puts it while the next is staged.
    for (uint32_t staged = 0; cursor < end_ && staged < link_.chunk_tokens;) {
      common::RankMask mask = mask_of(cursor, node);
      if (!mask.any()) {
        ++cursor;
        continue;
      }
      if (queue.full(link_.rdma.rdma_slots)) break;
      write_message(cursor, mask, link_.send_slot(node, queue.staged));
      ++queue.staged;
      ++cursor;
      ++staged;
      progressed = true;
    }
  }
  return progressed;
}

bool RdmaDispatchSender::done() const {
  return std::all_of(cursors_.begin(), cursors_.end(), [&](int64_t cursor) { return cursor >= end_; });
}

std::string RdmaDispatchSender::waiting_for() const {
  std::ostringstream out;
  for (int node = 0; node < context_.num_nodes; ++node) {
    if (cursors_[node] >= end_) continue;
    const RdmaSendQueue& queue = queues_[node];
    out << " waiting for RDMA ring space at rank " << link_.peer_in(node) << " (node " << node << "; staged "
        << queue.staged << ", freed " << queue.freed << ", " << link_.rdma.rdma_slots << " slots)";
    break;
  }
  return out.str();
}

DispatchForwarder::DispatchForwarder(const InternodeDispatchContext& context, const RdmaLink& link)
    : context_(context), link_(link) {
  sources_.resize(context.num_nodes);
  for (int node = 0; node < context.num_nodes; ++node) {
    sources_[node] = Source{link.peer_in(node), false, 0, 0, 0, 0};
  }
  targets_.assign(static_cast<size_t>(context.num_nodes) * context.ranks_per_node, Target{0, 0, 0});
}

void DispatchForwarder::write_message(const uint8_t* rdma_slot_const, int destination, uint8_t* slot) const {
  uint8_t* rdma_slot = const_cast<uint8_t*>(rdma_slot_const);
  const DispatchContext& intranode = *context_.intranode;
  const common::InternodeDispatchMessage& in = context_.rdma_message;
  const common::DispatchMessage& out = intranode.message;
  std::memcpy(out.row(slot), in.row(rdma_slot), out.row_bytes);
  if (out.num_scales) std::memcpy(out.scales(slot), in.scales(rdma_slot), out.num_scales * sizeof(float));
  // The destination's view of the routing, exactly as the intranode DispatchSender writes it.
  const int topk = static_cast<int>(out.topk);
  const int32_t* ids = in.topk_idx(rdma_slot);
  const float* weights = in.has_weights ? in.topk_weights(rdma_slot) : nullptr;
  int32_t* local_ids = out.topk_idx(slot);
  float* local_weights = out.has_weights ? out.topk_weights(slot) : nullptr;
  const int64_t first_expert = static_cast<int64_t>(destination) * intranode.local_experts;
  for (int k = 0; k < topk; ++k) {
    int64_t expert = ids[k];
    bool local = expert >= first_expert && expert < first_expert + intranode.local_experts;
    local_ids[k] = local ? static_cast<int32_t>(expert - first_expert) : -1;
    if (local_weights) local_weights[k] = local ? weights[k] : 0.0f;
  }
  *out.src_token(slot) = *in.src_token(rdma_slot);
}

bool DispatchForwarder::forward_one(int node, Source& source, int* blocked_rank) {
  const DispatchContext& intranode = *context_.intranode;
  const int ranks_per_node = context_.ranks_per_node;
  const uint32_t num_slots = intranode.layout.ring_slots;
  const uint8_t* rdma_slot = link_.recv_slot(node, source.consumed);
  const common::RankMask mask = *context_.rdma_message.rank_mask(const_cast<uint8_t*>(rdma_slot));
  const int first_rank = link_.node() * ranks_per_node;
  // All or nothing: the token moves on only when every ring that wants it has a free slot.
  for (int local = 0; local < ranks_per_node; ++local) {
    if (!mask.test(local)) continue;
    Target& target = targets_[node * ranks_per_node + local];
    if (target.tail - target.head < num_slots) continue;
    common::Ring ring =
        intranode.layout.ring(intranode.heap->peer_base(first_rank + local), link_.channel, source.rank);
    target.head = common::ld_acquire_sys(ring.head());
    if (target.tail - target.head >= num_slots) {
      *blocked_rank = first_rank + local;
      return false;
    }
  }
  for (int local = 0; local < ranks_per_node; ++local) {
    if (!mask.test(local)) continue;
    Target& target = targets_[node * ranks_per_node + local];
    common::Ring ring =
        intranode.layout.ring(intranode.heap->peer_base(first_rank + local), link_.channel, source.rank);
    write_message(rdma_slot, first_rank + local, ring.slot(target.tail));
    ++target.tail;
  }
  (*context_.forwarded)[link_.channel * context_.num_nodes + node].push_back(mask);
  ++source.consumed;
  return true;
}

bool DispatchForwarder::step() {
  bool progressed = false;
  const common::InternodeHeapLayout& rdma = link_.rdma;
  const int channel = link_.channel;
  for (int node = 0; node < context_.num_nodes; ++node) {
    Source& source = sources_[node];
    if (!source.total_known) {
      uint64_t announced = context_.transport->read_signal(rdma.recv_total_offset(channel, node));
      if (announced == 0) continue;
      source.total = announced - 1;
      source.total_known = true;
      progressed = true;
    }
    if (source.consumed == source.tail && source.tail < source.total) {
      source.tail = context_.transport->read_signal(rdma.recv_tail_offset(channel, node));
    }
    for (uint32_t moved = 0; source.consumed < source.tail && moved < link_.chunk_tokens; ++moved) {
      if (!forward_one(node, source, &blocked_rank_)) break;
      progressed = true;
    }
    // Publish what was pushed, and hand the freed RDMA slots back to the source.
    for (int local = 0; local < context_.ranks_per_node; ++local) {
      Target& target = targets_[node * context_.ranks_per_node + local];
      if (target.published == target.tail) continue;
      const DispatchContext& intranode = *context_.intranode;
      common::Ring ring = intranode.layout.ring(
          intranode.heap->peer_base(link_.node() * context_.ranks_per_node + local), channel, source.rank);
      common::st_release_sys(ring.tail(), target.tail);
      target.published = target.tail;
    }
    if (source.consumed > source.reported) {
      context_.transport->signal(source.rank, rdma.send_head_offset(channel, link_.node()),
                                 source.consumed - source.reported);
      source.reported = source.consumed;
    }
  }
  return progressed;
}

bool DispatchForwarder::done() const {
  return std::all_of(sources_.begin(), sources_.end(), [](const Source& s) {
    return s.total_known && s.consumed == s.total && s.reported == s.consumed;
  });
}

std::string DispatchForwarder::waiting_for() const {
  std::ostringstream out;
  for (int node = 0; node < context_.num_nodes; ++node) {
    const Source& source = sources_[node];
    if (!source.total_known) {
      out << " waiting for rank " << source.rank << " (node " << node << ") to announce its token count";
      break;
    }
    if (source.consumed == source.total) continue;
    if (source.consumed < source.tail) {
      out << " waiting for intranode ring space at rank " << blocked_rank_ << " (forwarding from rank "
          << source.rank << ", node " << node << ")";
    } else {
      out << " waiting for tokens from rank " << source.rank << " (node " << node << "; forwarded "
          << source.consumed << " of " << source.total << ")";
    }
    break;
  }
  return out.str();
}

}  // namespace switchyard::cpu
