#pragma once
// The `normal` (pipeline) engine's protocol, as types: the heap layout every rank shares, the
// notify record, the ring of token slots with its head/tail, and the message carried in a slot.
// The CPU engine (host threads) and the CUDA engine (kernels) use exactly these types.
//
// Heap of each rank, identical on all ranks for a given call shape:
//   [barrier words: one per peer]
//   [notify records: one per source rank]          written by the source, read by this rank
//   [rings: one per (channel, source rank)]         a source pushes, this rank pops
// Dispatch and combine use the same ring region (they never overlap in time); combine's "source"
// is the expert rank sending results home.
#include "common/atomics.hpp"
#include "common/host_device.hpp"

namespace switchyard::common {

// NOTES: 128 bytes keeps each counter on its own cache line on CPUs and its own L2 sector pair on
// GPUs, so the sender's tail writes never contend with the receiver's head writes.
constexpr size_t kCounterStride = 128;
// Every region and every message field starts 16-byte aligned (the width of a vector copy / TMA).
constexpr size_t kFieldAlignment = 16;
// fp8 rows carry one fp32 scale per this many channels.
constexpr int kScaleBlock = 128;

// Head and tail of one ring. Both live in the receiver's heap: the sender writes `tail` (release)
// after filling slots; the receiver writes `head` (release) after copying them out. Counters count
// tokens since the start of the call and are zeroed by the receiver before the call's first barrier.
struct RingControl {
  uint64_t tail;
  uint8_t pad0[kCounterStride - sizeof(uint64_t)];
  uint64_t head;
  uint8_t pad1[kCounterStride - sizeof(uint64_t)];
};
static_assert(sizeof(RingControl) == 2 * kCounterStride, "RingControl must be two counter lines");

// A ring of `num_slots` fixed-size token slots.
struct Ring {
  RingControl* control;
  uint8_t* slots;
  uint32_t num_slots;
  uint32_t slot_bytes;

  SY_HD uint8_t* slot(uint64_t sequence) const { return slots + (sequence % num_slots) * slot_bytes; }
  SY_HD uint64_t* tail() const { return &control->tail; }
  SY_HD uint64_t* head() const { return &control->head; }
};

// One token in flight during dispatch: its row, fp8 scales, routing for the receiving rank, and
// where it came from. Offsets are computed once per call from the call's shape.
struct DispatchMessage {
  uint32_t row_bytes;    // hidden * element size
  uint32_t num_scales;   // hidden / 128 for fp8, else 0
  uint32_t topk;         // K
  uint32_t has_weights;  // 0 or 1

  SY_HD size_t row_offset() const { return 0; }
  SY_HD size_t scales_offset() const { return align_up(row_bytes, kFieldAlignment); }
  // Local expert id on the receiving rank, or -1.
  SY_HD size_t topk_idx_offset() const {
    return scales_offset() + align_up(num_scales * 4u, kFieldAlignment);
  }
  SY_HD size_t topk_weights_offset() const {
    return topk_idx_offset() + align_up(topk * 4u, kFieldAlignment);
  }
  SY_HD size_t src_token_offset() const {
    return topk_weights_offset() + (has_weights ? align_up(topk * 4u, kFieldAlignment) : 0);
  }
  SY_HD size_t bytes() const { return src_token_offset() + kFieldAlignment; }

  SY_HD uint8_t* row(uint8_t* slot) const { return slot + row_offset(); }
  SY_HD float* scales(uint8_t* slot) const { return reinterpret_cast<float*>(slot + scales_offset()); }
  SY_HD int32_t* topk_idx(uint8_t* slot) const {
    return reinterpret_cast<int32_t*>(slot + topk_idx_offset());
  }
  SY_HD float* topk_weights(uint8_t* slot) const {
    return reinterpret_cast<float*>(slot + topk_weights_offset());
  }
  SY_HD int32_t* src_token(uint8_t* slot) const {
    return reinterpret_cast<int32_t*>(slot + src_token_offset());
  }
};

// One expert-output row on its way home during combine.
struct CombineMessage {
  uint32_t row_bytes;  // hidden * 2 (bf16)
  uint32_t topk;
  uint32_t has_weights;

