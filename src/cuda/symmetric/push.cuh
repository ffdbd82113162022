#pragma once
// The push of the `symmetric` dispatch (SymmetricDispatchLaunch::push): after the barrier each source
// writes its own tokens straight into their receivers' expert-major outputs, instead of publishing them
// (fp8: cast into its input buffer) or leaving x in place for the receivers to pull.
//
// Why: a pull moves every routed row through HBM twice (the receiver reads the source's row, then writes
// it), once per (token, expert), and the fp8 cast's publish writes every token once more. The push reads
// each token once and writes it to its k receivers: the minimal bound's bytes.
//   - fp8 (bench/NOTES.md, session 25): the bf16 token cast once in registers; at DeepSeek-V3's shape 2.3 GB
//     of HBM traffic for 8 ranks of 4096 tokens on one GPU instead of 4.5 GB.
//   - bf16 (session 39): the row copied as it is; at 4096 tokens x 8 ranks the dispatch 0.63x the zero-copy
//     pull's (x read once, not once per expert). At 128 tokens it is level with the pull: x stays in L2
//     there, so the pull's re-reads cost no HBM, and both are bound by writing the rows.
//
// Where a row goes: receiver d keeps expert l's rows in source order, each source's in (token, slot) order,
// and only the first C (expert_capacity). The routing already gives each pair its position among this
// rank's rows for its expert (launch.position); the push adds where this rank's rows start there, the
// counts that the participating sources before it wrote into d's workspace before the barrier (the pull
// combine's begins, computed per block after the barrier with the row tables: load_call_tables in
// dispatch_kernel.cu). So row = begin + position, exactly the
// row d's pull would have written, and d's own walk of its rows (after the barrier, for src_info and
// src_slot) finds the same.
//
// Who may push where: bf16 calls, and fp8 calls with f32 scales (UE8M0 packs four scales of different
// casts into one word), and only when every receiver announced its outputs (SymmetricSourceRecord::recv_*)
// at a plain address all ranks share (threads of one process on one GPU) or at an offset into its heap.
// The decision is in the call's signature, so ranks that disagree on it refuse the call before any row
// moves. A receiver ends its dispatch only when every participating source has released the call into its
// done word (cuda/symmetric/release.cuh), after its last push.
#include <cstdint>

#include "common/fp8_cast.hpp"
#include "common/symmetric_protocol.hpp"
#include "cuda/symmetric/kernels.hpp"
#include "cuda/symmetric/routing.cuh"
#include "device/fp8_cast.cuh"
#include "device/peer_signal.cuh"
#include "device/ptx.cuh"
#include "device/rank_mask.cuh"
#include "device/warp_group.cuh"

