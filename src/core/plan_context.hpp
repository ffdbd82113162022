#pragma once
// What planning a call reads of the Buffer that makes it, and the argument checks that every
// engine's plan (and get_dispatch_layout) shares.
#include <cstdint>

#include "core/buffer_identity.hpp"
#include "switchyard/buffer.hpp"

namespace switchyard::detail {

// NOTES: K beyond 32 has no use in today's MoE models and would only grow the ring slots.
constexpr int kMaxTopk = 32;

// The Buffer's state a plan reads. Planning only reads it: a rejected call leaves the Buffer as it was.
struct PlanContext {
  const BufferOptions& options;
  Device device;      // where the backend computes; every tensor must be there
  detail::BufferId owner;  // the Buffer; handles it did not make are refused
};

// A positive multiple of num_ranks.
void check_num_experts(int num_experts, int num_ranks);
// k, the columns of topk_idx (or topk_weights): 1..kMaxTopk.
void check_topk(int64_t topk);

}  // namespace switchyard::detail
