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
  Device device;           // where the backend computes; every tensor must be there
  detail::BufferId owner;  // the Buffer; handles it did not make are refused

  // The device ordinal of views the Buffer hands out of its heap: its CUDA device, 0 on the host.
  int device_index() const { return device == Device::cuda ? options.device : 0; }
};

// NOTES: the largest hidden a call takes; below it the heap's size arithmetic (32-bit row and slot
// bytes, int channel counts) cannot overflow.
constexpr int kMaxHidden = 1 << 20;

// NOTES: far above today's MoE models (256 experts); below it the heap's size arithmetic (int expert
// counts per rank, 64-bit region sizes) cannot overflow.
constexpr int kMaxExperts = 1 << 16;

// The BufferSizing fields that size the heap, within what calls accept (hidden 1..kMaxHidden, k
// 1..kMaxTopk, num_experts 1..kMaxExperts): the public *_heap_bytes() functions take them from callers.
void check_sizing(const BufferSizing& sizing);
// A positive multiple of num_ranks, at most kMaxExperts.
void check_num_experts(int num_experts, int num_ranks);
// k, the columns of topk_idx (or topk_weights): 1..kMaxTopk.
void check_topk(int64_t topk);

}  // namespace switchyard::detail
