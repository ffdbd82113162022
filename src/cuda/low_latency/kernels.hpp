#pragma once
// Host-side launchers of the CUDA `low_latency` engine's kernels (common/low_latency_protocol.hpp).
// Each call is a send kernel (writes into the peers' heaps, then signals) and a receive kernel
// (bounded waits on the signals, then the copy-out or the reduction); hooks launch the receive
// kernel later. Nothing here synchronises with the host, so every call can be captured in a graph.
//
// The launchers are templates over the transport that reaches peers of other nodes: SingleNode (one
// node: every peer by stores, no transport compiled in) or a device transport
// (transport/device_transport.cuh; instantiated for LoopbackDevice). Peers of this rank's node are
// reached by stores either way.
#include <cuda_runtime.h>

#include <cstdint>

#include "common/low_latency_protocol.hpp"
#include "device/kernel_context.hpp"

namespace switchyard::cuda {

// NOTES: the kernels keep a per-expert table in shared memory (counts, begins); 8192 experts take
// 64 KiB of it, far above today's largest MoE (256 experts).
constexpr int kLowLatencyMaxExperts = 8192;
// NOTES: a dispatch sender stages one token (bf16 row, and its fp8 message) in shared memory;
// 32768 channels keep that under 96 KiB (DeepSeek-V3 has 7168).
constexpr int kLowLatencyMaxHidden = 32768;

// Per-buffer state on the device, so that a replayed CUDA graph advances it (a sequence number
// passed from the host would be frozen into the graph).
struct LowLatencyDeviceState {
  // Low-latency calls (dispatch and combine) whose send half has run; every rank counts alike. A
  // send kernel uses sequence + 1, its last block stores it; the receive kernel that follows reads it.
  uint32_t sequence;
  // Blocks of the running send kernel that have finished their writes; the last one resets it.
  uint32_t send_blocks_done;
  // The sequence of the last dispatch whose topk_idx was refused on the device (ids out of range,
  // or more than max_tokens_per_rank rows for one expert): its send half wrote no rows and signalled
  // zero counts, and its receive half writes no outputs.
  uint32_t refused_sequence;
  // The sequence of the last call in which a peer's signal came with another shape's tag
  // (common::low_latency_signal_of_other_shape): the wait that saw it recorded the refusal, and every other
  // wait of that call's kernels on this rank stops at its next check (low_latency::ShapeRefusal), since words
  // of this rank's shape that the peer's shape does not have would never come. Later calls, of other
  // sequences, ignore it: the Buffer goes on.
  uint32_t mismatched_sequence;
};

// The transport of a one-node buffer: none.
struct SingleNode {};

struct LowLatencyDispatchLaunch {
  common::LowLatencyLayout layout;            // the region (capacities), the same on every rank
  int ranks_per_node;                         // of the topology; num_ranks on one node
  common::LowLatencyDispatchMessage message;  // this call's message (bf16 row, or fp8 row + scales)
  LowLatencyDeviceState* state;
  // Send side.
  const uint16_t* x;            // bf16 [N, H]
  const int64_t* topk_idx;      // [N, K]
  int64_t num_tokens;           // N
  int topk;                     // K
  int num_experts;              // E of the call
  int local_experts;            // L of the call
  int hidden;                   // H
  int64_t max_tokens_per_rank;  // of the call
  bool use_fp8, round_scale, use_ue8m0;
  uint64_t signature;  // the call's shape digest, in every signal's tag (common::low_latency_call_tag)
  // Receive side.
  uint8_t* recv_x;        // [L, R * max, H] bf16 or fp8
  void* recv_x_scales;    // f32 [L, R * max, H / 128], or i32 UE8M0 words [L, R * max, ceil(H / 512)]
  int32_t* recv_count;    // [L]
  int32_t* layout_range;  // [L, R, 2]
  int32_t* src_info;      // [L, R * max]
  int32_t* src_slot;      // [L, R * max] (the handle's)
  // The handle's own copies of layout_range and src_info where those are the caller's tensors, which
  // are borrowed for the call only; null where the handle shares the library's outputs. Written beside
  // the outputs, so that no copy follows the kernel (two copy launches per call cost ranks as threads
  // ~100 us of host time at 128 tokens: bench/NOTES.md, session 11).
  int32_t* kept_layout_range;  // [L, R, 2]
  int32_t* kept_src_info;      // [L, R * max]
  // i64 [R] or null (ExpertMajorDispatchArgs::wait_recv_cost_stats): block 0's count waits add their
  // nanoseconds to the awaited source's entry.
  int64_t* wait_recv_cost_stats;
};

struct LowLatencyCombineLaunch {
  common::LowLatencyLayout layout;
  int ranks_per_node;  // of the topology; num_ranks on one node
  LowLatencyDeviceState* state;
  int num_experts;              // E of the dispatch
  int local_experts;            // L of the dispatch
  int hidden;                   // H' of the expert outputs
  int64_t max_tokens_per_rank;  // of the dispatch
  uint64_t signature;  // the call's shape digest, in every signal's tag (common::low_latency_call_tag)
  // Send side (expert rank): the dispatch's receive layout.
  const uint16_t* y;            // bf16 [L, R * max, H']
  const int32_t* layout_range;  // [L, R, 2]
  const int32_t* src_info;      // [L, R * max]
  const int32_t* src_slot;      // [L, R * max]
  // Across nodes: y's offset in this rank's heap when y lies in it (the combine buffer, zero-copy),
  // else -1 (rows for other nodes are then staged in the combine buffer: puts read from the heap).
  int64_t y_heap_offset;
  // Receive side (home rank).
  const int64_t* topk_idx;    // [N, K]
  const float* topk_weights;  // [N, K]
  int64_t num_tokens;         // N
  int topk;                   // K
  uint16_t* combined_x;       // bf16 [N, H']
  // bf16 [N, H'] each, or null: where each token's fp32 sum starts (common/combine_bias.hpp).
  const uint16_t* bias0;
  const uint16_t* bias1;
  // LogFMT-10 (ExpertMajorCombineArgs::use_logfmt): the send kernel packs each row (cast blocks as
  // 10 bits a value, common/logfmt_wire.hpp) and sends only the packed bytes; the receive kernel
  // accumulates what they decode to (common/logfmt.hpp), bit for bit the CPU engine's.
  bool use_logfmt;
  // i64 [R] or null (ExpertMajorCombineArgs::wait_recv_cost_stats): block 0's signal waits add their
  // nanoseconds to the awaited expert rank's entry.
  int64_t* wait_recv_cost_stats;
};

// Grid sizes, chosen on the host from the GPU and from how many ranks share it.
struct LowLatencyGrid {
  int send_blocks;     // blocks of a combine send kernel (a dispatch sender has one per token chunk)
  int receive_blocks;  // blocks of a receive kernel; all ranks' receive kernels together leave room
                       // for the send kernels they wait for
};

// `Transport`: SingleNode, or transport::LoopbackDevice (explicit instantiations in the .cu files).
template <typename Transport>
void launch_low_latency_dispatch_send(const KernelContext& context, const LowLatencyDispatchLaunch& launch,
                                      const Transport& transport, cudaStream_t stream);
template <typename Transport>
void launch_low_latency_dispatch_receive(const KernelContext& context, const LowLatencyDispatchLaunch& launch,
                                         const Transport& transport, const LowLatencyGrid& grid,
                                         cudaStream_t stream);
template <typename Transport>
void launch_low_latency_combine_send(const KernelContext& context, const LowLatencyCombineLaunch& launch,
                                     const Transport& transport, const LowLatencyGrid& grid,
                                     cudaStream_t stream);
template <typename Transport>
void launch_low_latency_combine_receive(const KernelContext& context, const LowLatencyCombineLaunch& launch,
                                        const Transport& transport, const LowLatencyGrid& grid,
                                        cudaStream_t stream);

// Loads the engine's kernels into `device`'s context (the current device) and sets their
// shared-memory limits: once per device, before any rank launches; idempotent and thread-safe.
void prepare_low_latency_kernels(int device);

}  // namespace switchyard::cuda
