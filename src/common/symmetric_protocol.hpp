#pragma once
// The `symmetric` engine's protocol, as types (DESIGN.md, "Symmetric engine"): the region it owns in
// every rank's heap, and the barrier's signal words. The CPU engine (host threads) and the CUDA
// engine (kernels) use exactly these types.
//
// Dispatch is one stage: every source publishes its inputs in its own input buffer and writes,
// through map(), each target's workspace (per-expert counts and (token, slot) indices); a barrier;
// then every receiver pulls its rows from the sources' input buffers. The fp8 push (CUDA, where the
// receivers' outputs are reachable) publishes nothing: after the barrier each source reads every target's
// counts, knows where its rows start among each expert's, and writes each token's row, cast once, straight
// into every receiver's outputs; a receiver returns once every source has released the call into its done
// word (as after a zero-copy call), so that no source writes into its outputs any more. Combine is one stage:
// every expert row is pushed into its home rank's combine buffer at [slot][token]; a barrier; every home
// reduces locally.
//
// The region follows the `low_latency` engine's, at the same offset on every rank; its layout is
// fixed by the buffer's sizing (capacities), not by the call:
//   [barrier signals]                       one monotone u64 per source rank: its last barrier
//   [input buffer, half 0][half 1]          this rank's tokens: [token] row, scales, top-k
//   [workspace, half 0][half 1]             counts [local expert][source], then
//                                           indices [local expert][source][position] = (token, slot)
//   [combine buffer, half 0][half 1]        [k slot][token] bf16 rows, on the token's home rank
//   [pull record][done words]              the pull combine's: this rank's y, and one word per source
//                                           (the zero-copy dispatch's done words too)
//   [source record, half 0][half 1]         the dispatch's: where this call's rows of this rank are
//   [heap input]                            optional: x that the caller fills in place, bf16 [max, hidden]
//   [heap output]                           optional: y that the caller fills in place, bf16 [L, rows,
//   hidden]
//   [heap receive]                          optional: fp8 recv_x [L, rows, hidden], then its f32 scales
//                                           [L, rows, hidden / 128]; or bf16 recv_x [L, rows, hidden]
//                                           alone. The sources push into it
// Every rank numbers its symmetric calls (dispatch or combine) alike from 1, and call c uses half
// c % 2. A rank can start call c + 2 (and overwrite half c % 2) only after passing call c + 1's
// barrier, which every rank reaches only after finishing call c (its pulls or its reduction).
//
// The pull combine (Config::symmetric_combine, used where every rank is a thread of one process on
// one device, or anywhere from the heap-resident expert outputs) has no combine buffer and no barrier: each
// rank writes its y's address into its own pull record and releases the call's sequence there; every home
// acquires every record, reduces its tokens from the experts' y directly, then releases the sequence into its
// done word in every peer's heap. A rank returns from the combine only when all its done words reach the
// sequence: no peer reads its y any more, so the caller may overwrite it. Both words are monotone (never
// reset) and hold call sequences, so a stale word is simply lower.
//
// The heap-resident tensors (BufferSizing::symmetric_heap_input, symmetric_heap_output_rows_per_expert;
// Buffer::symmetric_input, symmetric_expert_output) are the zero-copy dispatch's x and the pull combine's y
// at a heap offset instead of an address: a record then says so (SymmetricRowsAt::heap) and a reader adds
// the offset to its own mapping of that rank's heap. Every rank maps every peer's heap, so both paths then
// work with ranks in separate processes and on several GPUs, where plain pointers do not reach. The heap
// receive area (BufferSizing::symmetric_heap_receive_rows_per_expert; Buffer::symmetric_receive) is the
// same for the push's outputs (fp8 or bf16): a receiver announces it at a heap offset, and sources write
// into it.
//
// Every dispatch's source record also carries the call's shape digest: after the barrier each receiver
// compares every source's with its own, and all ranks refuse a call on which they disagree, before
// any row is pulled (the counts and routes written before the barrier are then never read).
//
// The zero-copy dispatch (Config::symmetric_dispatch, same condition; or any bf16 call whose x is the
// heap-resident input) skips the publish copy of bf16
// rows: before the barrier each source writes its source record (x's address and row stride, or 0 when
// it published), which the barrier's release carries to every receiver; receivers pull each row from
// x + token x stride. After its pulls, every rank releases the call into its done word in every peer's
// heap (the same words as the pull combine: a word only grows, since a source's calls are sequential),
// and a rank that announced x returns only when all its done words reach the call: no peer reads x any
// more, so the caller may overwrite it.
//
// The barrier never resets its signals: at barrier b, source s stores b (release) into its word in
// every peer's heap, so after barrier b every word is >= b; a waiter spins (acquire) until each word
// reaches b, and a word still below b names a rank that did not arrive. A store, not an add: every
// rank numbers its barriers alike, so a rank that skipped barriers while masked (Buffer::update_mask:
// masked ranks are neither signalled nor awaited) is in step again at the first one it arrives at.
//
// Rank masks: every wait above skips a masked peer, and nothing is written to one or read from one
// (its memory may be gone); a rank masked in its own view writes to and waits for no one.
#include "common/atomics.hpp"
#include "common/host_device.hpp"
#include "common/sym_heap.hpp"

