#pragma once
// The `low_latency` engine's protocol, as types: the region it owns in every rank's heap, the
// message in a dispatch receive slot, and the signal words. The CPU engine (host threads) and the
// CUDA engine (kernels) use exactly these types.
//
// The region follows the `normal` engine's, at the same offset on every rank, and its layout is
// fixed by the buffer's sizing (capacities), not by the call, so that signal words never alias data
// from a call of another shape:
//   [signals, half 0][signals, half 1]            dispatch: [local expert][source rank]
//                                                 combine:  [global expert]
//   [dispatch area, half 0][half 1]               [local expert][source rank][position] slots
//   [combine area, half 0][half 1]                [k slot][token] bf16 rows, on the token's home rank
//   [combine staging]                             this rank's expert outputs (zero-copy combine)
// Consecutive calls (dispatch or combine) alternate halves: a peer can start call c + 2 only after
// this rank sent in call c + 1, which it does only after its receive half of call c has finished.
//
// A signal of call `sequence` (every rank counts its low-latency calls alike, from 1) is
// (sequence << 32) | (count + 1), so a zeroed heap or an older call never matches. Within a node the
// sender stores it, and the CUDA engine never resets signal words. Across nodes (the CPU engine over
// a transport) a signal is a remote add, so the CPU engine's receivers zero each word after reading
// it: nobody writes that word again before the reader's next call has sent to its peers.
#include "common/atomics.hpp"
#include "common/host_device.hpp"

namespace switchyard::common {

// NOTES: 16 bytes is the width of a vector copy and of TMA alignment; every field starts there.
constexpr size_t kLowLatencyAlignment = 16;
// NOTES: each array of signal words starts on its own 128-byte line.
constexpr size_t kLowLatencySignalAlignment = 128;
constexpr int kLowLatencyHalves = 2;

SY_HD uint64_t low_latency_signal(uint32_t sequence, uint32_t count) {
  return (static_cast<uint64_t>(sequence) << 32) | static_cast<uint64_t>(count + 1u);
}
SY_HD bool low_latency_signal_is_for(uint64_t signal, uint32_t sequence) {
  return static_cast<uint32_t>(signal >> 32) == sequence && static_cast<uint32_t>(signal) != 0;
}
SY_HD uint32_t low_latency_signal_count(uint64_t signal) { return static_cast<uint32_t>(signal) - 1u; }
// The half a call uses.
SY_HD int low_latency_half(uint32_t sequence) { return static_cast<int>(sequence % kLowLatencyHalves); }

// One (token, slot) pair in a dispatch receive slot: its row (bf16, or fp8 with fp32 scales), and
// where it came from. Offsets follow the call's shape; the slot stride is the buffer's capacity.
struct LowLatencyDispatchMessage {
  uint32_t row_bytes;   // hidden * element size
  uint32_t num_scales;  // hidden / 128 with fp8, else 0

  SY_HD size_t row_offset() const { return 0; }
  SY_HD size_t scales_offset() const { return align_up(row_bytes, kLowLatencyAlignment); }
  SY_HD size_t source_offset() const {
    return scales_offset() + align_up(static_cast<size_t>(num_scales) * sizeof(float), kLowLatencyAlignment);
  }
  SY_HD size_t bytes() const { return source_offset() + kLowLatencyAlignment; }

  SY_HD uint8_t* row(uint8_t* slot) const { return slot + row_offset(); }
  SY_HD float* scales(uint8_t* slot) const { return reinterpret_cast<float*>(slot + scales_offset()); }
  // The source token index, then the top-k slot it was routed from.
  SY_HD int32_t* src_token(uint8_t* slot) const { return reinterpret_cast<int32_t*>(slot + source_offset()); }
  SY_HD int32_t* src_slot(uint8_t* slot) const { return src_token(slot) + 1; }
};

// Byte offsets of everything in the low-latency region, from the buffer's capacities. Pure
// arithmetic: identical on every rank and on host and device.
struct LowLatencyLayout {
  size_t region_offset;         // where the region starts in the heap
  int num_ranks;                // R
  int local_experts;            // capacity: local experts per rank
  int topk;                     // capacity: k
  int64_t max_tokens_per_rank;  // capacity: tokens a rank sends per call (and per expert)
  int hidden;                   // capacity: channels
  uint32_t dispatch_slot_bytes;  // stride of dispatch receive slots (the largest message)
  uint32_t combine_row_bytes;    // stride of combine rows: hidden * 2, aligned

