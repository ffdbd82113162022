#pragma once
// The routing an expert-major dispatch (`low_latency` or `symmetric`) leaves behind for its combine.
#include <atomic>
#include <cstdint>

#include "switchyard/buffer.hpp"

namespace switchyard::detail {

struct LowLatencyHandleData {
  const void* owner = nullptr;  // the Buffer::Impl that made it; combine refuses foreign handles
  Engine engine = Engine::low_latency;  // the engine whose combine may use it
  int rank = 0;
  Topology topology;
  int num_experts = 0;
  int local_experts = 0;
  int topk = 0;
  int hidden = 0;
  int64_t max_tokens_per_rank = 0;

  // Send side (this rank's tokens).
  int64_t num_tokens = 0;
  Tensor topk_idx;  // i64 [N, K]: a copy of the dispatch's, to check combine's against

  // Receive side, filled by the receive half (the hook, with return_recv_hook).
  Tensor recv_count;    // i32 [L]
  Tensor layout_range;  // i32 [L, R, 2]
  Tensor src_info;      // i32 [L, R * max]: source token, -1 past recv_count
  Tensor src_slot;      // i32 [L, R * max]: the top-k slot of each row at its source
  std::atomic<bool> received{false};
};

}  // namespace switchyard::detail
