#pragma once
// The routing an expert-major dispatch (`low_latency` or `symmetric`) leaves behind for its combine.
#include <atomic>
#include <cstdint>

#include "core/buffer_identity.hpp"
#include "switchyard/buffer.hpp"

namespace switchyard::detail {

struct ExpertMajorHandleData {
  BufferId owner = kNoBuffer;           // the Buffer that made it; every other Buffer refuses the handle
  Engine engine = Engine::low_latency;  // the engine whose combine may use it
  int rank = 0;
  Topology topology;
  int num_experts = 0;
  int local_experts = 0;
  int topk = 0;
  int hidden = 0;
  int64_t max_tokens_per_rank = 0;
  // Rows per local expert in the receive-side tensors: the dispatch's expert_capacity (0 where an
  // engine leaves it unset: R * max_tokens_per_rank). Read it through rows_per_expert().
  int64_t expert_capacity = 0;
  int64_t rows_per_expert() const {
    return expert_capacity > 0 ? expert_capacity : topology.num_ranks * max_tokens_per_rank;
  }

  // Send side (this rank's tokens).
  int64_t num_tokens = 0;
  Tensor topk_idx;  // i64 [N, K]: a copy of the dispatch's, to check combine's against

  // Receive side, filled by the receive half (the hook, with return_recv_hook). What the combine routes
  // by: the dispatch's outputs where the library allocated them (shared with the result), the handle's
  // own copies where the caller passed out_layout_range / out_src_info (borrowed for the call only).
  Tensor layout_range;  // i32 [L, R, 2]
  Tensor src_info;      // i32 [L, C]: source token, -1 past recv_count
  Tensor src_slot;      // i32 [L, C]: the top-k slot of each row at its source
  // cuda symmetric only, i32 [4] on the device: written by the dispatch kernel, read by the combine
  // kernel: {overflowed (0/1), expert, rows, 0}: some expert received more rows than C.
  Tensor overflow;
  // symmetric with the pull combine only (Config::symmetric_combine): where each of this rank's
  // (token, slot) rows sits in its expert's rank's y, so that the home can read it there.
  Tensor position;  // i32 [N, K]: the row's position among this rank's rows for that expert; -1 for none
  Tensor begin;     // i32 [E]: where this rank's rows start among expert e's rows (sources before it)
  std::atomic<bool> received{false};
};

}  // namespace switchyard::detail