  SY_HD int num_experts() const { return local_experts * num_ranks; }

  SY_HD size_t dispatch_signal_bytes() const {
    return align_up(static_cast<size_t>(num_experts()) * sizeof(uint64_t), kLowLatencySignalAlignment);
  }
  SY_HD size_t combine_signal_bytes() const { return dispatch_signal_bytes(); }
  SY_HD size_t signals_half_bytes() const { return dispatch_signal_bytes() + combine_signal_bytes(); }
  SY_HD size_t signals_offset() const { return region_offset; }

  SY_HD size_t dispatch_half_bytes() const {
    return align_up(static_cast<size_t>(num_experts()) * max_tokens_per_rank * dispatch_slot_bytes,
                    kLowLatencySignalAlignment);
  }
  SY_HD size_t dispatch_offset() const { return signals_offset() + kLowLatencyHalves * signals_half_bytes(); }

  SY_HD size_t combine_half_bytes() const {
    return align_up(static_cast<size_t>(topk) * max_tokens_per_rank * combine_row_bytes, kLowLatencySignalAlignment);
  }
  SY_HD size_t combine_offset() const { return dispatch_offset() + kLowLatencyHalves * dispatch_half_bytes(); }

  // Room for bf16 [local_experts, R * max_tokens_per_rank, hidden], contiguous for any call shape
  // within the capacities.
  SY_HD size_t staging_bytes() const {
    return align_up(static_cast<size_t>(num_experts()) * max_tokens_per_rank * hidden * 2, kLowLatencySignalAlignment);
  }
  SY_HD size_t staging_offset() const { return combine_offset() + kLowLatencyHalves * combine_half_bytes(); }
  SY_HD size_t region_bytes() const { return staging_offset() + staging_bytes() - region_offset; }
  SY_HD size_t end_offset() const { return region_offset + region_bytes(); }

  // In `heap` (a rank's base): source `source` publishes here how many rows it wrote for
  // `local_expert` of this rank.
  SY_HD uint64_t* dispatch_signal(uint8_t* heap, int half, int local_expert, int source) const {
    return reinterpret_cast<uint64_t*>(heap + signals_offset() + half * signals_half_bytes()) +
           static_cast<size_t>(local_expert) * num_ranks + source;
  }
  // In `heap` (a token's home rank): the rank of `global_expert` publishes here that it sent its rows.
  SY_HD uint64_t* combine_signal(uint8_t* heap, int half, int global_expert) const {
    return reinterpret_cast<uint64_t*>(heap + signals_offset() + half * signals_half_bytes() +
                                       dispatch_signal_bytes()) +
           global_expert;
  }
  SY_HD uint8_t* dispatch_slot(uint8_t* heap, int half, int local_expert, int source, int64_t position) const {
    size_t index = (static_cast<size_t>(local_expert) * num_ranks + source) * max_tokens_per_rank + position;
    return heap + dispatch_offset() + half * dispatch_half_bytes() + index * dispatch_slot_bytes;
  }
  SY_HD uint8_t* combine_row(uint8_t* heap, int half, int slot, int64_t token) const {
    size_t index = static_cast<size_t>(slot) * max_tokens_per_rank + token;
    return heap + combine_offset() + half * combine_half_bytes() + index * combine_row_bytes;
  }
  SY_HD uint8_t* staging(uint8_t* heap) const { return heap + staging_offset(); }
};

}  // namespace switchyard::common
