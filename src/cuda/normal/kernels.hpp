#pragma once
// Host-side launchers of the CUDA `normal` engine's kernels. Each launcher checks the launch.
#include <cuda_runtime.h>

#include "common/normal_protocol.hpp"
#include "common/posted_counts.hpp"
#include "common/scales_layout.hpp"
#include "device/kernel_context.hpp"

namespace switchyard::cuda {

struct LayoutLaunch {
  const int64_t* topk_idx;
  int64_t num_tokens;
  int topk, num_experts, num_ranks, ranks_per_node;
  int32_t* num_tokens_per_rank;    // [R]; the launch clears the counts itself
  int32_t* num_tokens_per_node;    // [nodes]
  int32_t* num_tokens_per_expert;  // [E]
  bool* is_token_in_rank;          // [N, R]
};
// Ids outside [-1, E) are skipped and reported through the error block.
void launch_layout(const KernelContext& context, const LayoutLaunch& launch, cudaStream_t stream);

// Zeroes this rank's rings and waits for all ranks: the opening of a call that needs no counts. Every rank
// must open a call with the same `signature` (the plan's) on the same routing (`routing_epoch`, the handle's
// NormalHandleData::routing_epoch on the device, mixed in by common::routed_signature), or the call fails
// as mismatched.
void launch_begin_call(const KernelContext& context, uint64_t signature, const int64_t* routing_epoch,
                       cudaStream_t stream);

// The opening of a combine whose rows are read in place (docs/normal-in-place.md): as launch_begin_call,
// and before the barrier tells every home rank where its rows start in this rank's receive order
// (`recv_channel_start` [R * C + 1], the dispatch's; written into `input.first_rows` of each home's heap).
void launch_begin_combine_in_place(const KernelContext& context, const int32_t* recv_channel_start,
                                   const common::NormalCombineInputLayout& input, uint64_t signature,
                                   const int64_t* routing_epoch, cudaStream_t stream);

struct NotifyLaunch {
  const bool* is_token_in_rank;  // [N, R]
  bool* routing_copy;            // [N, R] or null: where the scan copies is_token_in_rank (the handle's own)
  const int64_t* topk_idx;       // [N, K]
  // [E]: without topk_idx (topk 0), the caller's per-expert counts (its layout), sent instead.
  const int32_t* num_tokens_per_expert;
  int64_t num_tokens;
  int topk, local_experts, expert_alignment;
  uint64_t signature;
  // Outputs (the handle).
  int64_t* routing_epoch;        // [1]: the number of the barrier that opens this dispatch
  int32_t* recv_channel_start;   // [R * C + 1]
  int32_t* recv_expert_counts;   // [local_experts], aligned
  int32_t* recv_token_count;     // [1]
  int32_t* send_list;            // [R, N]: per destination, its tokens in order
  int32_t* send_channel_prefix;  // [R, C + 1]: per destination, where each channel starts in send_list
  int32_t* send_slot;            // [N, R]: ring index of token t within (its channel, destination), or -1
  // x in the heap: the routing again, in this rank's heap input for the receivers to pull by
  // (common::NormalInputLayout), written before the barrier that follows the scan; else null. The send lists
  // in rows of heap_send_list_stride, topk_idx and topk_weights ([N, K]) as given.
  int32_t* heap_send_lists;
  int64_t heap_send_list_stride;
  int64_t* heap_topk_idx;
  float* heap_topk_weights;
  const float* topk_weights;  // [N, K], with heap_topk_weights
  // SWITCHYARD_NORMAL_COUNTS=poll: the host-mapped mailbox (its device address) that the counts are posted
  // to for the host, and this call's tag (common/posted_counts.hpp); else posted.words is null.
  common::PostedCounts posted;
  int32_t posted_tag;
  // SWITCHYARD_NORMAL_PHASES: the sampled call's clock words (cuda/normal/dispatch_phases.hpp), else null.
  uint64_t* stamps;
};
// `layout`'s column-major scales (the memory of [B, N] f32 at `columns`) written row-major [N, B] at `rows`
// (staged inputs: core/staged_heap_input.hpp).
void launch_transpose_scales(float* rows, const float* columns, const common::ScalesLayout& layout,
                             cudaStream_t stream);

// Resets rings, exchanges counts with every rank (one barrier, which also opens the call) and builds the
// handle's matrices.
void launch_dispatch_notify(const KernelContext& context, const NotifyLaunch& launch, cudaStream_t stream);

// Where a dispatch puts what it receives, in the receive order: the ring dispatch's and the in-place
// gather's.
struct ReceivedRows {
  const int32_t* recv_channel_start;  // [R * C + 1]: where each (source, channel) range starts
  uint8_t* recv_x;
  float* recv_x_scales;      // or null (bf16)
  int64_t* recv_topk_idx;    // [rows, K] or null
  float* recv_topk_weights;  // [rows, K] or null
  int32_t* recv_src_token;   // the new handle's
  int64_t num_output_rows;   // rows of the outputs: M, or num_worst_tokens (padded)
};

struct DispatchLaunch {
  common::DispatchMessage message;  // what the rings carry
  int local_experts;
  // The token's row: hidden * element size, and hidden / 128 scales for fp8 (else 0).
  uint32_t row_bytes, num_scales;
  // Send side.
  const uint8_t* x;
  const float* x_scales;  // laid out as x_scales_layout says (row- or column-major), or null
  common::ScalesLayout x_scales_layout;
  const int64_t* topk_idx;
  const float* topk_weights;
  int64_t num_tokens;
  const int32_t* send_list;
  const int32_t* send_channel_prefix;
  ReceivedRows received;
  uint64_t* stamps;  // a sampled fresh dispatch's clock words (dispatch_phases.hpp), else null
};
void launch_dispatch(const KernelContext& context, const DispatchLaunch& launch, cudaStream_t stream);

// A dispatch with x in the heap (DispatchPlan::x_in_heap; docs/normal-in-place.md) uses no ring: every
// received row is pulled from its source's heap. By the routing the sources left there (their send lists
// for this rank, written by the notify or copied from a cached handle, and their topk_idx and weights), or,
// for a cached dispatch without topk_idx (DispatchPlan::gather_by_handle), by the cached handle's own
// receive order. Runs after the opening barrier (every source's x and routing are written); its last block
// holds the closing barrier (no peer still reads them when the caller refills x).
struct GatherLaunch {
  common::NormalInputLayout input;  // where every source keeps its x, scales and routing
  uint32_t row_bytes, num_scales;   // hidden * element size; hidden / 128 for fp8, else 0
  int topk, local_experts;          // topk 0: no routing is pulled (weights: where recv_topk_weights is set)
  const int32_t* cached_recv_src_token;  // [M]: by the handle (gather_by_handle), else null
  ReceivedRows received;
  // The host could not make the outputs after the count exchange (its allocator threw, a caller's output had
  // the wrong rows): the kernel pulls nothing and writes nothing, but still holds the closing barrier, so
  // that the peers' calls end instead of waiting for this rank until their timeout.
  bool withdrawn;
  uint64_t* blocks_done;  // the engine's (device memory, 0 between calls): close_call_by_last_block's count
  uint64_t* stamps;       // a sampled fresh dispatch's clock words (dispatch_phases.hpp), else null
};
void launch_gather(const KernelContext& context, const GatherLaunch& launch, cudaStream_t stream);

struct CombineLaunch {
  common::CombineMessage message;
  int ranks_per_node;
  // y is the heap-resident combine input (CombinePlan::y_in_heap): nothing is sent; each home reads its
  // tokens' rows and weights from the expert ranks' heaps at `input` (docs/normal-in-place.md).
  bool rows_in_place;
  common::NormalCombineInputLayout input;
  // rows_in_place: the engine's (device memory, 0 between calls): close_call_by_last_block's count, whose
  // last block holds the closing barrier.
  uint64_t* blocks_done;
  // Send side (expert rank).
  const uint8_t* y;
  const float* y_topk_weights;
  const int32_t* recv_channel_start;
  // Receive side (home rank).
  int64_t num_tokens;
  const bool* is_token_in_rank;
  const int32_t* send_slot;
  // [R, C + 1]: where each channel starts among the tokens sent to each rank (rows in place: how many rows
  // a channel reads from each expert rank, to check the range that rank published).
  const int32_t* send_channel_prefix;
  uint16_t* combined_x;
  float* combined_topk_weights;
  // bf16 [N, H] each, or null: where each token's final fp32 sum starts (common/combine_bias.hpp).
  const uint16_t* bias0;
  const uint16_t* bias1;
};
void launch_combine(const KernelContext& context, const CombineLaunch& launch, cudaStream_t stream);

// Loads every kernel of the engine into `device`'s context (the current device) and sets their
// shared-memory attributes: once per device; idempotent, thread-safe. See kernel_preload.hpp.
void prepare_normal_kernels(int device);

// Warps per block of the dispatch kernel for R ranks (a multiple of R).
int normal_warps_per_block(int num_ranks);
// Max blocks of the dispatch/combine kernels that can be resident per SM (for the co-residency check).
int normal_blocks_per_sm(int num_ranks, int row_bytes);

}  // namespace switchyard::cuda
