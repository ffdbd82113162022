#include "cpu/normal/dispatch_roles.hpp"

#include <algorithm>
#include <cstring>
#include <sstream>
#include <string>

#include "switchyard/errors.hpp"

namespace switchyard::cpu {

DispatchSender::DispatchSender(const DispatchContext& context, int channel)
    : context_(context), channel_(channel) {
  begin_ = common::channel_begin(context.num_tokens, context.num_channels, channel);
  end_ = common::channel_begin(context.num_tokens, context.num_channels, channel + 1);
  destinations_.assign(context.num_ranks, Destination{begin_, 0, 0, 0});
}

void DispatchSender::write_message(int destination, int64_t token, uint8_t* slot) const {
  const common::DispatchMessage& message = context_.message;
  std::memcpy(message.row(slot), context_.x + token * message.row_bytes, message.row_bytes);
  if (message.num_scales) {
    common::copy_token_scales(context_.x_scales, context_.x_scales_layout, token, message.scales(slot));
  }
  const int topk = static_cast<int>(message.topk);
  if (topk > 0) {
    // Routing as the destination sees it: its local expert id, or -1 (weight 0) for other ranks' slots.
    int32_t* local_ids = message.topk_idx(slot);
    float* weights = message.has_weights ? message.topk_weights(slot) : nullptr;
    for (int k = 0; k < topk; ++k) {
      const int64_t local =
          common::local_expert_id(context_.topk_idx[token * topk + k], destination, context_.local_experts);
      local_ids[k] = static_cast<int32_t>(local);
      if (weights) weights[k] = local >= 0 ? context_.topk_weights[token * topk + k] : 0.0f;
    }
  }
  *message.src_token(slot) = static_cast<int32_t>(token);
}

bool DispatchSender::step() {
  bool progressed = false;
  const uint32_t num_slots = context_.layout.ring_slots;
  for (int destination = 0; destination < context_.num_ranks; ++destination) {
    Destination& state = destinations_[destination];
    common::Ring ring = context_.layout.ring(context_.heap->peer_base(destination), channel_, context_.rank);
    bool blocked = false;
    while (state.cursor < end_) {
      if (!context_.is_token_in_rank[state.cursor * context_.num_ranks + destination]) {
        ++state.cursor;
        continue;
      }
      if (state.tail - state.head >= num_slots) {
        // Only read the receiver's head when the ring looks full, and only while data is pending.
        state.head = common::ld_acquire_sys(ring.head());
        if (state.tail - state.head >= num_slots) {
          blocked = true;
          break;
        }
      }
      write_message(destination, state.cursor, ring.slot(state.tail));
      ++state.tail;
      ++state.cursor;
      progressed = true;
      if (state.tail - state.published >= context_.chunk_tokens) {
        common::st_release_sys(ring.tail(), state.tail);
        state.published = state.tail;
      }
    }
    // Publish what is written when finished or blocked, so the receiver can drain and free space.
    if ((blocked || state.cursor >= end_) && state.published < state.tail) {
      common::st_release_sys(ring.tail(), state.tail);
      state.published = state.tail;
      progressed = true;
    }
  }
  return progressed;
}

bool DispatchSender::done() const {
  return std::all_of(destinations_.begin(), destinations_.end(),
                     [&](const Destination& d) { return d.cursor >= end_ && d.published == d.tail; });
}

std::string DispatchSender::waiting_for() const {
  std::ostringstream out;
  for (int destination = 0; destination < context_.num_ranks; ++destination) {
    const Destination& state = destinations_[destination];
    if (state.cursor < end_) {
      out << " waiting for ring space at rank " << destination << " (tail " << state.tail << ", head "
          << state.head << ", " << context_.layout.ring_slots << " slots)";
      break;
    }
  }
  return out.str();
}

DispatchReceiver::DispatchReceiver(const DispatchContext& context, int channel)
    : context_(context), channel_(channel) {
  sources_.resize(context.num_ranks);
  for (int source = 0; source < context.num_ranks; ++source) {
    int index = source * context.num_channels + channel;
    sources_[source].first_row = context.recv_channel_start[index];
    sources_[source].expected =
        static_cast<uint64_t>(context.recv_channel_start[index + 1] - context.recv_channel_start[index]);
    sources_[source].received = 0;
  }
}

void DispatchReceiver::copy_out(const uint8_t* slot_const, int64_t row) const {
  uint8_t* slot = const_cast<uint8_t*>(slot_const);
  const common::DispatchMessage& message = context_.message;
  const uint32_t row_bytes = context_.row_bytes, num_scales = context_.num_scales;
  std::memcpy(context_.recv_x + row * row_bytes, message.row(slot), row_bytes);
  if (context_.recv_x_scales) {
    std::memcpy(context_.recv_x_scales + row * num_scales, message.scales(slot), num_scales * sizeof(float));
  }
  const int topk = static_cast<int>(message.topk);
  if (context_.recv_topk_idx) {
    const int32_t* local_ids = message.topk_idx(slot);
    for (int k = 0; k < topk; ++k) context_.recv_topk_idx[row * topk + k] = local_ids[k];
  }
  if (context_.recv_topk_weights) {
    std::memcpy(context_.recv_topk_weights + row * topk, message.topk_weights(slot), topk * sizeof(float));
  }
  context_.recv_src_token[row] = *message.src_token(slot);
}

bool DispatchReceiver::step() {
  bool progressed = false;
  for (int source = 0; source < context_.num_ranks; ++source) {
    Source& state = sources_[source];
    if (state.received == state.expected) continue;
    common::Ring ring = context_.layout.ring(context_.heap->base, channel_, source);
    uint64_t tail = common::ld_acquire_sys(ring.tail());
    if (tail <= state.received) continue;
    while (state.received < tail) {
      // Release slots every chunk so a sender blocked on a full ring resumes early.
      uint64_t batch_end = std::min<uint64_t>(tail, state.received + context_.chunk_tokens);
      for (; state.received < batch_end; ++state.received) {
        copy_out(ring.slot(state.received), state.first_row + static_cast<int64_t>(state.received));
      }
      common::st_release_sys(ring.head(), state.received);
    }
    progressed = true;
  }
  return progressed;
}

bool DispatchReceiver::done() const {
  return std::all_of(sources_.begin(), sources_.end(),
                     [](const Source& s) { return s.received == s.expected; });
}

std::string DispatchReceiver::waiting_for() const {
  std::ostringstream out;
  for (int source = 0; source < context_.num_ranks; ++source) {
    const Source& state = sources_[source];
    if (state.received < state.expected) {
      out << " waiting for tokens from rank " << source << " (received " << state.received << " of "
          << state.expected << ")";
      break;
    }
  }
  return out.str();
}

}  // namespace switchyard::cpu
