#pragma once
// Host-side launchers of the CUDA `symmetric` engine's kernels (dispatch; combine by push, or by pull
// where every rank is a thread of this process on one device), the grid they run with, and the device
// state they count in. Shared by host (launch) and device code.
//
// Grid: `blocks` blocks per rank of kSymmetricThreads threads, one block per SM (the TMA stages take
// most of its shared memory); the SMs are split evenly among the ranks that share the GPU, since
// every block of every such rank spins in the cross-rank barrier and must be resident at once.
// Warp roles (one function per role in the .cu files):
//   warp 0  pipeline producer: TMA loads into a ring of shared-memory stages;
//   warp 1  pipeline consumer: TMA stores out of the stages (plus per-row extras);
//   warps 2..15 helpers: dispatch routing (block 0 with the bf16 publish, else every block), outputs,
//           the combine reduction; with fp8 every warp casts, after the routing.
// The pull combine has no pipeline: every warp reduces, and its blocks spin only briefly (for the peers'
// records at the start, and in the last block for their done words), but it runs on the same grid.
#include <cuda_runtime.h>

#include <cstdint>

#include "common/symmetric_protocol.hpp"
#include "device/kernel_context.hpp"

namespace switchyard::cuda {

constexpr int kSymmetricThreads = 512;
constexpr int kSymmetricWarps = kSymmetricThreads / 32;
constexpr int kProducerWarp = 0;
constexpr int kConsumerWarp = 1;
constexpr int kFirstHelperWarp = 2;
constexpr int kHelperWarps = kSymmetricWarps - kFirstHelperWarp;
// NOTES: dynamic shared memory of every symmetric block, fixed so that the occupancy (one block per
// SM) computed once at setup holds for every call: per-call tables first, then the TMA stages.
constexpr uint32_t kSymmetricSharedBytes = 200 * 1024;
// NOTES: the tables (counts, routing) may take at most half of it; the rest stays for >= 2 stages.
constexpr uint32_t kSymmetricTableBudget = kSymmetricSharedBytes / 2;
// NOTES: a stage holds a whole DeepSeek row (7168 bf16 = 14 KiB) and up to 32 KiB (GPU.md: 32 KiB
// TMA tiles reach 3.9 TB/s); longer rows travel in pieces.
constexpr uint32_t kMaxPieceBytes = 32 * 1024;
// The smallest piece a tuning override may ask for (piece_bytes_from_environment): below it a row would
// need more stages than a block has.
constexpr uint32_t kMinPieceBytes = 1024;
// NOTES: 32 stages cover small rows (hidden 128 bf16 is 256 bytes) with enough bytes in flight;
// large rows are bounded by shared memory instead.
constexpr int kMaxPipelineStages = 32;
// The most stores a consumer keeps reading shared memory before it frees their stages
// (SymmetricGrid::store_read_lag; the PTX wait is written out for each count up to this).
constexpr uint32_t kMaxStoreReadLag = 16;
// NOTES: pairs loaded per lane before a routing warp walks them (cuda/symmetric/routing.cuh): 8 loads in
// flight hide most of the L2 latency of the top-k ids.
constexpr int kRoutingBatch = 8;
// A source rank writes this as every count of a call it refused (bad top-k ids, or more rows for
// one expert than max_tokens_per_rank): every rank then leaves its outputs untouched.
constexpr int32_t kRefusedCount = INT32_MIN;

// int32 entries of the per-call row tables (cuda/symmetric/tables.cuh): count and begin [L][R],
// start [R][L + 1], total [L].
SY_HD constexpr size_t symmetric_table_ints(int num_ranks, int local_experts) {
  return 2 * static_cast<size_t>(local_experts) * num_ranks +
         static_cast<size_t>(num_ranks) * (local_experts + 1) + local_experts;
}
// The dispatch's tables: the row tables, then the push's begins [E] (where this rank's rows start among
// each expert's, cuda/symmetric/push.cuh).
SY_HD constexpr size_t symmetric_dispatch_table_ints(int num_ranks, int local_experts) {
  return symmetric_table_ints(num_ranks, local_experts) + static_cast<size_t>(local_experts) * num_ranks;
}

// One rank's counters, in its device memory, advanced by the kernels themselves so that replayed
// CUDA graphs continue the sequence (a host argument would be frozen at capture).
struct SymmetricDeviceState {
  uint64_t grid_arrivals;  // arrivals at this rank's grid syncs (grows by the grid size per sync)
  uint64_t barriers;       // cross-rank barriers passed: selects the signal phase and sign
  uint32_t calls;          // symmetric calls made (dispatch or combine); call c uses half c % 2
  uint32_t reserved;
  uint64_t pull_exits;  // blocks of the running pull combine or zero-copy dispatch that finished
                        // (the last resets it)
};

// How a call's blocks are laid out (from the shapes; host-computed, see symmetric_engine.cpp).
struct SymmetricGrid {
  int blocks;            // per rank
  int stages;            // TMA stages per block
  uint32_t stage_bytes;  // one stage: a row piece, plus the row's scales for fp8 (128-aligned)
  uint32_t piece_bytes;  // row bytes per stage (rows longer than this travel in pieces)
  uint32_t table_bytes;  // shared memory before the stages: per-call tables (128-aligned)
  int routing_warps;     // helper warps per routing block that route this rank's tokens (dispatch)
  // Stores the consumer keeps reading shared memory before it frees their stages (1..stages - 1): the
  // rest of the stages are loads in flight. NOTES (session 15): 2, 6 and 12 gave the same pull time.
  uint32_t store_read_lag;
};

// Phase stamps of one block in one dispatch (cuda/symmetric/stamps.cuh; a measurement aid).
constexpr int kSymmetricStampPhases = 13;
constexpr uint32_t kSymmetricStampEvery = 8;    // stamp the dispatch of every 8th call pair
constexpr uint32_t kSymmetricStampSamples = 8;  // keep the last 8 of them
constexpr uint32_t kSymmetricStampBlocks = 64;  // blocks 0..63 of each
struct DispatchStampRecord {
  uint64_t sequence;
  uint64_t at[kSymmetricStampPhases];  // %globaltimer (ns): one clock for every block and rank of a GPU
  uint64_t
      cycles[kSymmetricStampPhases];  // clock64 of the block's SM: finer than %globaltimer within a block
};

struct SymmetricDispatchLaunch {
  common::SymmetricLayout layout;  // the region in every rank's heap
  common::SymmetricToken token;    // the call's token layout in the input buffer
  SymmetricDeviceState* state;
  SymmetricGrid grid;
  // This rank's tokens.
  const uint16_t* x;  // bf16 [N, H]; with x_scales, the bytes of fp8_e4m3 [N, H] (pre-cast rows)
  // The caller's f32 [N, H / 128] scales of pre-cast fp8 x (ExpertMajorDispatchArgs::x_scales), copied
  // into the published tokens with their rows (no cast); null otherwise.
  const float* x_scales;
  int64_t x_row_stride;  // bytes from one row of x to the next
  // Zero-copy (Config::symmetric_dispatch, or x heap-resident; bf16 only): x is not published, the
  // receivers pull its rows in place, and the kernel ends only when they are done
  // (cuda/symmetric/release.cuh). `x_rows` is what the source record announces: x's address, or its offset
  // in this rank's heap (Buffer::symmetric_input), or the input buffer (publish).
  bool zero_copy;
  common::SymmetricRows x_rows;
  uint64_t signature;       // the call's shape digest, published in the source record and compared
  const int64_t* topk_idx;  // [N, K]
  int64_t num_tokens;
  int topk, hidden, num_experts, local_experts;
  int64_t max_tokens_per_rank;  // of the call: at most R times this rows reach an expert
  int64_t capacity;             // C: rows per expert in the outputs (expert_capacity, resolved)
  bool round_scale, use_ue8m0;  // fp8 options (fp8 when token.num_scales > 0)
  // Outputs (expert-major).
  uint8_t* recv_x;        // [L, C, H] bf16 or fp8
  void* recv_x_scales;    // f32 [L, C, H / 128], or i32 UE8M0 words; null without fp8
  int32_t* recv_count;    // [L]: true counts
  int32_t* layout_range;  // [L, R, 2]: true (begin, count)
  int32_t* src_info;      // [L, C]
  int32_t* src_slot;      // [L, C] (the handle's)
  // The handle's own copies of layout_range and src_info where those are the caller's tensors (borrowed
  // for the call only), written beside them; null where the handle shares the library's outputs.
  int32_t* kept_layout_range;  // [L, R, 2]
  int32_t* kept_src_info;      // [L, C]
  // The handle's i32 [4] {overflowed, expert, rows, 0}: always written (block 0), for the combine.
  int32_t* overflow;
  // For the pull combine only (null otherwise), the handle's: i32 [N, K] each pair's position among
  // this rank's rows for its expert (-1 for none), and i32 [E] where this rank's rows start among
  // each expert's rows.
  int32_t* position;
  int32_t* begin;
  // Blocks that route this rank's tokens: 1 (block 0's helpers) or grid.blocks (every block's, when
  // nothing else runs before the barrier and the call has more pairs than block 0 walks in one batch:
  // symmetric_routing_blocks), and where they exchange their counts: the handle's i32
  // [routing_blocks][E + 1] (cuda/symmetric/routing.cuh).
  int routing_blocks;
  int32_t* routing_exchange;
  // [kSymmetricStampSamples][kSymmetricStampBlocks], or null: stamps off (SWITCHYARD_SYMMETRIC_STAMPS).
  DispatchStampRecord* stamps;
  // How the pull moves rows (SymmetricPull, SWITCHYARD_SYMMETRIC_PULL): the TMA pipeline, or every warp
  // copying whole rows with 16-byte loads and stores.
  bool pull_by_warps;
  // The push (cuda/symmetric/push.cuh; bf16, or fp8 with f32 scales; every rank's outputs reachable):
  // nothing is published; after the barrier every warp casts (or copies) this rank's tokens once each and
  // writes them into their receivers' recv_x (and fp8's recv_x_scales), which each receiver announces in its
  // source record as `recv_rows` and `recv_scales` (addresses, or offsets into its heap; 0 for bf16). Needs
  // `position`; the kernel ends only when every source has released the call into our done words.
  bool push;
  common::SymmetricRows recv_rows;
  uint64_t recv_scales;
};
void launch_symmetric_dispatch(const KernelContext& context, const SymmetricDispatchLaunch& launch,
                               cudaStream_t stream);

struct SymmetricCombineLaunch {
  common::SymmetricLayout layout;
  SymmetricDeviceState* state;
  SymmetricGrid grid;
  // Expert side: this rank's expert outputs, rows as its dispatch received them.
  const uint16_t* y;  // bf16 [L, C, H']
  // Pull only: what this rank's pull record announces of y: its address, or its offset in this rank's heap
  // (Buffer::symmetric_expert_output), which homes in other processes can follow.
  common::SymmetricRows y_rows;
  int hidden;  // H'
  int local_experts, topk;
  int64_t max_tokens_per_rank;
  int64_t capacity;             // C of the dispatch
  const int32_t* layout_range;  // [L, R, 2] of the dispatch (true counts)
  const int32_t* src_info;      // [L, C]
  const int32_t* src_slot;      // [L, C]
  const int32_t* overflow;      // the dispatch's {overflowed, expert, rows, 0}: refuse the call if set
  // Pull only: the dispatch's (SymmetricDispatchLaunch::position, begin), and E.
  const int32_t* position;
  const int32_t* begin;
  int num_experts;
  // Home side: this rank's tokens.
  const int64_t* topk_idx;    // [N, K]: slots < 0 are left out
  const float* topk_weights;  // [N, K]
  int64_t num_tokens;
  uint16_t* combined_x;  // [N, H']
  // bf16 [N, H'] each, or null: where each token's fp32 sum starts (common/combine_bias.hpp).
  const uint16_t* bias0;
  const uint16_t* bias1;
  // The expert phase wrote every row into its home's combine buffer (SymmetricCombinePlan::rows_at_home):
  // the push moves nothing and only checks the dispatch's tables, as it would for the rows it pushes.
  bool rows_at_home;
};
void launch_symmetric_combine(const KernelContext& context, const SymmetricCombineLaunch& launch,
                              cudaStream_t stream);
// The most ranks the zero-copy dispatch serves (a block keeps one x address per source in shared
// memory); the host refuses more, naming config.symmetric_dispatch.
constexpr int kMaxZeroCopyRanks = 32;
// The pull combine (cuda/symmetric/pull_combine_kernel.cu): every rank's y is read in place by the homes;
// only where every rank is a thread of this process on this device. Same grid as the others.
void launch_symmetric_pull_combine(const KernelContext& context, const SymmetricCombineLaunch& launch,
                                   cudaStream_t stream);

// A cross-rank barrier of one block (cuda/symmetric/barrier_kernel.cu), numbered with the engine's others.
void launch_symmetric_barrier(const KernelContext& context, const common::SymmetricLayout& layout,
                              SymmetricDeviceState* state, cudaStream_t stream);
void prepare_symmetric_barrier_kernel();

// Each kernel: loaded into the current device's context and its shared-memory attribute set; and
// how many of its blocks one SM holds (occupancy API).
void prepare_symmetric_dispatch_kernel();
void prepare_symmetric_combine_kernel();
void prepare_symmetric_pull_combine_kernel();
int symmetric_dispatch_blocks_per_sm();
int symmetric_combine_blocks_per_sm();
int symmetric_pull_combine_blocks_per_sm();

// Loads both kernels into `device`'s context (the current device) and sets their attributes, before
// any rank launches one (cuda/backend/kernel_preload.hpp): once per device; idempotent, thread-safe.
void prepare_symmetric_kernels(int device);
// Blocks of each symmetric kernel one SM holds at once (the smaller of the two), from the occupancy
// API; 0 if a block does not fit at all.
int symmetric_blocks_per_sm();
// Blocks per rank so that the grids of all `ranks_on_device` ranks sharing GPU `device` are resident
// at once: floor(sm_count * blocks_per_sm / ranks_on_device). Throws Unsupported, naming the
// configuration, when that is less than one.
int symmetric_blocks_per_rank(int sm_count, int blocks_per_sm, int ranks_on_device, int device);

}  // namespace switchyard::cuda