namespace switchyard::common {

// NOTES: 16 bytes is the width of a vector copy and of TMA alignment; every field starts there.
constexpr size_t kSymmetricAlignment = 16;
// NOTES: each area starts on its own 128-byte line, so signal words never share a line with data.
constexpr size_t kSymmetricAreaAlignment = 128;
constexpr int kSymmetricHalves = 2;

// The half a call uses.
SY_HD int symmetric_half(uint32_t sequence) {
  return static_cast<int>(sequence % kSymmetricHalves);
}

// A routed (token, top-k slot) pair in a target's workspace.
struct SymmetricRoute {
  int32_t token;
  int32_t slot;
};

// One token in a source's input buffer. Offsets follow the call's shape (bf16, or fp8 with fp32
// scales); the token stride is the buffer's capacity.
struct SymmetricToken {
  uint32_t row_bytes;   // hidden * element size
  uint32_t num_scales;  // hidden / 128 with fp8, else 0
  uint32_t topk;        // k of the call

  SY_HD size_t row_offset() const { return 0; }
  SY_HD size_t scales_offset() const { return align_up(row_bytes, kSymmetricAlignment); }
  SY_HD size_t topk_offset() const {
    return scales_offset() + align_up(static_cast<size_t>(num_scales) * sizeof(float), kSymmetricAlignment);
  }
  SY_HD size_t bytes() const {
    return topk_offset() + align_up(static_cast<size_t>(topk) * sizeof(int64_t), kSymmetricAlignment);
  }