namespace switchyard::cuda {

// Every receiver's outputs as this rank writes them (null: none announced, or the rank does not take part).
struct PushTargets {
  uint8_t* recv_x[kMaxZeroCopyRanks];
  float* recv_scales[kMaxZeroCopyRanks];
};

// One receiver's announcement from its source record, checked before it is followed: the capacity must be
// the call's, and heap offsets must lie inside its heap (a corrupt or hostile record is never written
// through). Returns false (nothing set) for a record that fails.
__device__ __forceinline__ bool load_push_target(const common::SymHeap& heap,
                                                 const SymmetricDispatchLaunch& launch,
                                                 const common::SymmetricSourceRecord& record, int target,
                                                 PushTargets& targets) {
  const common::SymmetricRowsAt at = record.recv_at;
  const uint64_t recv_x = record.recv_x, recv_scales = record.recv_x_scales;
  if (record.recv_capacity != launch.capacity || at == common::SymmetricRowsAt::input_buffer) return false;
  // bf16 rows have no scales (num_scales 0): only fp8 needs the scales' address.
  const bool scaled = launch.token.num_scales > 0;
  if (at == common::SymmetricRowsAt::address && (recv_x == 0 || (scaled && recv_scales == 0))) return false;
  const uint64_t rows = static_cast<uint64_t>(launch.local_experts) * static_cast<uint64_t>(launch.capacity);
  if (at == common::SymmetricRowsAt::heap &&
      (!common::symmetric_heap_span_fits(recv_x, rows * launch.token.row_bytes, heap.bytes) ||
       !common::symmetric_heap_span_fits(recv_scales, rows * launch.token.num_scales * sizeof(float),
                                         heap.bytes))) {
    return false;
  }
  targets.recv_x[target] = const_cast<uint8_t*>(common::symmetric_rows(heap, target, at, recv_x));
  targets.recv_scales[target] = scaled ? reinterpret_cast<float*>(const_cast<uint8_t*>(
                                             common::symmetric_rows(heap, target, at, recv_scales)))
                                       : nullptr;
  return true;
}

// Lane `lane` of a group of 32 slots: where (token, first_slot + lane)'s row and scales go, or 0 for a slot
// with no row to write (no expert, a rank that does not take part, or past the expert's capacity).
struct PushDestination {
  unsigned long long row = 0;
  unsigned long long scales = 0;
};

__device__ __forceinline__ PushDestination push_destination(const SymmetricDispatchLaunch& launch,
                                                            const PeerBits& participants,
                                                            const PushTargets& targets, const int32_t* begins,
                                                            int64_t token, int slot) {
  PushDestination out;
  if (slot >= launch.topk) return out;
  const int64_t pair = token * launch.topk + slot;
  const int64_t expert = __ldg(launch.topk_idx + pair);
  // Written by this rank's routing warps before the barrier (other blocks): through L2.
  const int32_t position = __ldcg(launch.position + pair);
  if (expert < 0 || expert >= launch.num_experts || position < 0) return out;
  const int target = static_cast<int>(expert / launch.local_experts);
  const int local = static_cast<int>(expert % launch.local_experts);
  if (!participants.in(target) || targets.recv_x[target] == nullptr) return out;
  const int64_t row = static_cast<int64_t>(begins[expert]) + position;
  if (row >= launch.capacity) return out;
  const int64_t index = local * launch.capacity + row;
  out.row = reinterpret_cast<unsigned long long>(targets.recv_x[target] + index * launch.token.row_bytes);
  if (launch.token.num_scales > 0) {
    out.scales =
        reinterpret_cast<unsigned long long>(targets.recv_scales[target] + index * launch.token.num_scales);
  }
  return out;
}

// Casts one bf16 token (common/fp8_cast.hpp's arithmetic, as the publish) and writes it to every slot in
// `slots` (a warp-uniform lane mask of `destination`s). Each lane casts 16 channels of a 128-channel block
// (8 lanes a block, 4 blocks a pass), so that every store is 16 bytes; a round casts all its passes, then
// fetches each slot's destination once and stores every pass there.
__device__ __forceinline__ void push_cast_row(const SymmetricDispatchLaunch& launch, int64_t token,
                                              const PushDestination& destination, uint32_t slots) {
  // NOTES (session 25): Nsight Compute on the first version (2 passes a round, each slot's destination
  // shuffled in every pass): 800 us at one rank, DRAM 59 %, schedulers idle 75 % of cycles, the stalls
  // mostly on the loads (5.5 cycles an instruction) and the shuffles (4.9). 4 passes a round keep 8 loads
  // of 16 bytes per lane in flight and shuffle each destination once per 16 blocks, not per 4.
  constexpr int kPasses = 4;
  constexpr int kBlocksPerPass = 4;
  const int lane = lane_id();
  const int lane_in_block = lane % 8;
  const int num_blocks = launch.hidden / common::kFp8CastBlock;
  const uint16_t* row = launch.x + token * launch.hidden;
  for (int first = 0; first < num_blocks; first += kPasses * kBlocksPerPass) {
    int4 values[kPasses][2];
#pragma unroll
    for (int pass = 0; pass < kPasses; ++pass) {
      const int block = first + pass * kBlocksPerPass + lane / 8;
      values[pass][0] = values[pass][1] = make_int4(0, 0, 0, 0);
      if (block < num_blocks) {
        const int4* from =
            reinterpret_cast<const int4*>(row + block * common::kFp8CastBlock + lane_in_block * 16);
        values[pass][0] = ptx::ld_weak_nc_v4(from);
        values[pass][1] = ptx::ld_weak_nc_v4(from + 1);
      }
    }
    uint4 bytes[kPasses];
    float scales[kPasses];
#pragma unroll
    for (int pass = 0; pass < kPasses; ++pass) {
      float amax = fmaxf(amax_of_eight(values[pass][0]), amax_of_eight(values[pass][1]));
      // The 8 lanes of the block (xor offsets below 8 stay within them).
#pragma unroll
      for (int offset = 4; offset > 0; offset /= 2)
        amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, offset));
      scales[pass] = common::fp8_block_scale(amax, launch.round_scale);
      const uint2 low = cast_eight_to_fp8(values[pass][0], 1.0f / scales[pass]);
      const uint2 high = cast_eight_to_fp8(values[pass][1], 1.0f / scales[pass]);
      bytes[pass] = make_uint4(low.x, low.y, high.x, high.y);
    }
    for (uint32_t left = slots; left != 0; left &= left - 1) {
      const int slot_lane = __ffs(left) - 1;
      uint8_t* to = reinterpret_cast<uint8_t*>(__shfl_sync(0xffffffffu, destination.row, slot_lane));
      float* to_scales = reinterpret_cast<float*>(__shfl_sync(0xffffffffu, destination.scales, slot_lane));
#pragma unroll
      for (int pass = 0; pass < kPasses; ++pass) {
        const int block = first + pass * kBlocksPerPass + lane / 8;
        if (block >= num_blocks) continue;
        *reinterpret_cast<uint4*>(to + block * common::kFp8CastBlock + lane_in_block * 16) = bytes[pass];
        if (lane_in_block == 0) to_scales[block] = scales[pass];
      }
    }
  }
}