  SY_HD size_t row_offset() const { return 0; }
  SY_HD size_t topk_weights_offset() const { return align_up(row_bytes, kFieldAlignment); }
  SY_HD size_t bytes() const {
    return topk_weights_offset() + (has_weights ? align_up(topk * 4u, kFieldAlignment) : 0);
  }
  SY_HD uint8_t* row(uint8_t* slot) const { return slot + row_offset(); }
  SY_HD float* topk_weights(uint8_t* slot) const {
    return reinterpret_cast<float*>(slot + topk_weights_offset());
  }
};

// What a source rank tells each destination before dispatch: how many of its tokens go to this
// destination per channel, and how many per local expert of this destination. The record's first
// word (notify_signature) holds a signature of the call, so that ranks calling with different
// shapes fail loudly instead of corrupting each other.
struct NotifyRecord {
  int32_t* channel_counts;  // [num_channels]
  int32_t* expert_counts;   // [local_experts]
};

// Byte offsets of every object in a rank's heap, for one call shape. Pure arithmetic: identical on
// every rank and on host and device.
struct NormalHeapLayout {
  int num_ranks;
  int num_channels;
  int local_experts;
  uint32_t ring_slots;
  uint32_t slot_bytes;

  // Per source: its barrier arrival count, then two stamps of the calls it opened (call_stamp below).
  SY_HD size_t barrier_offset() const { return 0; }
  SY_HD size_t barrier_bytes() const {
    return align_up(3 * static_cast<size_t>(num_ranks) * sizeof(uint64_t), kCounterStride);
  }

  SY_HD size_t notify_record_bytes() const {
    return align_up(sizeof(uint64_t) + (num_channels + local_experts) * sizeof(int32_t), kCounterStride);
  }
  SY_HD size_t notify_offset() const { return barrier_offset() + barrier_bytes(); }
  // Two sets of records, by the parity of the barrier that delivers them: the CUDA fresh dispatch writes its
  // records before its only barrier (cuda/normal/notify_kernel.cu), so a peer one barrier ahead of us writes
  // the next call's set while we still read this one's; never two ahead (no barrier passes without us). The
  // engines that write theirs between two barriers of their own (the CPU's, the internode notify) use set 0.
  SY_HD size_t notify_set_bytes() const { return notify_record_bytes() * num_ranks; }
  SY_HD size_t notify_bytes() const { return 2 * notify_set_bytes(); }

  SY_HD size_t ring_bytes() const {
    return sizeof(RingControl) + align_up(static_cast<size_t>(ring_slots) * slot_bytes, kCounterStride);
  }
  SY_HD size_t rings_offset() const { return notify_offset() + notify_bytes(); }
  SY_HD size_t rings_bytes() const { return ring_bytes() * num_channels * num_ranks; }
  SY_HD size_t total_bytes() const { return rings_offset() + rings_bytes(); }

