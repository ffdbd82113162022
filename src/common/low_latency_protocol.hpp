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
//                                                 across nodes also, after those: the CUDA
//                                                 engine's rows-landed counters, same indexing
//   [dispatch area, half 0][half 1]               [local expert][source rank][position] slots
//   [combine area, half 0][half 1]                [k slot][token] bf16 rows, or with use_logfmt their
//                                                 LogFMT-10 packing (common/logfmt_wire.hpp), on the
//                                                 token's home rank
//   [combine staging]                             this rank's expert outputs (zero-copy combine); across
//                                                 nodes with use_logfmt, the CUDA engine's packed rows
//   across nodes only (the CUDA engine's transport sources, which must lie in the heap):
//   [dispatch send messages]                      [token] this rank's staged messages
//   [dispatch send sources]                       [token][k slot] the 16-byte source fields
// Consecutive calls (dispatch or combine) alternate halves: a peer can start call c + 2 only after
// this rank sent in call c + 1, which it does only after its receive half of call c has finished.
//
// A signal of call `sequence` (every rank counts its low-latency calls alike, from 1) is
// (tag << 32) | (count + 1), the tag being the sequence with the call's shape digest (below), so a
// zeroed heap or an older call never matches. Within a node the
// sender stores it, and the CUDA engine never resets signal words on one node. Across nodes a signal
// is a transport add, so it must land on a zeroed word: the CPU engine's receivers zero each word
// after reading it; the CUDA engine's send kernel of call c + 1 zeroes the other half's words (its
// receive kernel of call c, which read them, has finished, and no peer adds to them again before
// it has seen this rank's signals of call c + 1).
//
// Across nodes (the CUDA engine) puts are unordered, so a row's arrival cannot be read from the
// row: each row is a put with a signal that adds 1 to a rows-landed counter of its (expert,
// source), and the receiver waits for the count signal, then for the counter to reach the count.
#include "common/atomics.hpp"
#include "common/host_device.hpp"

namespace switchyard::common {

// NOTES: 16 bytes is the width of a vector copy and of TMA alignment; every field starts there.
constexpr size_t kLowLatencyAlignment = 16;
// NOTES: each array of signal words starts on its own 128-byte line.
constexpr size_t kLowLatencySignalAlignment = 128;
constexpr int kLowLatencyHalves = 2;

// The upper half of a signal is the call's tag: the low 16 bits of its sequence, and above them 16
// bits of the call's shape digest (core/call_signature.hpp). A receiver so tells "not yet" (another
// sequence) from "the peer made this call with another shape" (this sequence, another digest), and
// refuses the call instead of waiting for words the peer never writes. NOTES: 16 bits of sequence
// suffice because a word is rewritten every second call (it alternates halves).
constexpr uint32_t kLowLatencySequenceMask = 0xffffu;

SY_HD uint32_t low_latency_call_tag(uint32_t sequence, uint64_t signature) {
  const uint32_t folded = static_cast<uint32_t>(
      (signature ^ (signature >> 16) ^ (signature >> 32) ^ (signature >> 48)) & 0xffffu);
  return (sequence & kLowLatencySequenceMask) | (folded << 16);
}
// A signal of this call's sequence but another call's tag: the peer called with another shape.
SY_HD bool low_latency_signal_of_other_shape(uint64_t signal, uint32_t tag) {
  const uint32_t upper = static_cast<uint32_t>(signal >> 32);
  return static_cast<uint32_t>(signal) != 0 &&
         (upper & kLowLatencySequenceMask) == (tag & kLowLatencySequenceMask) && upper != tag;
}

// `tag`: low_latency_call_tag of the call. The half is chosen by the sequence, whose parity the
// tag keeps.
SY_HD uint64_t low_latency_signal(uint32_t sequence, uint32_t count) {
  return (static_cast<uint64_t>(sequence) << 32) | static_cast<uint64_t>(count + 1u);
}
SY_HD bool low_latency_signal_is_for(uint64_t signal, uint32_t sequence) {
  return static_cast<uint32_t>(signal >> 32) == sequence && static_cast<uint32_t>(signal) != 0;
}
SY_HD uint32_t low_latency_signal_count(uint64_t signal) {
  return static_cast<uint32_t>(signal) - 1u;
}
// The half a call uses.
SY_HD int low_latency_half(uint32_t sequence) {
  return static_cast<int>(sequence % kLowLatencyHalves);
}

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
  size_t region_offset;          // where the region starts in the heap
  int num_ranks;                 // R
  int local_experts;             // capacity: local experts per rank
  int topk;                      // capacity: k
  int64_t max_tokens_per_rank;   // capacity: tokens a rank sends per call (and per expert)
  int hidden;                    // capacity: channels
  uint32_t dispatch_slot_bytes;  // stride of dispatch receive slots (the largest message)
  uint32_t combine_row_bytes;    // stride of combine rows: a bf16 row or its LogFMT-10 packing, aligned
  // Ranks per node; 0 (a layout that does not say) or num_ranks: one node, and none of the
  // across-nodes arrays below exist, so a one-node region is what it always was.
  int ranks_per_node;

