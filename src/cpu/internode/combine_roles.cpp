#include "cpu/internode/combine_roles.hpp"

#include <algorithm>
#include <cstring>
#include <sstream>

#include "common/combine_bias.hpp"
#include "common/numeric.hpp"
#include "cpu/backend/bounded_wait.hpp"
#include "switchyard/errors.hpp"

namespace switchyard::cpu {

// ---- NVLink sender: this rank's expert outputs to its node's forwarders ----------------------------

NvlCombineSender::NvlCombineSender(const InternodeCombineContext& context, int channel)
    : context_(context), channel_(channel) {
  const CombineContext& intranode = *context.intranode;
  homes_.resize(intranode.num_ranks);
  for (int home = 0; home < intranode.num_ranks; ++home) {
    int index = home * intranode.num_channels + channel;
    homes_[home] =
        Home{intranode.recv_channel_start[index], intranode.recv_channel_start[index + 1], 0, 0, 0};
  }
}

common::Ring NvlCombineSender::ring_for(int home) const {
  const CombineContext& intranode = *context_.intranode;
  const int ranks_per_node = intranode.ranks_per_node;
  const int forwarder = common::node_of(intranode.rank, ranks_per_node) * ranks_per_node +
                        common::local_rank_of(home, ranks_per_node);
  const int index = common::combine_ring_index(common::local_rank_of(intranode.rank, ranks_per_node),
                                               common::node_of(home, ranks_per_node), context_.num_nodes);
  return intranode.layout.ring(intranode.heap->peer_base(forwarder), channel_, index);
}

bool NvlCombineSender::step() {
  bool progressed = false;
  const CombineContext& intranode = *context_.intranode;
  const uint32_t num_slots = intranode.layout.ring_slots;
  for (int home = 0; home < intranode.num_ranks; ++home) {
    Home& state = homes_[home];
    if (state.next_row >= state.end_row && state.published == state.tail) continue;
    common::Ring ring = ring_for(home);
    for (uint32_t sent = 0; state.next_row < state.end_row && sent < intranode.chunk_tokens; ++sent) {
      if (state.tail - state.head >= num_slots) {
        state.head = common::ld_acquire_sys(ring.head());
        if (state.tail - state.head >= num_slots) break;
      }
      uint8_t* slot = ring.slot(state.tail);
      write_combine_message(intranode, state.next_row, slot);
      ++state.tail;
      ++state.next_row;
      progressed = true;
    }
    if (state.published < state.tail) {
      common::st_release_sys(ring.tail(), state.tail);
      state.published = state.tail;
      progressed = true;
    }
  }
  return progressed;
}

bool NvlCombineSender::done() const {
  return std::all_of(homes_.begin(), homes_.end(),
                     [](const Home& h) { return h.next_row >= h.end_row && h.published == h.tail; });
}

std::string NvlCombineSender::waiting_for() const {
  std::ostringstream out;
  const CombineContext& intranode = *context_.intranode;
  for (int home = 0; home < intranode.num_ranks; ++home) {
    const Home& state = homes_[home];
    if (state.next_row >= state.end_row) continue;
    const int ranks_per_node = intranode.ranks_per_node;
    out << " waiting for intranode ring space at forwarder rank "
        << common::node_of(intranode.rank, ranks_per_node) * ranks_per_node +
               common::local_rank_of(home, ranks_per_node)
        << " for home rank " << home << " (tail " << state.tail << ", head " << state.head << ", "
        << intranode.layout.ring_slots << " slots)";
    break;
  }
  return out.str();
}

// ---- forwarder: one bf16 partial per token per node ------------------------------------------------

CombineForwarder::CombineForwarder(const InternodeCombineContext& context, const RdmaLink& link,
                                   std::vector<RdmaSendQueue>& queues)
    : context_(context), link_(link), queues_(queues) {
  cursors_.assign(context.num_nodes, 0);
  streams_.assign(static_cast<size_t>(context.intranode->ranks_per_node) * context.num_nodes,
                  Stream{0, 0, 0});
  for (int node = 0; node < context.num_nodes; ++node) {
    queues_[node].total = (*context.forwarded)[link.channel * context.num_nodes + node].size();
  }
  node_sum_.resize(context.intranode->message.row_bytes / 2);
}

common::Ring CombineForwarder::ring(int local, int home_node) const {
  const CombineContext& intranode = *context_.intranode;
  return intranode.layout.ring(intranode.heap->base, link_.channel,
                               common::combine_ring_index(local, home_node, context_.num_nodes));
}

bool CombineForwarder::reduce_one(int home_node) {
  const CombineContext& intranode = *context_.intranode;
  const common::CombineMessage& message = intranode.message;
  const common::RankMask& mask =
      (*context_.forwarded)[link_.channel * context_.num_nodes + home_node][cursors_[home_node]];
  const int ranks_per_node = intranode.ranks_per_node;
  for (int local = 0; local < ranks_per_node; ++local) {
    if (!mask.test(local)) continue;
    Stream& state = stream(local, home_node);
    if (state.consumed < state.tail) continue;
    state.tail = common::ld_acquire_sys(ring(local, home_node).tail());
    if (state.consumed >= state.tail) {
      waiting_rank_ = link_.node() * ranks_per_node + local;
      return false;
    }
  }
  RdmaSendQueue& queue = queues_[home_node];
  if (queue.full(link_.rdma.rdma_slots)) {
    waiting_rank_ = -1;
    return false;
  }
  // DESIGN.md: this node's ranks in ascending order, fp32 from +0, rounded to bf16 once.
  const size_t hidden = node_sum_.size();
  const int topk = static_cast<int>(message.topk);
  uint8_t* out_slot = link_.send_slot(home_node, queue.staged);
  float* weights_out = message.has_weights ? message.topk_weights(out_slot) : nullptr;
  std::fill(node_sum_.begin(), node_sum_.end(), 0.0f);
  if (weights_out) std::fill(weights_out, weights_out + topk, 0.0f);
  for (int local = 0; local < ranks_per_node; ++local) {
    if (!mask.test(local)) continue;
    Stream& state = stream(local, home_node);
    uint8_t* slot = ring(local, home_node).slot(state.consumed);
    const uint16_t* row = reinterpret_cast<const uint16_t*>(message.row(slot));
    for (size_t h = 0; h < hidden; ++h) node_sum_[h] += common::bf16_to_float(row[h]);
    if (weights_out) {
      const float* weights = message.topk_weights(slot);
      for (int k = 0; k < topk; ++k) weights_out[k] += weights[k];
    }
    ++state.consumed;
  }
  uint16_t* partial = reinterpret_cast<uint16_t*>(message.row(out_slot));
  for (size_t h = 0; h < hidden; ++h) partial[h] = common::float_to_bf16(node_sum_[h]);
  ++queue.staged;
  ++cursors_[home_node];
  return true;
}

bool CombineForwarder::step() {
  bool progressed = false;
  for (int home_node = 0; home_node < context_.num_nodes; ++home_node) {
    const size_t total = queues_[home_node].total;
    for (uint32_t reduced = 0; cursors_[home_node] < total && reduced < link_.chunk_tokens; ++reduced) {
      if (!reduce_one(home_node)) break;
      progressed = true;
    }
  }
  // Hand consumed intranode slots back to the NVLink senders.
  for (int local = 0; local < context_.intranode->ranks_per_node; ++local) {
    for (int home_node = 0; home_node < context_.num_nodes; ++home_node) {
      Stream& state = stream(local, home_node);
      if (state.published == state.consumed) continue;
      common::st_release_sys(ring(local, home_node).head(), state.consumed);
      state.published = state.consumed;
    }
  }
  return progressed;
}

bool CombineForwarder::done() const {
  for (int node = 0; node < context_.num_nodes; ++node) {
    if (cursors_[node] < queues_[node].total) return false;
  }
  return std::all_of(streams_.begin(), streams_.end(),
                     [](const Stream& s) { return s.published == s.consumed; });
}

std::string CombineForwarder::waiting_for() const {
  std::ostringstream out;
  const int ranks_per_node = context_.intranode->ranks_per_node;
  for (int node = 0; node < context_.num_nodes; ++node) {
    if (cursors_[node] >= queues_[node].total) continue;
    const int home = node * ranks_per_node + link_.local_rank();
    if (waiting_rank_ >= 0) {
      out << " waiting for rows from rank " << waiting_rank_ << " for home rank " << home << " (token "
          << cursors_[node] << " of " << queues_[node].total << " forwarded to node " << node << ")";
    } else {
      out << " waiting for RDMA ring space at home rank " << home << " (node " << node << ")";
    }
    break;
  }
  return out.str();
}

// ---- RDMA receiver: the node partials, summed in node order ----------------------------------------

RdmaCombineReceiver::RdmaCombineReceiver(const InternodeCombineContext& context, const RdmaLink& link)
    : context_(context), link_(link) {
  const CombineContext& intranode = *context.intranode;
  token_ = common::channel_begin(intranode.num_tokens, intranode.num_channels, link.channel);
  end_ = common::channel_begin(intranode.num_tokens, intranode.num_channels, link.channel + 1);
  nodes_.assign(context.num_nodes, Node{0, false, 0, 0, 0});
  for (int64_t token = token_; token < end_; ++token) {
    for (int node = 0; node < context.num_nodes; ++node)
      nodes_[node].expected += node_wants(token, node) ? 1 : 0;
  }
  total_.resize(intranode.message.row_bytes / 2);
}

bool RdmaCombineReceiver::node_wants(int64_t token, int node) const {
  const CombineContext& intranode = *context_.intranode;
  const uint8_t* in_rank =
      intranode.is_token_in_rank + token * intranode.num_ranks + node * intranode.ranks_per_node;
  for (int local = 0; local < intranode.ranks_per_node; ++local) {
    if (in_rank[local]) return true;
  }
  return false;
}

void RdmaCombineReceiver::check_announced() {
  for (int node = 0; node < context_.num_nodes; ++node) {
    Node& state = nodes_[node];
    if (state.total_known) continue;
    uint64_t announced = context_.transport->read_signal(link_.rdma.recv_total_offset(link_.channel, node));
    if (announced == 0) continue;
    state.total_known = true;
    if (announced - 1 != state.expected) {
      std::ostringstream out;
      out << role_label(link_.rank, "combine", name(), link_.channel) << ": expected " << state.expected
          << " partials from rank " << link_.peer_in(node) << " (node " << node << "), which announced "
          << announced - 1 << " (the handle does not match the one the peers dispatched with)";
      throw Error(out.str());
    }
  }
}

bool RdmaCombineReceiver::step() {
  bool progressed = false;
  check_announced();
  const CombineContext& intranode = *context_.intranode;
  const common::CombineMessage& message = intranode.message;
  const size_t hidden = total_.size();
  const int topk = static_cast<int>(message.topk);
  // At most one chunk per step, so freed slots go back to the forwarders while the rest arrives.
  for (uint32_t reduced = 0; token_ < end_ && reduced < link_.chunk_tokens; ++reduced) {
    bool ready = true;
    for (int node = 0; node < context_.num_nodes && ready; ++node) {
      if (!node_wants(token_, node)) continue;
      Node& state = nodes_[node];
      if (state.consumed < state.tail) continue;
      state.tail = context_.transport->read_signal(link_.rdma.recv_tail_offset(link_.channel, node));
      if (state.consumed >= state.tail) {
        waiting_node_ = node;
        ready = false;
      }
    }
    if (!ready) break;
    // DESIGN.md: the node partials in ascending node order, fp32 from bias0 + bias1 (+0 without
    // biases), rounded once; nodes without a contribution are skipped.
    for (size_t h = 0; h < hidden; ++h) {
      total_[h] = common::combine_bias_start(intranode.bias0, intranode.bias1, token_ * hidden + h);
    }
    float* weights_out =
        intranode.combined_topk_weights ? intranode.combined_topk_weights + token_ * topk : nullptr;
    if (weights_out) std::fill(weights_out, weights_out + topk, 0.0f);
    for (int node = 0; node < context_.num_nodes; ++node) {
      if (!node_wants(token_, node)) continue;
      Node& state = nodes_[node];
      uint8_t* slot = link_.recv_slot(node, state.consumed);
      const uint16_t* row = reinterpret_cast<const uint16_t*>(message.row(slot));
      for (size_t h = 0; h < hidden; ++h) total_[h] += common::bf16_to_float(row[h]);
      if (weights_out) {
        const float* weights = message.topk_weights(slot);
        for (int k = 0; k < topk; ++k) weights_out[k] += weights[k];
      }
      ++state.consumed;
    }
    uint16_t* out = intranode.combined_x + token_ * hidden;
    for (size_t h = 0; h < hidden; ++h) out[h] = common::float_to_bf16(total_[h]);
    ++token_;
    progressed = true;
  }
  // Hand the freed RDMA slots back to each node's forwarder.
  for (int node = 0; node < context_.num_nodes; ++node) {
    Node& state = nodes_[node];
    if (state.consumed == state.reported) continue;
    context_.transport->signal(link_.peer_in(node), link_.rdma.send_head_offset(link_.channel, link_.node()),
                               state.consumed - state.reported);
    state.reported = state.consumed;
    progressed = true;
  }
  return progressed;
}

bool RdmaCombineReceiver::done() const {
  return token_ >= end_ && std::all_of(nodes_.begin(), nodes_.end(), [](const Node& n) {
           return n.total_known && n.reported == n.consumed;
         });
}

std::string RdmaCombineReceiver::waiting_for() const {
  std::ostringstream out;
  if (token_ < end_ && waiting_node_ >= 0) {
    const Node& state = nodes_[waiting_node_];
    out << " waiting for token " << token_ << "'s partial from rank " << link_.peer_in(waiting_node_)
        << " (node " << waiting_node_ << "; consumed " << state.consumed << ", tail " << state.tail << ")";
    return out.str();
  }
  for (int node = 0; node < context_.num_nodes; ++node) {
    if (!nodes_[node].total_known) {
      out << " waiting for rank " << link_.peer_in(node) << " (node " << node
          << ") to announce its partial count";
      break;
    }
  }
  return out.str();
}

}  // namespace switchyard::cpu
