#pragma once
// The two roles of a `normal` dispatch channel on the CPU. Both are non-blocking state machines:
// step() does whatever is possible now and says whether it moved anything. A sender never waits on
// one destination while another could take data, and a receiver polls every source, so no cycle of
// waits can form however small the rings are.
#include <string>
#include <vector>

#include "common/normal_protocol.hpp"
#include "common/scales_layout.hpp"
#include "common/sym_heap.hpp"

namespace switchyard::cpu {

// What both roles of a dispatch read; built once per call.
struct DispatchContext {
  const common::SymHeap* heap;
  common::NormalHeapLayout layout;
  common::DispatchMessage message;
  int rank, num_ranks, num_channels, local_experts;
  uint32_t chunk_tokens;
  // Send side.
  int64_t num_tokens;
  const uint8_t* x;                      // [N, row_bytes]
  const float* x_scales;                 // laid out as x_scales_layout says, or null
  common::ScalesLayout x_scales_layout;  // [N, num_scales] row-major, or its transpose
  const int64_t* topk_idx;               // [N, K] or null (cached dispatch without routing)
  const float* topk_weights;             // [N, K] or null
  const uint8_t* is_token_in_rank;       // [N, R]
  // Receive side.
  const int32_t* recv_channel_start;  // [R * C + 1]
  uint8_t* recv_x;                    // [M, row_bytes]
  float* recv_x_scales;               // [M, num_scales] or null
  int64_t* recv_topk_idx;             // [M, K] or null
  float* recv_topk_weights;           // [M, K] or null
  int32_t* recv_src_token;            // [M]
  // x in the heap (DispatchPlan::x_in_heap): no ring is used; the receivers pull the rows and their routing
  // from here in their sources' heaps (cpu/normal/in_place_gather.hpp).
  common::NormalInputLayout input;
  uint32_t row_bytes;   // hidden * element size
  uint32_t num_scales;  // hidden / 128 for fp8, else 0
};

class DispatchSender {
 public:
  DispatchSender(const DispatchContext& context, int channel);
  bool step();
  bool done() const;
  std::string waiting_for() const;

 private:
  struct Destination {
    int64_t cursor;      // next source token to consider
    uint64_t tail;       // tokens written into the ring
    uint64_t published;  // tail last released to the receiver
    uint64_t head;       // receiver's head as last read
  };
  void write_message(int destination, int64_t token, uint8_t* slot) const;

  const DispatchContext& context_;
  int channel_;
  int64_t begin_, end_;
  std::vector<Destination> destinations_;
};

class DispatchReceiver {
 public:
  DispatchReceiver(const DispatchContext& context, int channel);
  bool step();
  bool done() const;
  std::string waiting_for() const;

 private:
  struct Source {
    int64_t first_row;  // where this (source, channel) range starts in the receive order
    uint64_t expected;  // tokens it will send on this channel
    uint64_t received;  // tokens copied out (and released through head)
  };
  void copy_out(const uint8_t* slot, int64_t row) const;

  const DispatchContext& context_;
  int channel_;
  std::vector<Source> sources_;
};

}  // namespace switchyard::cpu
