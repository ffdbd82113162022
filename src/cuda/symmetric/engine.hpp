#pragma once
// The CUDA `symmetric` engine's host side: checks what only the backend knows (grid co-residency,
// alignment, shared-memory tables), allocates outputs stream-ordered, and launches one kernel per
// call (cuda/symmetric/kernels.hpp). No host synchronisation: calls can be captured in CUDA graphs,
// since everything that changes from call to call (the heap half, the barrier's phase) is counted
// on the device.
#include <cuda_runtime.h>

#include "core/engine.hpp"
#include "cuda/backend/call_services.hpp"
#include "cuda/symmetric/kernels.hpp"
#include "device/kernel_context.hpp"

namespace switchyard::cuda {

// How the dispatch's pull moves rows: through the block's TMA pipeline (one producer, one consumer), or
// by every warp of the block copying whole rows with 16-byte loads and stores. NOTES (session 16, one
// H200): the TMA pipeline is bound per operation for short rows (an fp8 row in two operations took 2.1x
// as long), and the warps pull fp8 rows 13-15 % faster (1 and 8 ranks); bf16 rows, bound by HBM either
// way, are 2 % slower by warps. So automatic: warps for fp8 rows, TMA for bf16.
// `push` (and automatic, where it can): calls whose receivers' outputs every rank reaches are not pulled at
// all: every source writes its rows into their receivers (cuda/symmetric/push.cuh), about half the HBM
// traffic; other calls as automatic. Such calls: bf16, and fp8 with f32 scales, both only under
// config.symmetric_dispatch = auto. Where every rank is a thread on one GPU every such call pushes;
// elsewhere those whose outputs lie in the heap receive area (BufferSizing). `tma` or `warps` turn the push
// off (the A/B). NOTES (session 25): the MoE layer's fp8 dispatch at 4096 tokens x 8 ranks 1.5 -> 0.93 ms.
enum class SymmetricPull { automatic, tma, warps, push };

// Whether a call pulls its rows by warps.
bool symmetric_pull_by_warps(SymmetricPull pull, bool fp8);

// How many blocks of a dispatch route its N * K pairs (cuda/symmetric/routing.cuh):
// SWITCHYARD_SYMMETRIC_ROUTING (a tuning override, the A/B): unset or `auto`, `one` (block 0 alone) or
// `every` (every block).
enum class SymmetricRouting { automatic, one_block, every_block };

// SWITCHYARD_SYMMETRIC_ROUTING=auto|one|every; unset or empty: automatic. Throws InvalidArgument naming the
// variable otherwise.
SymmetricRouting symmetric_routing_from_environment();

// The routing blocks of a dispatch of `blocks` blocks with `routing_warps` routing warps a block. Block 0
// alone where the other blocks have work before the barrier (`others_busy`: the bf16 publish's TMA pipeline
// runs in every block from the start), or where each of its routing warps walks its share of the pairs in one
// batch of loads (`pairs` <= routing_warps * 32 * kRoutingBatch): every block routing then takes as long a
// walk a warp and adds a grid sync and every block's exchange row to each expert's sum. Every block
// otherwise. NOTES (session 47): one rank, 128 tokens of top-8 (1024 pairs): 132 blocks routed in 11-14 us,
// of which ~1.2 the grid sync and ~5-8 the sum over 132 exchange rows and the placing walk.
int symmetric_routing_blocks(SymmetricRouting routing, bool others_busy, int64_t pairs, int blocks,
                             int routing_warps);

class SymmetricEngine final : public detail::SymmetricUnit {
 public:
  // `services`: the backend's, which outlives the engine; `owner`: the Buffer, recorded in handles.
  SymmetricEngine(CallServices& services, detail::BufferId owner) : services_(services), owner_(owner) {}
  ~SymmetricEngine() override;
  SymmetricEngine(const SymmetricEngine&) = delete;
  SymmetricEngine& operator=(const SymmetricEngine&) = delete;

  // Once, from the CudaBackend constructor, before any rank can launch (changing a kernel's
  // attributes or allocating later could wait for peers that wait for us): kernel attributes, the
  // occupancy, and this rank's zeroed device counters.
  void prepare(int device, int sm_count);

  // At connect, from what the heap found: the combine path and the dispatch source
  // (Config::symmetric_combine and symmetric_dispatch resolved; pull and zero_copy only where every rank
  // is a thread of this process on this GPU). Throws Unsupported, naming the knob, when pull or
  // zero_copy is forced where it cannot work.
  // `heap_output`: the buffer has heap-resident expert outputs (forcing pull is accepted anywhere then).
  void connect(const Config& config, HeapSharing sharing, int num_ranks, int ranks_on_device,
               bool heap_output);
  SymmetricCombine combine_path() const override { return combine_path_; }
  SymmetricDispatch dispatch_path() const override { return dispatch_path_; }

