#pragma once
// Device pieces shared by the `low_latency` kernels: the 16-byte copies' depth, the fp8 cast, the bounded
// wait for a signal word, the send kernels' completion count, and the expert-major row table.
#include <cuda_runtime.h>

#include "common/fp8_cast.hpp"
#include "common/low_latency_protocol.hpp"
#include "common/numeric.hpp"
#include "cuda/low_latency/kernels.hpp"
#include "device/bounded_wait.cuh"
#include "device/fp8_cast.cuh"
#include "device/peer_signal.cuh"
#include "device/ptx.cuh"
#include "device/rank_mask.cuh"
#include "device/warp_copy.cuh"
#include "device/warp_group.cuh"
#include "device/warp_scan.cuh"

namespace switchyard::cuda::low_latency {

constexpr uint32_t kFullWarp = 0xffffffffu;

// NOTES: every kernel of the engine is compiled for at least two 512-thread blocks per SM (at most
// 64 registers a thread): an SM that holds one spinning receive block then always has room for a
// send block of another rank (see LowLatencyEngine::grid).
constexpr int kMinBlocksPerSm = 2;

// The two stages of a call: the send stage, then the receive stage (back to back, or the receive from
// the hook). Each phase is one kernel launched once per stage, with its role picked by this argument:
// DeepEP's profiling helper (bench_kineto) counts a phase's kernels by name and expects one.
enum class Stage : int32_t { send, receive };

// ---- loads and stores ---------------------------------------------------------------------------
// (The PTX wrappers, weak loads and proxy fences included, are device/ptx.cuh's.)

// A word of this buffer's device state that another kernel (earlier on the stream) wrote.
__device__ __forceinline__ uint32_t load_state_word(const uint32_t* word) {
  return *reinterpret_cast<const volatile uint32_t*>(word);
}

// The 16-byte loads each lane of the engine's warp copies (device/warp_copy.cuh) keeps in flight.
// NOTES: 4 (2 KiB per warp) before the stores: with 256 warps per rank and 8 ranks that is 4 MiB in
// flight, above HBM bandwidth times latency. (8 spilled with the engine's old copy at the kernels'
// 64-register cap, kMinBlocksPerSm; with the shared copy ptxas fits 8 without spills in the single-node
// kernels, session 17, but whether deeper is faster has not been timed.)
constexpr int kCopyDepth = 4;

// ---- fp8 ----------------------------------------------------------------------------------------
// (The hardware cast, fp8x2_e4m3, cast_eight_to_fp8 and amax_of_eight, is device/fp8_cast.cuh's.)

// ---- signals ------------------------------------------------------------------------------------

// This call's refusal for a peer's other shape (LowLatencyDeviceState::mismatched_sequence): raised by the
// wait that sees such a signal, watched by every other wait of the call's kernels on this rank. Per call,
// not the rank's abort flag: the Buffer's later calls go on (cuda_backend.cpp reports the refusal as bad
// input), as on the CPU backend.
struct ShapeRefusal {
  uint32_t* word;     // &LowLatencyDeviceState::mismatched_sequence
  uint32_t sequence;  // this call's (LowLatencyDeviceState::sequence as its kernels read it)