  SY_HD uint8_t* row(uint8_t* token) const { return token + row_offset(); }
  SY_HD float* scales(uint8_t* token) const { return reinterpret_cast<float*>(token + scales_offset()); }
  SY_HD int64_t* topk_idx(uint8_t* token) const { return reinterpret_cast<int64_t*>(token + topk_offset()); }
};

// Where a record's rows are (SymmetricSourceRecord::x, SymmetricPullRecord::y).
enum class SymmetricRowsAt : uint32_t {
  input_buffer = 0,  // x only: published into the source's input buffer of the call's half
  address = 1,       // a plain pointer (ranks as threads of one process, on one device)
  heap = 2,          // an offset into the announcing rank's heap (its heap input or heap output area)
};

// What a rank announces of its rows: where they are, and the address or heap offset.
struct SymmetricRows {
  SymmetricRowsAt at = SymmetricRowsAt::input_buffer;
  uint64_t where = 0;
};

// What a rank announces of rows it reads in place: at `heap_offset` in its heap when that is >= 0 (a
// heap-resident tensor), else at `address`.
inline SymmetricRows symmetric_rows_in_place(int64_t heap_offset, const void* address) {
  return heap_offset >= 0 ? SymmetricRows{SymmetricRowsAt::heap, static_cast<uint64_t>(heap_offset)}
                          : SymmetricRows{SymmetricRowsAt::address, reinterpret_cast<uint64_t>(address)};
}

// A record's rows as `reader` sees them; `owner` is the rank that announced them, `where` the record's x
// or y. Null for input_buffer.
SY_HD const uint8_t* symmetric_rows(const SymHeap& heap, int owner, SymmetricRowsAt at, uint64_t where) {
  switch (at) {
    case SymmetricRowsAt::address:
      return reinterpret_cast<const uint8_t*>(where);
    case SymmetricRowsAt::heap:
      return heap.peer_base(owner) + where;
    case SymmetricRowsAt::input_buffer:
      break;
  }
  return nullptr;
}

// Whether rows a peer announced at heap offset `where`, `span_bytes` long, lie inside its heap of
// `heap_bytes` (every rank's heap has this rank's size): a reader checks a record before it follows it,
// so that a corrupt or hostile record never makes it read outside the mapping.
SY_HD bool symmetric_heap_span_fits(uint64_t where, uint64_t span_bytes, uint64_t heap_bytes) {
  return where <= heap_bytes && span_bytes <= heap_bytes - where;
}

// A rank's announcement of its expert outputs for the pull combine, in its own heap. The fields are
// written first, then `sequence` (release); a home that acquires sequence >= its call reads them.
// A peer rewrites them only at its next pull combine, which cannot start before this call's homes
// have released their done words to it.
struct SymmetricPullRecord {
  uint64_t y;               // bf16 [L, C, H']: an address or a heap offset, as y_at says
  int64_t rows_per_expert;  // C of the dispatch
  int32_t hidden;           // H'
  SymmetricRowsAt y_at;     // address or heap
  uint64_t sequence;        // the call, released last
  // CPU backend: the homes' hold on y for this call (cpu/symmetric/pull_combine.cpp: readers, or
  // withdrawn by the owner when it gives up on the call, so that it never returns while a home reads).
  uint64_t lease;
};

// A source's announcement of where the receivers find its rows for one dispatch, in its own heap, in
// the call's half. Written before the source arrives at the dispatch's barrier (whose release carries
// it); the half is rewritten only by call c + 2, as the input buffer is.
struct SymmetricSourceRecord {
  uint64_t x;          // bf16 [N, H] rows: an address or a heap offset, as x_at says (0 with input_buffer:
                       // the rows are in the source's input buffer, published, or an fp8 call)
  int64_t row_stride;  // bytes from one row of x to the next
  uint64_t sequence;   // the call it describes
  // CPU backend: the receivers' hold on x for this call (as SymmetricPullRecord::lease).
  uint64_t lease;
  // The call's shape digest (core/call_signature.hpp); a receiver whose own differs refuses the call
  // before it reads any row.
  uint64_t signature;
  SymmetricRowsAt x_at;
  // The push (cuda/symmetric/push.cuh): where this rank's expert-major outputs are, for every source to
  // write its rows into after the barrier: recv_x [L, C, H] (e4m3, then its f32 scales [L, C, H / 128]; or
  // bf16, scales 0), at addresses or offsets into this rank's heap as recv_at says (input_buffer: this rank
  // takes no pushes), and C. Written with the rest of the record before the barrier.
  SymmetricRowsAt recv_at;
  uint64_t recv_x;
  uint64_t recv_x_scales;
  int64_t recv_capacity;
};

// Byte offsets of everything in the symmetric region, from the buffer's capacities. Pure
// arithmetic: identical on every rank and on host and device.
struct SymmetricLayout {
  size_t region_offset;         // where the region starts in the heap
  int num_ranks;                // R
  int local_experts;            // capacity: local experts per rank
  int topk;                     // capacity: k
  int64_t max_tokens_per_rank;  // capacity: tokens a rank sends per call (and rows per expert per source)
  int hidden;                   // capacity: channels
  uint32_t token_bytes;         // stride of the input buffer (the largest SymmetricToken)
  uint32_t combine_row_bytes;   // stride of combine rows: hidden * 2, aligned
  int64_t heap_input_tokens;    // rows of the heap-resident x (bf16 [rows, hidden]); 0: none
  int64_t heap_output_rows;  // rows per local expert of the heap-resident y (bf16 [L, rows, hidden]); 0: none
  // rows per local expert of the heap-resident dispatch outputs, which the sources push into; 0: none.
  // fp8 (heap_receive_element_bytes 1): e4m3 [L, rows, hidden], then f32 scales [L, rows, hidden / 128];
  // bf16 (2): bf16 [L, rows, hidden], no scales.
  int64_t heap_receive_rows;
  uint32_t heap_receive_element_bytes;

  SY_HD int num_experts() const { return local_experts * num_ranks; }

  SY_HD size_t signals_offset() const { return region_offset; }
  SY_HD size_t signals_bytes() const {
    return align_up(static_cast<size_t>(num_ranks) * sizeof(uint64_t), kSymmetricAreaAlignment);
  }

  SY_HD size_t pull_offset() const { return signals_offset() + signals_bytes(); }
  SY_HD size_t pull_bytes() const {
    return align_up(sizeof(SymmetricPullRecord) + static_cast<size_t>(num_ranks) * sizeof(uint64_t),
                    kSymmetricAreaAlignment);
  }

  SY_HD size_t input_half_bytes() const {
    return align_up(static_cast<size_t>(max_tokens_per_rank) * token_bytes, kSymmetricAreaAlignment);
  }
  SY_HD size_t source_offset() const { return pull_offset() + pull_bytes(); }
  SY_HD size_t source_half_bytes() const {
    return align_up(sizeof(SymmetricSourceRecord), kSymmetricAreaAlignment);
  }
  SY_HD size_t input_offset() const { return source_offset() + kSymmetricHalves * source_half_bytes(); }

  SY_HD size_t counts_bytes() const {
    return align_up(static_cast<size_t>(num_experts()) * sizeof(int32_t), kSymmetricAreaAlignment);
  }
  SY_HD size_t workspace_half_bytes() const {
    return counts_bytes() +
           align_up(static_cast<size_t>(num_experts()) * max_tokens_per_rank * sizeof(SymmetricRoute),
                    kSymmetricAreaAlignment);
  }
  SY_HD size_t workspace_offset() const { return input_offset() + kSymmetricHalves * input_half_bytes(); }