  // Peer `source` writes its arrival count here in our heap.
  SY_HD uint64_t* barrier_word(uint8_t* heap, int source) const {
    return reinterpret_cast<uint64_t*>(heap + barrier_offset()) + source;
  }
  // Peer `source` writes here in our heap the stamp of the call it opens with its barrier number `epoch`
  // (call_stamp), before it arrives; we compare it with our own call's after the barrier. Two words, by the
  // barrier's parity: a peer can be one barrier ahead of us (writing the next call's stamp while we read
  // this one) but never two, since it cannot pass a barrier before we arrive at it.
  SY_HD uint64_t* call_stamp_word(uint8_t* heap, int source, uint64_t epoch) const {
    return reinterpret_cast<uint64_t*>(heap + barrier_offset()) + static_cast<size_t>(num_ranks) +
           2 * static_cast<size_t>(source) + (epoch & 1);
  }
  // `source`'s record in `heap`, in the set of the barrier numbered `epoch` (its parity; 0: set 0).
  SY_HD uint8_t* notify_record_base(uint8_t* heap, int source, uint64_t epoch = 0) const {
    return heap + notify_offset() + notify_set_bytes() * (epoch & 1) + notify_record_bytes() * source;
  }
  SY_HD NotifyRecord notify_record(uint8_t* heap, int source, uint64_t epoch = 0) const {
    int32_t* counts = reinterpret_cast<int32_t*>(notify_record_base(heap, source, epoch) + sizeof(uint64_t));
    return NotifyRecord{counts, counts + num_channels};
  }
  SY_HD uint64_t* notify_signature(uint8_t* heap, int source, uint64_t epoch = 0) const {
    return reinterpret_cast<uint64_t*>(notify_record_base(heap, source, epoch));
  }
  // The ring in `heap` that `source` pushes to on `channel`.
  SY_HD Ring ring(uint8_t* heap, int channel, int source) const {
    uint8_t* base =
        heap + rings_offset() + ring_bytes() * (static_cast<size_t>(channel) * num_ranks + source);
    return Ring{reinterpret_cast<RingControl*>(base), base + sizeof(RingControl), ring_slots, slot_bytes};
  }
};

// What a rank opening a call with barrier number `epoch` stamps into its peers' heaps: the call's signature
// (core/call_signature.hpp) mixed with the barrier's number, so that a stamp left by an earlier call never
// matches (splitmix64's finaliser; never 0, so a zeroed word never matches either).
SY_HD uint64_t call_stamp(uint64_t signature, uint64_t epoch) {
  uint64_t z = signature + epoch * 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return (z ^ (z >> 31)) | 1;
}

// The signature a call on a dispatch's routing stamps: its own, mixed with the routing's epoch
// (NormalHandleData::routing_epoch), so that calls on the routings of different dispatches differ.
SY_HD uint64_t routed_signature(uint64_t signature, uint64_t routing_epoch) {
  return call_stamp(signature, routing_epoch);
}

// The heap-resident dispatch input (BufferSizing::normal_heap_input_tokens; docs/normal-in-place.md): a
// rank's x rows at `offset` of its heap and, for fp8, their scales after the largest fp8 x, at offsets that
// depend on the Buffer's sizing only, so that a receiver finds token t of source s in s's heap without being
// told. The caller writes x there (Buffer::normal_input) and the dispatch reads it in place.
//
// After the rows, the routing each dispatch leaves there for its receivers to pull by (no ring carries it):
// per destination its send list, the tokens it gets channel by channel (so entry i is row
// first_row(source) + i of the destination's receive order), and the call's topk_idx and topk_weights as
// given ([N, K], K <= max_topk).
struct NormalInputLayout {
  size_t offset;       // from the heap's base
  int64_t max_tokens;  // rows; 0: no such region
  int max_hidden;      // channels of the largest row
  int max_topk;        // the routing's K (sizing.topk)
  int num_ranks;       // R: the send lists