  SY_HD int num_experts() const { return local_experts * num_ranks; }
  SY_HD bool across_nodes() const { return ranks_per_node > 0 && ranks_per_node < num_ranks; }

  SY_HD size_t dispatch_signal_bytes() const {
    return align_up(static_cast<size_t>(num_experts()) * sizeof(uint64_t), kLowLatencySignalAlignment);
  }
  SY_HD size_t combine_signal_bytes() const { return dispatch_signal_bytes(); }
  // The rows-landed counters of both kinds, after the signals (across nodes only).
  SY_HD size_t landed_bytes() const {
    return across_nodes() ? dispatch_signal_bytes() + combine_signal_bytes() : 0;
  }
  SY_HD size_t signals_half_bytes() const {
    return dispatch_signal_bytes() + combine_signal_bytes() + landed_bytes();
  }
  SY_HD size_t signals_offset() const { return region_offset; }

  SY_HD size_t dispatch_half_bytes() const {
    return align_up(static_cast<size_t>(num_experts()) * max_tokens_per_rank * dispatch_slot_bytes,
                    kLowLatencySignalAlignment);
  }
  SY_HD size_t dispatch_offset() const { return signals_offset() + kLowLatencyHalves * signals_half_bytes(); }

  SY_HD size_t combine_half_bytes() const {
    return align_up(static_cast<size_t>(topk) * max_tokens_per_rank * combine_row_bytes,
                    kLowLatencySignalAlignment);
  }
  SY_HD size_t combine_offset() const {
    return dispatch_offset() + kLowLatencyHalves * dispatch_half_bytes();
  }

  // Room for bf16 [local_experts, R * max_tokens_per_rank, hidden], contiguous for any call shape
  // within the capacities; or for as many packed LogFMT-10 rows at the combine row's stride, where the
  // CUDA engine stages them for puts across nodes.
  SY_HD size_t staging_bytes() const {
    const size_t row_bytes = static_cast<size_t>(hidden) * 2 > combine_row_bytes
                                 ? static_cast<size_t>(hidden) * 2
                                 : static_cast<size_t>(combine_row_bytes);
    return align_up(static_cast<size_t>(num_experts()) * max_tokens_per_rank * row_bytes,
                    kLowLatencySignalAlignment);
  }
  SY_HD size_t staging_offset() const { return combine_offset() + kLowLatencyHalves * combine_half_bytes(); }

  // Across nodes only: the sources of the CUDA engine's transport puts (a put reads its source from
  // this rank's heap). One staged message per token, and the source fields per (token, k slot).
  SY_HD size_t send_messages_bytes() const {
    return across_nodes() ? align_up(static_cast<size_t>(max_tokens_per_rank) * dispatch_slot_bytes,
                                     kLowLatencySignalAlignment)
                          : 0;
  }
  SY_HD size_t send_messages_offset() const { return staging_offset() + staging_bytes(); }
  SY_HD size_t send_sources_bytes() const {
    return across_nodes() ? align_up(static_cast<size_t>(max_tokens_per_rank) * topk * kLowLatencyAlignment,
                                     kLowLatencySignalAlignment)
                          : 0;
  }
  SY_HD size_t send_sources_offset() const { return send_messages_offset() + send_messages_bytes(); }