  __device__ __forceinline__ bool raised() const { return load_state_word(word) == sequence; }
  __device__ __forceinline__ void raise() const { *reinterpret_cast<volatile uint32_t*>(word) = sequence; }
};

// A signal of this call made with another shape: records it (not a wait) and refuses the call on this rank:
// its other waits stop (`refusal`), and its receive half writes no outputs.
__device__ __forceinline__ void record_other_shape(const KernelContext& context, const WaitSite& site,
                                                   uint32_t tag, uint64_t observed,
                                                   const ShapeRefusal& refusal) {
  const WaitSite mismatch{site.role, common::WaitTarget::call_signature, site.channel, site.peer};
  record_wait_failure(context, mismatch, tag >> 16, static_cast<int64_t>(observed >> 48), 0,
                      /*abort_rank=*/false);
  refusal.raise();
}

// What a wait on a masked peer returns (Buffer::update_mask): the peer is left out of the call.
constexpr int64_t kPeerMasked = -2;

// A wait on `site.peer` ran past the timeout: under Config::mask_ranks_on_timeout the peer is masked
// and the wait returns kPeerMasked; otherwise the timeout is recorded (the rank's waits stop) and -1.
__device__ __forceinline__ int64_t peer_timed_out(const KernelContext& context, const WaitSite& site,
                                                  int64_t expected, int64_t observed, uint64_t waited) {
  if (context.mask_on_timeout) {
    context.mask.mask(site.peer);
    return kPeerMasked;
  }
  record_wait_failure(context, site, expected, observed, waited);
  return -1;
}

// Waits (bounded) until `word` holds the signal of the call tagged `tag` (common::low_latency_call_tag)
// (acquire); returns its count; kPeerMasked when `site.peer` is masked (before or during the wait, or by its
// timeout: peer_timed_out); -1 when the wait failed (this thread recorded a timeout or a peer's call of
// another shape), another wait of the rank failed for good, or the call was refused for another shape.
__device__ __forceinline__ int64_t wait_for_signal(const KernelContext& context, const uint64_t* word,
                                                   uint32_t tag, const WaitSite& site,
                                                   const ShapeRefusal& refusal) {
  uint64_t observed = ld_acquire_peer(context, word);
  if (!common::low_latency_signal_is_for(observed, tag)) {
    const uint64_t start = ptx::globaltimer_ns();
    // NOTES: the clock, the abort flag, the refusal and the mask are read every 64 polls, as in
    // wait_at_least.
    for (uint32_t polls = 1;; ++polls) {
      observed = ld_acquire_peer(context, word);
      if (common::low_latency_signal_is_for(observed, tag)) break;
      if (common::low_latency_signal_of_other_shape(observed, tag)) {
        record_other_shape(context, site, tag, observed, refusal);
        return -1;
      }
      if ((polls & 63) == 0) {
        if (rank_aborted(context) || refusal.raised()) return -1;
        if (context.mask.masked(site.peer)) return kPeerMasked;
        const uint64_t waited = ptx::globaltimer_ns() - start;
        if (waited > context.timeout_ns) {
          return peer_timed_out(context, site, tag & common::kLowLatencySequenceMask,
                                static_cast<int64_t>((observed >> 32) & common::kLowLatencySequenceMask),
                                waited);
        }
      }
    }
  }
  return common::low_latency_signal_count(observed);
}

// A receiver's wait, `wait()`, timed for the wait-time statistics (the launches' wait_recv_cost_stats,
// i64 [R] or null): block 0 adds the wait's nanoseconds to `peer`'s entry; every block waits for the
// same signals, so block 0's waits are the ones counted. The clock is read only when the statistics
// are collected: the waits are on every call's path. Returns what `wait()` returns.
template <typename Wait>
__device__ __forceinline__ auto timed_wait(int64_t* stats, int peer, Wait&& wait) {
  const bool timed = stats != nullptr && blockIdx.x == 0;
  const uint64_t started = timed ? ptx::globaltimer_ns() : 0;
  const auto result = wait();
  if (timed) {
    atomicAdd(reinterpret_cast<unsigned long long*>(stats + peer),
              static_cast<unsigned long long>(ptx::globaltimer_ns() - started));
  }
  return result;
}

// Every thread of every block of a send kernel calls this once all its writes are issued. The
// block that finishes last gets true in all its threads: every block's writes are then ordered
// before whatever that block releases next (the signals).
// NOTES: one counter increment per block (not per row), so the hot path has no atomics.
// The fences are system-scope, or GPU-scope where every rank is on this GPU (device/peer_signal.cuh).
__device__ __forceinline__ bool finish_send_block(const KernelContext& context,
                                                  LowLatencyDeviceState* state) {
  __shared__ int last_block;
  fence_before_peer_signal(context);  // this thread's writes (peers' heaps included) are performed
  __syncthreads();
  if (threadIdx.x == 0) {
    // Release: the block's writes, ordered before this thread by the barrier, before the count.
    fence_before_peer_signal(context);
    const uint32_t finished = atomicAdd(&state->send_blocks_done, 1u) + 1u;
    last_block = finished == gridDim.x ? 1 : 0;
    if (last_block) {
      fence_before_peer_signal(context);  // every block's writes before our signals
      state->send_blocks_done = 0;        // for the next send kernel, which the stream orders after us
    }
  }
  __syncthreads();
  return last_block != 0;
}

// ---- the expert-major row table -----------------------------------------------------------------

// Where the rows of one rank's expert-major receive layout come from, in shared memory: per (local
// expert l, source s) its row count and its first row within the expert (sources in order), and
// per expert its first row in the flattened list of all received rows (experts in order).
struct ExpertMajorTable {
  int32_t* count;         // [L * R]
  int32_t* begin;         // [L * R]
  int32_t* expert_start;  // [L + 1]; expert_start[L] = every received row
  int local_experts;
  int num_ranks;