  SY_HD size_t combine_half_bytes() const {
    return align_up(static_cast<size_t>(topk) * max_tokens_per_rank * combine_row_bytes,
                    kSymmetricAreaAlignment);
  }
  SY_HD size_t combine_offset() const {
    return workspace_offset() + kSymmetricHalves * workspace_half_bytes();
  }

  SY_HD size_t heap_input_offset() const {
    return combine_offset() + kSymmetricHalves * combine_half_bytes();
  }
  SY_HD size_t heap_input_bytes() const {
    return align_up(static_cast<size_t>(heap_input_tokens) * static_cast<size_t>(hidden) * 2,
                    kSymmetricAreaAlignment);
  }
  SY_HD size_t heap_output_offset() const { return heap_input_offset() + heap_input_bytes(); }
  SY_HD size_t heap_output_bytes() const {
    return align_up(static_cast<size_t>(local_experts) * static_cast<size_t>(heap_output_rows) *
                        static_cast<size_t>(hidden) * 2,
                    kSymmetricAreaAlignment);
  }

  SY_HD size_t heap_receive_offset() const { return heap_output_offset() + heap_output_bytes(); }
  SY_HD size_t heap_receive_bytes() const {
    return align_up(static_cast<size_t>(local_experts) * static_cast<size_t>(heap_receive_rows) *
                        static_cast<size_t>(hidden) * heap_receive_element_bytes,
                    kSymmetricAreaAlignment);
  }
  SY_HD bool heap_receive_scaled() const { return heap_receive_element_bytes == 1; }
  SY_HD size_t heap_receive_scales_offset() const { return heap_receive_offset() + heap_receive_bytes(); }
  SY_HD size_t heap_receive_scales_bytes() const {
    if (!heap_receive_scaled()) return 0;
    return align_up(static_cast<size_t>(local_experts) * static_cast<size_t>(heap_receive_rows) *
                        static_cast<size_t>(hidden / 128) * sizeof(float),
                    kSymmetricAreaAlignment);
  }

  SY_HD size_t region_bytes() const {
    return heap_receive_scales_offset() + heap_receive_scales_bytes() - region_offset;
  }
  SY_HD size_t end_offset() const { return region_offset + region_bytes(); }

  // In `heap` (a rank's base): the barrier counter that `source` adds into.
  SY_HD uint64_t* signal(uint8_t* heap, int source) const {
    return reinterpret_cast<uint64_t*>(heap + signals_offset()) + source;
  }
  // In `heap` (a rank's base): its pull record.
  SY_HD SymmetricPullRecord* pull_record(uint8_t* heap) const {
    return reinterpret_cast<SymmetricPullRecord*>(heap + pull_offset());
  }
  // In `heap` (a rank's base): its source record of a call in `half` (the dispatch's x).
  SY_HD SymmetricSourceRecord* source_record(uint8_t* heap, int half) const {
    return reinterpret_cast<SymmetricSourceRecord*>(heap + source_offset() + half * source_half_bytes());
  }
  // In `heap` (a rank's base): the last pull call (zero-copy dispatch, or pull combine) for which
  // `source` finished reading this rank's x or y.
  SY_HD uint64_t* pull_done(uint8_t* heap, int source) const {
    return reinterpret_cast<uint64_t*>(heap + pull_offset() + sizeof(SymmetricPullRecord)) + source;
  }
  // In `heap` (a source's base): its published token `token`.
  SY_HD uint8_t* input_token(uint8_t* heap, int half, int64_t token) const {
    return heap + input_offset() + half * input_half_bytes() + static_cast<size_t>(token) * token_bytes;
  }
  // In `heap` (a target's base): how many rows `source` routes to `local_expert` of the target.
  SY_HD int32_t* count(uint8_t* heap, int half, int local_expert, int source) const {
    return reinterpret_cast<int32_t*>(heap + workspace_offset() + half * workspace_half_bytes()) +
           static_cast<size_t>(local_expert) * num_ranks + source;
  }
  // In `heap` (a target's base): the `position`-th (token, slot) that `source` routes to `local_expert`.
  SY_HD SymmetricRoute* route(uint8_t* heap, int half, int local_expert, int source, int64_t position) const {
    size_t index = (static_cast<size_t>(local_expert) * num_ranks + source) * max_tokens_per_rank + position;
    return reinterpret_cast<SymmetricRoute*>(heap + workspace_offset() + half * workspace_half_bytes() +
                                             counts_bytes()) +
           index;
  }
  // In `heap` (a token's home rank): the expert output row of (slot, token).
  SY_HD uint8_t* combine_row(uint8_t* heap, int half, int slot, int64_t token) const {
    size_t index = static_cast<size_t>(slot) * max_tokens_per_rank + token;
    return heap + combine_offset() + half * combine_half_bytes() + index * combine_row_bytes;
  }
};

}  // namespace switchyard::common