  SY_HD size_t region_bytes() const { return send_sources_offset() + send_sources_bytes() - region_offset; }
  SY_HD size_t end_offset() const { return region_offset + region_bytes(); }

  // ---- heap offsets (the same on every rank: what a transport put or signal names) ----
  SY_HD size_t dispatch_signal_offset(int half, int local_expert, int source) const {
    return signals_offset() + half * signals_half_bytes() +
           (static_cast<size_t>(local_expert) * num_ranks + source) * sizeof(uint64_t);
  }
  SY_HD size_t combine_signal_offset(int half, int global_expert) const {
    return signals_offset() + half * signals_half_bytes() + dispatch_signal_bytes() +
           static_cast<size_t>(global_expert) * sizeof(uint64_t);
  }
  // Across nodes: rows of `source` that have landed in `local_expert`'s slots of this rank.
  SY_HD size_t dispatch_landed_offset(int half, int local_expert, int source) const {
    return dispatch_signal_offset(half, local_expert, source) + dispatch_signal_bytes() +
           combine_signal_bytes();
  }
  // Across nodes: rows of `global_expert` that have landed in this (home) rank's combine rows.
  SY_HD size_t combine_landed_offset(int half, int global_expert) const {
    return combine_signal_offset(half, global_expert) + dispatch_signal_bytes() + combine_signal_bytes();
  }
  SY_HD size_t dispatch_slot_offset(int half, int local_expert, int source, int64_t position) const {
    size_t index = (static_cast<size_t>(local_expert) * num_ranks + source) * max_tokens_per_rank + position;
    return dispatch_offset() + half * dispatch_half_bytes() + index * dispatch_slot_bytes;
  }
  SY_HD size_t combine_row_offset(int half, int slot, int64_t token) const {
    size_t index = static_cast<size_t>(slot) * max_tokens_per_rank + token;
    return combine_offset() + half * combine_half_bytes() + index * combine_row_bytes;
  }
  SY_HD size_t send_message_offset(int64_t token) const {
    return send_messages_offset() + static_cast<size_t>(token) * dispatch_slot_bytes;
  }
  SY_HD size_t send_source_offset(int64_t token, int slot) const {
    return send_sources_offset() + (static_cast<size_t>(token) * topk + slot) * kLowLatencyAlignment;
  }

  // Transport signal ids: the words of both halves, numbered from signals_offset() in steps of 8
  // bytes (a loopback transport made with that base and stride finds each word in place).
  SY_HD uint32_t signal_id(size_t word_offset) const {
    return static_cast<uint32_t>((word_offset - signals_offset()) / sizeof(uint64_t));
  }
  SY_HD uint32_t signals_per_half() const {
    return static_cast<uint32_t>(signals_half_bytes() / sizeof(uint64_t));
  }
  SY_HD uint32_t first_signal_id(int half) const { return static_cast<uint32_t>(half) * signals_per_half(); }

  // ---- addresses in `heap` (a rank's base) ----
  // Source `source` publishes here how many rows it wrote for `local_expert` of this rank.
  SY_HD uint64_t* dispatch_signal(uint8_t* heap, int half, int local_expert, int source) const {
    return reinterpret_cast<uint64_t*>(heap + dispatch_signal_offset(half, local_expert, source));
  }
  // In a token's home rank: the rank of `global_expert` publishes here that it sent its rows.
  SY_HD uint64_t* combine_signal(uint8_t* heap, int half, int global_expert) const {
    return reinterpret_cast<uint64_t*>(heap + combine_signal_offset(half, global_expert));
  }
  SY_HD uint8_t* dispatch_slot(uint8_t* heap, int half, int local_expert, int source,
                               int64_t position) const {
    return heap + dispatch_slot_offset(half, local_expert, source, position);
  }
  SY_HD uint8_t* combine_row(uint8_t* heap, int half, int slot, int64_t token) const {
    return heap + combine_row_offset(half, slot, token);
  }
  SY_HD uint8_t* staging(uint8_t* heap) const { return heap + staging_offset(); }
};

}  // namespace switchyard::common
