#include "cpu/normal/combine_roles.hpp"

#include <algorithm>
#include <cstring>
#include <sstream>

#include "common/combine_bias.hpp"
#include "common/numeric.hpp"
#include "switchyard/errors.hpp"

namespace switchyard::cpu {

void write_combine_message(const CombineContext& context, int64_t row, uint8_t* slot) {
  const common::CombineMessage& message = context.message;
  std::memcpy(message.row(slot), context.y + row * message.row_bytes, message.row_bytes);
  if (message.has_weights) {
    const int topk = static_cast<int>(message.topk);
    std::memcpy(message.topk_weights(slot), context.y_topk_weights + row * topk, topk * sizeof(float));
  }
}

void publish_first_rows(const CombineContext& context) {
  for (int home = 0; home < context.num_ranks; ++home) {
    int32_t* table = context.input.first_rows(context.heap->peer_base(home), context.rank);
    for (int channel = 0; channel < context.num_channels; ++channel)
      table[channel] = context.recv_channel_start[home * context.num_channels + channel];
  }
}

CombineSender::CombineSender(const CombineContext& context, int channel)
    : context_(context), channel_(channel) {
  homes_.resize(context.num_ranks);
  for (int home = 0; home < context.num_ranks; ++home) {
    int index = home * context.num_channels + channel;
    // Rows read in place by their home ranks: nothing to send.
    const int64_t end = context.recv_channel_start[index + 1];
    homes_[home] = Home{context.rows_in_place ? end : context.recv_channel_start[index], end, 0, 0, 0};
  }
}

bool CombineSender::step() {
  bool progressed = false;
  const uint32_t num_slots = context_.layout.ring_slots;
  for (int home = 0; home < context_.num_ranks; ++home) {
    Home& state = homes_[home];
    common::Ring ring = context_.layout.ring(context_.heap->peer_base(home), channel_, context_.rank);
    bool blocked = false;
    while (state.next_row < state.end_row) {
      if (state.tail - state.head >= num_slots) {
        state.head = common::ld_acquire_sys(ring.head());
        if (state.tail - state.head >= num_slots) {
          blocked = true;
          break;
        }
      }
      uint8_t* slot = ring.slot(state.tail);
      write_combine_message(context_, state.next_row, slot);
      ++state.tail;
      ++state.next_row;
      progressed = true;
      if (state.tail - state.published >= context_.chunk_tokens) {
        common::st_release_sys(ring.tail(), state.tail);
        state.published = state.tail;
      }
    }
    if ((blocked || state.next_row >= state.end_row) && state.published < state.tail) {
      common::st_release_sys(ring.tail(), state.tail);
      state.published = state.tail;
      progressed = true;
    }
  }
  return progressed;
}

bool CombineSender::done() const {
  return std::all_of(homes_.begin(), homes_.end(),
                     [](const Home& h) { return h.next_row >= h.end_row && h.published == h.tail; });
}

std::string CombineSender::waiting_for() const {
  std::ostringstream out;
  for (int home = 0; home < context_.num_ranks; ++home) {
    const Home& state = homes_[home];
    if (state.next_row < state.end_row) {
      out << " waiting for ring space at rank " << home << " (tail " << state.tail << ", head " << state.head
          << ", " << context_.layout.ring_slots << " slots)";
      break;
    }
  }
  return out.str();
}

CombineReceiver::CombineReceiver(const CombineContext& context, int channel)
    : context_(context), channel_(channel) {
  token_ = common::channel_begin(context.num_tokens, context.num_channels, channel);
  end_ = common::channel_begin(context.num_tokens, context.num_channels, channel + 1);
  experts_.assign(context.num_ranks, Expert{0, 0, 0});
  if (context.rows_in_place) {
    first_rows_.resize(context.num_ranks);
    for (int expert_rank = 0; expert_rank < context.num_ranks; ++expert_rank)
      first_rows_[expert_rank] = context.input.first_rows(context.heap->base, expert_rank)[channel];
    check_first_rows();
  }
  size_t hidden = context.message.row_bytes / 2;
  node_sum_.resize(hidden);
  total_.resize(hidden);
}

void CombineReceiver::check_first_rows() const {
  // Each expert rank wrote where this channel's rows for us start; with our count of the tokens we sent
  // it on this channel, the range must lie in its heap combine input. A peer whose call differs (another
  // handle) or a corrupt table would otherwise send the reads past it.
  for (int expert_rank = 0; expert_rank < context_.num_ranks; ++expert_rank) {
    int64_t count = 0;
    for (int64_t token = token_; token < end_; ++token)
      count += context_.is_token_in_rank[token * context_.num_ranks + expert_rank] ? 1 : 0;
    const int64_t first = first_rows_[expert_rank];
    if (count > 0 && (first < 0 || first + count > context_.input.max_rows)) {
      throw SystemError("combine: rank " + std::to_string(context_.rank) + "'s receiver on channel " +
                        std::to_string(channel_) + " found its " + std::to_string(count) + " rows on rank " +
                        std::to_string(expert_rank) + " at [" + std::to_string(first) + ", " +
                        std::to_string(first + count) + "), outside that rank's heap combine input of " +
                        std::to_string(context_.input.max_rows) +
                        " rows (the ranks' combines differ, or its table is corrupt); nothing was read");
    }
  }
}

bool CombineReceiver::rows_ready(const uint8_t* in_rank) {
  if (context_.rows_in_place) return true;  // written before the combine's first barrier
  for (int expert_rank = 0; expert_rank < context_.num_ranks; ++expert_rank) {
    if (!in_rank[expert_rank]) continue;
    Expert& state = experts_[expert_rank];
    if (state.consumed < state.tail) continue;
    state.tail =
        common::ld_acquire_sys(context_.layout.ring(context_.heap->base, channel_, expert_rank).tail());
    if (state.consumed >= state.tail) {
      waiting_rank_ = expert_rank;
      return false;
    }
  }
  return true;
}

CombineReceiver::RowSource CombineReceiver::row_of(int expert_rank, uint64_t sequence) const {
  const common::CombineMessage& message = context_.message;
  if (!context_.rows_in_place) {
    uint8_t* slot = context_.layout.ring(context_.heap->base, channel_, expert_rank).slot(sequence);
    return {reinterpret_cast<const uint16_t*>(message.row(slot)),
            message.has_weights ? message.topk_weights(slot) : nullptr};
  }
  // The expert rank's row in its receive order: its range of (this rank, this channel), then the token's
  // place in it.
  const uint8_t* heap = context_.heap->peer_base(expert_rank);
  const int64_t row = first_rows_[expert_rank] + static_cast<int64_t>(sequence);
  const auto* rows = reinterpret_cast<const uint16_t*>(heap + context_.input.y_offset());
  const auto* weights = reinterpret_cast<const float*>(heap + context_.input.weights_offset());
  return {rows + row * (message.row_bytes / 2), message.has_weights ? weights + row * message.topk : nullptr};
}

// DESIGN.md's order: fp32 over each node's ranks ascending (from +0), rounded to bf16 once per
// node; then fp32 over the node partials ascending, rounded once. With one node there is no partial:
// the ranks' rows go straight into the final sum. The final sum starts at bias0 + bias1 (+0 without
// biases). Weights: fp32 over ranks ascending (exact, since each slot is non-zero on one rank only).
void CombineReceiver::reduce_token(const uint8_t* in_rank) {
  const common::CombineMessage& message = context_.message;
  const size_t hidden = node_sum_.size();
  const int topk = static_cast<int>(message.topk);
  const int64_t token = token_;
  for (size_t h = 0; h < hidden; ++h) {
    total_[h] = common::combine_bias_start(context_.bias0, context_.bias1, token * hidden + h);
  }
  float* weights_out =
      context_.combined_topk_weights ? context_.combined_topk_weights + token * topk : nullptr;
  if (weights_out) std::fill(weights_out, weights_out + topk, 0.0f);
  const int ranks_per_node = context_.ranks_per_node;
  const bool one_node = ranks_per_node >= context_.num_ranks;
  for (int node_first = 0; node_first < context_.num_ranks; node_first += ranks_per_node) {
    bool any = false;
    // One node: node_sum_ is the final sum (it starts at the bias and is not rounded twice).
    if (one_node) {
      node_sum_ = total_;
    } else {
      std::fill(node_sum_.begin(), node_sum_.end(), 0.0f);
    }
    for (int expert_rank = node_first; expert_rank < node_first + ranks_per_node; ++expert_rank) {
      if (!in_rank[expert_rank]) continue;
      any = true;
      Expert& state = experts_[expert_rank];
      const RowSource source = row_of(expert_rank, state.consumed);
      for (size_t h = 0; h < hidden; ++h) node_sum_[h] += common::bf16_to_float(source.row[h]);
      if (weights_out) {
        for (int k = 0; k < topk; ++k) weights_out[k] += source.weights[k];
      }
      ++state.consumed;
    }
    if (one_node) {
      total_.swap(node_sum_);
    } else if (any) {
      for (size_t h = 0; h < hidden; ++h)
        total_[h] += common::bf16_to_float(common::float_to_bf16(node_sum_[h]));
    }
  }
  uint16_t* out = context_.combined_x + token * hidden;
  for (size_t h = 0; h < hidden; ++h) out[h] = common::float_to_bf16(total_[h]);
}

void CombineReceiver::release_heads(bool all) {
  if (context_.rows_in_place) return;  // no rings
  for (int expert_rank = 0; expert_rank < context_.num_ranks; ++expert_rank) {
    Expert& state = experts_[expert_rank];
    if (state.consumed > state.published &&
        (all || state.consumed - state.published >= context_.chunk_tokens)) {
      common::st_release_sys(context_.layout.ring(context_.heap->base, channel_, expert_rank).head(),
                             state.consumed);
      state.published = state.consumed;
    }
  }
}

bool CombineReceiver::step() {
  bool progressed = false;
  while (token_ < end_) {
    const uint8_t* in_rank = context_.is_token_in_rank + token_ * context_.num_ranks;
    if (!rows_ready(in_rank)) break;
    reduce_token(in_rank);
    ++token_;
    progressed = true;
    release_heads(false);
  }
  // Blocked or finished: hand back every consumed slot so no sender waits on us.
  release_heads(true);
  return progressed;
}

std::string CombineReceiver::waiting_for() const {
  std::ostringstream out;
  if (token_ < end_) {
    out << " waiting for token " << token_ << "'s row from rank " << waiting_rank_;
    if (waiting_rank_ >= 0) {
      out << " (consumed " << experts_[waiting_rank_].consumed << ", tail " << experts_[waiting_rank_].tail
          << ")";
    }
  }
  return out.str();
}

}  // namespace switchyard::cpu