  LowLatencyDispatchResult dispatch(const detail::SymmetricDispatchPlan& plan) override;
  LowLatencyCombineResult combine(const detail::SymmetricCombinePlan& plan) override;
  // The device reads it: the handle's tables, this rank's heap and mask, and the engine's call count.
  common::SymmetricHomeRows home_rows(const detail::SymmetricCombinePlan& plan) override;
  // A barrier of all ranks on `stream`, one block per rank, in the sequence of the calls' barriers
  // (every rank must make it at the same point of its calls): the MoE layer's, before its combine.
  void barrier(const common::SymmetricLayout& layout, KernelContext context, cudaStream_t stream);

 private:
  // Where a call runs: `stream` for the kernel, `alloc_stream` for its outputs (null: plain
  // allocations), and how many ranks' grids share this GPU.
  struct Launch {
    cudaStream_t stream;
    cudaStream_t alloc_stream;
    int ranks_on_device;
    detail::BufferId owner;  // recorded in handles
  };

  LowLatencyDispatchResult run_dispatch(const detail::SymmetricDispatchPlan& plan, KernelContext context,
                                        const Launch& launch);
  LowLatencyCombineResult run_combine(const detail::SymmetricCombinePlan& plan, KernelContext context,
                                      const Launch& launch);
  // Where a call that `call` started runs.
  Launch launch_of(const CallStart& call) const;
  int blocks_per_rank(int ranks_on_device) const;

  CallServices& services_;
  detail::BufferId owner_;
  int device_ = 0;
  int sm_count_ = 0;
  int blocks_per_sm_ = 0;
  uint32_t store_read_lag_ = 0;  // 0: default_store_read_lag (store_read_lag_from_environment)
  uint32_t piece_bytes_ = 0;     // 0: whole rows up to kMaxPieceBytes (piece_bytes_from_environment)
  SymmetricPull pull_ = SymmetricPull::automatic;           // symmetric_pull_from_environment
  SymmetricRouting routing_ = SymmetricRouting::automatic;  // symmetric_routing_from_environment
  SymmetricDeviceState* state_ = nullptr;
  // Phase stamps of sampled dispatches (SWITCHYARD_SYMMETRIC_STAMPS=1), printed by the destructor.
  DispatchStampRecord* stamps_ = nullptr;
  int stamped_rank_ = -1;
  SymmetricCombine combine_path_ = SymmetricCombine::push;
  SymmetricDispatch dispatch_path_ = SymmetricDispatch::publish;
  // What config.symmetric_dispatch asked for: the push replaces the pull only under `automatic`.
  SymmetricDispatch dispatch_requested_ = SymmetricDispatch::automatic;
  // Whether peers' plain x / y pointers reach (threads of this process on one GPU); otherwise only the
  // heap-resident tensors are read in place.
  bool pointers_shared_ = false;
  // Whether a receiving block can hold every source's x (kMaxZeroCopyRanks).
  bool zero_copy_fits_ = false;
};

// The layout of a call's blocks: per-call tables and TMA stages in kSymmetricSharedBytes. `routing`:
// the dispatch's routing warps need (routing_warps + 1) * E counters. Throws Unsupported naming
// num_experts or hidden when they do not fit. `store_read_lag`: 0 for the default (default_store_read_lag),
// else 1..kMaxStoreReadLag (capped below the stages). `piece_bytes`: 0 for whole rows up to
// kMaxPieceBytes, else the row bytes per stage (a multiple of 16, kMinPieceBytes..kMaxPieceBytes).
SymmetricGrid symmetric_grid(int blocks, int num_ranks, int local_experts, uint32_t row_bytes,
                             uint32_t scale_bytes, bool routing, uint32_t store_read_lag = 0,
                             uint32_t piece_bytes = 0);

// The consumer's store-read lag for `stages` stages when nobody set one.
uint32_t default_store_read_lag(int stages);

// SWITCHYARD_SYMMETRIC_STORE_READ_LAG (a tuning override; unset or empty: 0, the default). Throws
// InvalidArgument naming the variable for anything but an integer 1..kMaxStoreReadLag.
uint32_t store_read_lag_from_environment();

// SWITCHYARD_SYMMETRIC_PIECE_BYTES (a tuning override, NOTES session 16: rows in several TMA operations
// tell a per-operation cost from a per-row one; unset or empty: 0, whole rows). Throws InvalidArgument
// naming the variable for anything but a multiple of 16 in kMinPieceBytes..kMaxPieceBytes.
uint32_t piece_bytes_from_environment();

// SWITCHYARD_SYMMETRIC_PULL=tma|warps (a tuning override; unset or empty: automatic). Throws
// InvalidArgument naming the variable otherwise.
SymmetricPull symmetric_pull_from_environment();

}  // namespace switchyard::cuda