// Copies vectors [first_vector, end_vector) of one token's row as they are to every slot in `slots`: a bf16
// row, or one the caller cast (x_scales set: its e4m3 row and f32 scales, which `with_scales` copies).
__device__ __forceinline__ void push_copied_row(const SymmetricDispatchLaunch& launch, int64_t token,
                                                const PushDestination& destination, uint32_t slots,
                                                int first_vector, int end_vector, bool with_scales) {
  // NOTES: 2 loads of 16 bytes in flight per lane, as the pre-cast publish (the kernel's registers).
  constexpr int kDepth = 2;
  const int lane = lane_id();
  const uint32_t row_bytes = launch.token.row_bytes;
  // x is contiguous: a row is row_bytes (the engine pushes only then; x_row_stride is what it announces).
  const int4* row =
      reinterpret_cast<const int4*>(reinterpret_cast<const uint8_t*>(launch.x) + token * row_bytes);
  // The same passes in every lane (the shuffles below need the whole warp); lanes past the range idle.
  for (int pass = first_vector; pass < end_vector; pass += 32 * kDepth) {
    const int first = pass + lane;
    int4 values[kDepth];
#pragma unroll
    for (int u = 0; u < kDepth; ++u) {
      values[u] = make_int4(0, 0, 0, 0);
      if (first + 32 * u < end_vector) values[u] = ptx::ld_weak_nc_v4(row + first + 32 * u);
    }
    for (uint32_t left = slots; left != 0; left &= left - 1) {
      int4* to = reinterpret_cast<int4*>(__shfl_sync(0xffffffffu, destination.row, __ffs(left) - 1));
#pragma unroll
      for (int u = 0; u < kDepth; ++u) {
        if (first + 32 * u < end_vector) to[first + 32 * u] = values[u];
      }
    }
  }
  const int num_scales = static_cast<int>(launch.token.num_scales);
  if (!with_scales || num_scales == 0) return;
  const float* token_scales = launch.x_scales + token * num_scales;
  for (int first = 0; first < num_scales; first += 32) {
    const float scale = first + lane < num_scales ? __ldg(token_scales + first + lane) : 0.0f;
    for (uint32_t left = slots; left != 0; left &= left - 1) {
      float* to = reinterpret_cast<float*>(__shfl_sync(0xffffffffu, destination.scales, __ffs(left) - 1));
      if (first + lane < num_scales) to[first + lane] = scale;
    }
  }
}

