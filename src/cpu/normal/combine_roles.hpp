#pragma once
// The two roles of a `normal` combine channel on the CPU: expert ranks send each received row back
// to its home rank in dispatch order; the home rank reduces each token's rows in the fixed order
// of DESIGN.md. Non-blocking state machines, like the dispatch roles.
#include <string>
#include <vector>

#include "common/normal_protocol.hpp"
#include "common/sym_heap.hpp"

namespace switchyard::cpu {

struct CombineContext {
  const common::SymHeap* heap;
  common::NormalHeapLayout layout;
  common::CombineMessage message;
  int rank, num_ranks, ranks_per_node, num_channels;
  uint32_t chunk_tokens;
  // Send side: this rank's expert outputs, in its receive order.
  const uint8_t* y;                   // bf16 [M, H]
  const float* y_topk_weights;        // [M, K] or null
  const int32_t* recv_channel_start;  // [R * C + 1]
  // Receive side: this rank's tokens.
  int64_t num_tokens;
  const uint8_t* is_token_in_rank;  // [N, R]
  uint16_t* combined_x;             // bf16 [N, H]
  float* combined_topk_weights;     // [N, K] or null
  // bf16 [N, H] each, or null: where each token's final fp32 sum starts (common/combine_bias.hpp).
  const uint16_t* bias0;
  const uint16_t* bias1;
  // y in the heap (CombinePlan::y_in_heap): nothing travels through the rings; each home reads its tokens'
  // rows (and weights) from the expert ranks' heaps in place, where input.first_rows says each (expert
  // rank, channel) range starts (docs/normal-in-place.md).
  bool rows_in_place;
  common::NormalCombineInputLayout input;
};

// With y in the heap, before the combine's first barrier: tells every home rank where its rows start in
// this rank's receive order, per channel (NormalCombineInputLayout::first_rows in the home's heap).
void publish_first_rows(const CombineContext& context);

// Writes expert-output row `row` of this rank (and its weights, if any) into a combine ring slot.
void write_combine_message(const CombineContext& context, int64_t row, uint8_t* slot);

class CombineSender {
 public:
  CombineSender(const CombineContext& context, int channel);
  bool step();
  bool done() const;
  std::string waiting_for() const;

 private:
  struct Home {
    int64_t next_row, end_row;  // rows of (home rank, channel) still to send
    uint64_t tail, published, head;
  };
  const CombineContext& context_;
  int channel_;
  std::vector<Home> homes_;
};

class CombineReceiver {
 public:
  CombineReceiver(const CombineContext& context, int channel);
  bool step();
  bool done() const { return token_ >= end_; }
  std::string waiting_for() const;

 private:
  struct Expert {
    uint64_t consumed, published, tail;
  };
  // Where the row (and weights) of `expert_rank`'s `sequence`-th token of this channel are: a ring slot, or
  // with rows in place the expert rank's heap.
  struct RowSource {
    const uint16_t* row;
    const float* weights;  // null without weights
  };
  RowSource row_of(int expert_rank, uint64_t sequence) const;
  // Rows in place: every expert rank's range for this channel lies in its heap combine input, or SystemError.
  void check_first_rows() const;
  bool rows_ready(const uint8_t* in_rank);
  void reduce_token(const uint8_t* in_rank);
  void release_heads(bool all);

  const CombineContext& context_;
  int channel_;
  int64_t token_, end_;
  std::vector<Expert> experts_;
  std::vector<int64_t> first_rows_;      // rows in place: where this channel's rows start on each rank
  std::vector<float> node_sum_, total_;  // fp32 accumulators, [H]
  int waiting_rank_ = -1;
};

}  // namespace switchyard::cpu