  SY_HD bool present() const { return max_tokens > 0; }
  SY_HD size_t x_offset() const { return offset; }
  // fp8 x [N, H] takes N * H bytes, its scales f32 [N, H / 128] follow the largest fp8 x.
  SY_HD size_t scales_offset() const {
    return offset + align_up(static_cast<size_t>(max_tokens) * max_hidden, kFieldAlignment);
  }
  SY_HD size_t rows_bytes() const {
    const size_t bf16 = static_cast<size_t>(max_tokens) * max_hidden * 2;
    const size_t fp8 =
        scales_offset() - offset + static_cast<size_t>(max_tokens) * (max_hidden / kScaleBlock) * 4;
    return align_up(bf16 > fp8 ? bf16 : fp8, kCounterStride);
  }
  // i32 [R][max_tokens]: row `destination` is that rank's send list.
  SY_HD size_t send_lists_offset() const { return offset + rows_bytes(); }
  SY_HD int32_t* send_list(uint8_t* heap, int destination) const {
    return reinterpret_cast<int32_t*>(heap + send_lists_offset()) +
           static_cast<size_t>(destination) * max_tokens;
  }
  SY_HD const int32_t* send_list(const uint8_t* heap, int destination) const {
    return reinterpret_cast<const int32_t*>(heap + send_lists_offset()) +
           static_cast<size_t>(destination) * max_tokens;
  }
  // i64 [N, K] and f32 [N, K], packed by the call's K.
  SY_HD size_t topk_idx_offset() const {
    return send_lists_offset() + align_up(static_cast<size_t>(num_ranks) * max_tokens * 4, kCounterStride);
  }
  SY_HD size_t topk_weights_offset() const {
    return topk_idx_offset() + align_up(static_cast<size_t>(max_tokens) * max_topk * 8, kCounterStride);
  }
  SY_HD size_t bytes() const {
    if (!present()) return 0;
    return topk_weights_offset() - offset +
           align_up(static_cast<size_t>(max_tokens) * max_topk * 4, kCounterStride);
  }
};

// The heap-resident combine input (BufferSizing::normal_heap_combine_rows; docs/normal-in-place.md): an
// expert rank's outputs y, in its receive order, and their top-k weights, at offsets that depend on the
// Buffer's sizing only; then the table through which every expert rank d tells this (home) rank where its
// rows start in d's receive order, entry [d * max_channels + c] for channel c. A home reads token t's row of
// d in place at that start plus t's slot in (c, d).
struct NormalCombineInputLayout {
  size_t offset;     // from the heap's base
  int64_t max_rows;  // rows of y; 0: no such region
  int max_hidden;    // channels of a row
  int max_topk;      // K of the weights
  int num_ranks;     // R: rows of the table
  int max_channels;  // its columns: any call's channel count fits

  SY_HD bool present() const { return max_rows > 0; }
  SY_HD size_t y_offset() const { return offset; }
  SY_HD size_t weights_offset() const {
    return y_offset() + align_up(static_cast<size_t>(max_rows) * max_hidden * 2, kCounterStride);
  }
  SY_HD size_t first_rows_offset() const {
    return weights_offset() + align_up(static_cast<size_t>(max_rows) * max_topk * 4, kCounterStride);
  }
  SY_HD int32_t* first_rows(uint8_t* heap, int expert_rank) const {
    return reinterpret_cast<int32_t*>(heap + first_rows_offset()) +
           static_cast<size_t>(expert_rank) * max_channels;
  }
  SY_HD size_t bytes() const {
    if (!present()) return 0;
    return first_rows_offset() - offset +
           align_up(static_cast<size_t>(num_ranks) * max_channels * sizeof(int32_t), kCounterStride);
  }
};

// Global expert id `expert` as rank `rank` (of `local_experts` experts) receives it: its local id, or -1
// for another rank's expert (and for -1); the slot's weight goes with it, or 0 with -1. What a ring
// message carries and what the in-place gather writes.
SY_HD int64_t local_expert_id(int64_t expert, int rank, int local_experts) {
  const int64_t first = static_cast<int64_t>(rank) * local_experts;
  return expert >= first && expert < first + local_experts ? expert - first : -1;
}

// The source of receive row `row` in a receive order whose (source, channel) ranges start at
// `recv_channel_start` ([R * C + 1], source-major): the last source whose first range starts at or before
// the row (a source without rows starts where the next one does, and is never the answer). Binary search:
// the in-place gather asks it once per row.
SY_HD int source_of_row(const int32_t* recv_channel_start, int num_ranks, int num_channels, int64_t row) {
  int low = 0, high = num_ranks - 1;
  while (low < high) {
    const int middle = (low + high + 1) / 2;
    if (recv_channel_start[static_cast<int64_t>(middle) * num_channels] <= row) {
      low = middle;
    } else {
      high = middle - 1;
    }
  }
  return low;
}

// Channel c owns source tokens [channel_begin(c), channel_begin(c + 1)): contiguous ranges, so that
// a channel's tokens for one destination land contiguously in rank-major order.
SY_HD int64_t channel_begin(int64_t num_tokens, int num_channels, int channel) {
  return num_tokens * channel / num_channels;
}

}  // namespace switchyard::common