// Pieces each copied row is split into, so that every pusher has work where the tokens are fewer than the
// pushers (decode: 128 tokens, ~128-256 warps a rank). A warp's copy of a whole bf16 row (7168 channels:
// 14 passes of two loads, each waiting ~1 us under load) is a chain of dependent waits, and the other warps
// would idle through it. Pieces are whole passes of 32 lanes' 16-byte vectors. 1 where tokens are enough.
__device__ __forceinline__ int push_row_pieces(const SymmetricDispatchLaunch& launch, int pushers) {
  if (launch.num_tokens <= 0 || launch.num_tokens >= pushers) return 1;
  const int vectors = static_cast<int>(launch.token.row_bytes / 16);
  const int most = (vectors + 31) / 32;
  const int wanted = static_cast<int>(pushers / launch.num_tokens);
  return wanted < most ? wanted : most;
}

// Pusher `pusher` of `pushers` (every warp of every block of this rank): tokens (or pieces of copied tokens,
// push_row_pieces) pusher, pusher + pushers, ..., each read once and written to each of its slots' rows, 32
// slots at a time.
__device__ void push_rows(const KernelContext& context, const SymmetricDispatchLaunch& launch,
                          const PeerBits& participants, const PushTargets& targets, const int32_t* begins,
                          int pusher, int pushers) {
  const int lane = lane_id();
  const bool copies = launch.x_scales != nullptr || launch.token.num_scales == 0;
  // Rows cast here stay whole (a warp's cast reads a 128-channel block's 8 lanes together).
  const int wanted_pieces = copies ? push_row_pieces(launch, pushers) : 1;
  const int vectors = static_cast<int>(launch.token.row_bytes / 16);
  // Whole passes of 32 vectors a piece, the last one shorter (and no empty pieces).
  const int piece_vectors = ((vectors + wanted_pieces - 1) / wanted_pieces + 31) / 32 * 32;
  const int pieces = (vectors + piece_vectors - 1) / piece_vectors;
  const int64_t units = launch.num_tokens * pieces;
  for (int64_t unit = pusher; unit < units; unit += pushers) {
    const int64_t token = unit / pieces;
    const int piece = static_cast<int>(unit % pieces);
    for (int first_slot = 0; first_slot < launch.topk; first_slot += 32) {
      const PushDestination destination =
          push_destination(launch, participants, targets, begins, token, first_slot + lane);
      const uint32_t slots = __ballot_sync(0xffffffffu, destination.row != 0);
      if (slots == 0) continue;
      if (copies) {
        const int first_vector = piece * piece_vectors;
        const int end_vector =
            first_vector + piece_vectors < vectors ? first_vector + piece_vectors : vectors;
        push_copied_row(launch, token, destination, slots, first_vector, end_vector, piece == 0);
      } else {
        push_cast_row(launch, token, destination, slots);
      }
    }
  }
  // The rows are ordered before this block's release (release.cuh) at the scope that holds every receiver:
  // the system's where a receiver is on another GPU, this GPU's where all are here (device/peer_signal.cuh;
  // every thread's fence after its stores was a system-wide fence.sc until session 41, whose NOTES compare).
  fence_before_peer_signal(context);
}

}  // namespace switchyard::cuda