  __host__ __device__ static size_t shared_bytes(int local_experts, int num_ranks) {
    return sizeof(int32_t) * (2 * static_cast<size_t>(local_experts) * num_ranks + local_experts + 1);
  }
  __device__ static ExpertMajorTable in(void* shared, int local_experts, int num_ranks) {
    ExpertMajorTable table;
    table.count = static_cast<int32_t*>(shared);
    table.begin = table.count + local_experts * num_ranks;
    table.expert_start = table.begin + local_experts * num_ranks;
    table.local_experts = local_experts;
    table.num_ranks = num_ranks;
    return table;
  }

  // Every thread of the block, once `count` is filled and visible: fills `begin` and `expert_start`.
  // Ends with __syncthreads.
  __device__ void build() const {
    for (int l = threadIdx.x; l < local_experts; l += blockDim.x) {
      int32_t rows = 0;
      for (int s = 0; s < num_ranks; ++s) {
        begin[l * num_ranks + s] = rows;
        rows += count[l * num_ranks + s];
      }
      expert_start[l] = rows;  // the expert's total, until the scan below
    }
    __syncthreads();
    if (threadIdx.x < 32) {
      const int32_t rows = warp_exclusive_scan(
          local_experts, [&](int l) { return expert_start[l]; },
          [&](int l, int32_t before) { expert_start[l] = before; });
      if (lane_id() == 0) expert_start[local_experts] = rows;
    }
    __syncthreads();
  }

  __device__ int32_t total_rows() const { return expert_start[local_experts]; }

  struct Row {
    int expert;        // local expert l
    int source;        // source rank s
    int32_t position;  // index among s's rows for l (its slot in the receive area)
    int32_t index;     // index among l's rows (its row in recv_x / y)
  };

  // The `flat`-th received row. Every lane of the warp calls it with the same `flat`.
  __device__ Row locate(int32_t flat) const {
    int low = 0, high = local_experts;  // expert_start[low] <= flat < expert_start[high]
    while (high - low > 1) {
      const int middle = (low + high) / 2;
      if (expert_start[middle] <= flat) {
        low = middle;
      } else {
        high = middle;
      }
    }
    Row row;
    row.expert = low;
    row.index = flat - expert_start[low];
    // The last source whose rows begin at or before the row (an empty source shares its begin with
    // the next one, so the last such source is the one that has rows).
    const int lane = lane_id();
    const bool before = lane < num_ranks && begin[low * num_ranks + lane] <= row.index;
    row.source = 31 - __clz(__ballot_sync(kFullWarp, before));
    row.position = row.index - begin[low * num_ranks + row.source];
    return row;
  }
};

}  // namespace switchyard::cuda::low_latency
