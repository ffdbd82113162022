// The CUDA `symmetric` engine's host side (cuda/symmetric/engine.hpp).
#include "cuda/symmetric/engine.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "common/fp8_cast.hpp"
#include "core/expert_major_plan.hpp"
#include "core/stderr_line.hpp"
#include "core/symmetric_path.hpp"
#include "core/symmetric_sizing.hpp"
#include "cuda/backend/environment_tuning.hpp"
#include "cuda/expert_major/outputs.hpp"
#include "device/cuda_check.hpp"
#include "switchyard/errors.hpp"

namespace switchyard::cuda {

namespace {

constexpr size_t kRowAlignment = common::kSymmetricAlignment;  // TMA and 16-byte vector accesses
// Mixed into a pushed call's signature (SymmetricDispatchLaunch::signature), so that a rank that pulls and
// one that pushes the same call see different shapes and refuse it, rather than wait for rows never sent.
constexpr uint64_t kPushSignature = 0x9e3779b97f4a7c15ull;

size_t align128(size_t bytes) {
  return common::align_up(bytes, 128);
}

void expect_aligned(const void* pointer, const char* name, const char* why) {
  if (reinterpret_cast<uintptr_t>(pointer) % kRowAlignment != 0) {
    throw InvalidArgument(std::string(name) + ": expected a " + std::to_string(kRowAlignment) +
                          "-byte aligned data "
                          "pointer (" +
                          why + "), got " + std::to_string(reinterpret_cast<uintptr_t>(pointer)));
  }
}

}  // namespace

void prepare_symmetric_kernels(int device) {
  // Loading and attributes belong to a device's context: once per device (a process may drive several).
  static std::mutex mutex;
  static std::set<int> prepared;
  const std::lock_guard<std::mutex> lock(mutex);
  if (!prepared.insert(device).second) return;
  prepare_symmetric_dispatch_kernel();
  prepare_symmetric_combine_kernel();
  prepare_symmetric_pull_combine_kernel();
  prepare_symmetric_barrier_kernel();
}

int symmetric_blocks_per_sm() {
  return std::min({symmetric_dispatch_blocks_per_sm(), symmetric_combine_blocks_per_sm(),
                   symmetric_pull_combine_blocks_per_sm()});
}

int symmetric_blocks_per_rank(int sm_count, int blocks_per_sm, int ranks_on_device, int device) {
  const std::string gpu = "GPU " + std::to_string(device);
  if (blocks_per_sm < 1) {
    throw Unsupported("symmetric: a block of the symmetric kernels (" + std::to_string(kSymmetricThreads) +
                      " threads, " + std::to_string(kSymmetricSharedBytes / 1024) +
                      " KiB of shared memory) does not fit on an SM of " + gpu);
  }
  const int resident = sm_count * blocks_per_sm;
  const int blocks = resident / std::max(1, ranks_on_device);
  if (blocks < 1) {
    throw Unsupported(
        "symmetric: " + std::to_string(ranks_on_device) + " ranks share " + gpu + ", whose " +
        std::to_string(sm_count) + " SMs hold " + std::to_string(resident) +
        " blocks of the symmetric kernels at once (" + std::to_string(blocks_per_sm) +
        " per SM); every block of every rank on a GPU spins in the cross-rank barrier and must be "
        "resident at the same time, so at most " +
        std::to_string(resident) + " ranks can share it (a deadlock otherwise)");
  }
  return blocks;
}

uint32_t default_store_read_lag(int stages) {
  // NOTES (session 15): half the stages keep stores reading, the other half loads in flight; the pull
  // measured alike with 2, 6 and 12 (it is bound by rows per microsecond, not by this).
  const int lag = (stages - 1) / 2;
  return static_cast<uint32_t>(std::clamp(lag, 1, static_cast<int>(kMaxStoreReadLag)));
}

uint32_t store_read_lag_from_environment() {
  return tuning_from_environment("SWITCHYARD_SYMMETRIC_STORE_READ_LAG", 1, kMaxStoreReadLag, 1,
                                 "stores in flight per block");
}

SymmetricPull symmetric_pull_from_environment() {
  return choice_from_environment(
      "SWITCHYARD_SYMMETRIC_PULL", SymmetricPull::automatic,
      {{"tma", SymmetricPull::tma}, {"warps", SymmetricPull::warps}, {"push", SymmetricPull::push}},
      "how the dispatch moves rows");
}

SymmetricRouting symmetric_routing_from_environment() {
  return choice_from_environment("SWITCHYARD_SYMMETRIC_ROUTING", SymmetricRouting::automatic,
                                 {{"auto", SymmetricRouting::automatic},
                                  {"one", SymmetricRouting::one_block},
                                  {"every", SymmetricRouting::every_block}},
                                 "which blocks route a dispatch's pairs");
}

int symmetric_routing_blocks(SymmetricRouting routing, bool others_busy, int64_t pairs, int blocks,
                             int routing_warps) {
  if (others_busy || routing == SymmetricRouting::one_block) return 1;
  if (routing == SymmetricRouting::every_block) return blocks;
  const int64_t one_batch = static_cast<int64_t>(routing_warps) * 32 * kRoutingBatch;
  return pairs <= one_batch ? 1 : blocks;
}

bool symmetric_pull_by_warps(SymmetricPull pull, bool fp8) {
  return pull == SymmetricPull::warps ||
         ((pull == SymmetricPull::automatic || pull == SymmetricPull::push) && fp8);
}

uint32_t piece_bytes_from_environment() {
  return tuning_from_environment("SWITCHYARD_SYMMETRIC_PIECE_BYTES", kMinPieceBytes, kMaxPieceBytes, 16,
                                 "row bytes per TMA stage");
}

SymmetricGrid symmetric_grid(int blocks, int num_ranks, int local_experts, uint32_t row_bytes,
                             uint32_t scale_bytes, bool routing, uint32_t store_read_lag,
                             uint32_t piece_bytes) {
  const int num_experts = num_ranks * local_experts;
  const size_t budget_ints = kSymmetricTableBudget / sizeof(int32_t);
  const size_t table_ints = routing ? symmetric_dispatch_table_ints(num_ranks, local_experts)
                                    : symmetric_table_ints(num_ranks, local_experts);
  SymmetricGrid grid{};
  grid.blocks = blocks;
  grid.routing_warps = 0;
  size_t ints = table_ints;
  if (routing) {
    // (routing warps + 1) * E counters: as many warps as fit, at most the helpers.
    const size_t fitting = budget_ints / static_cast<size_t>(std::max(1, num_experts));
    grid.routing_warps = static_cast<int>(std::min<size_t>(kHelperWarps, fitting > 0 ? fitting - 1 : 0));
    ints = std::max(ints, static_cast<size_t>(grid.routing_warps + 1) * num_experts);
  }
  if (ints > budget_ints || (routing && grid.routing_warps < 1)) {
    throw Unsupported("num_experts: the CUDA symmetric engine keeps per-expert tables in " +
                      std::to_string(kSymmetricTableBudget / 1024) +
                      " KiB of shared memory, enough for about " + std::to_string(budget_ints / 3) +
                      " experts with " + std::to_string(num_ranks) + " ranks; got " +
                      std::to_string(num_experts));
  }
  grid.table_bytes = static_cast<uint32_t>(align128(ints * sizeof(int32_t)));
  grid.piece_bytes = std::min(row_bytes, piece_bytes > 0 ? piece_bytes : kMaxPieceBytes);
  grid.stage_bytes = static_cast<uint32_t>(align128(static_cast<size_t>(grid.piece_bytes) + scale_bytes));
  const uint32_t room = kSymmetricSharedBytes - grid.table_bytes;
  grid.stages = static_cast<int>(std::min<uint32_t>(kMaxPipelineStages, room / grid.stage_bytes));
  if (grid.stages < 2) {
    throw Unsupported("hidden: the CUDA symmetric engine needs two TMA stages of " +
                      std::to_string(grid.stage_bytes) + " bytes (a row piece and its fp8 scales) in " +
                      std::to_string(room) +
                      " bytes of shared memory; the scales of this hidden size do not fit");
  }
  const uint32_t lag = store_read_lag > 0 ? store_read_lag : default_store_read_lag(grid.stages);
  grid.store_read_lag = std::min(lag, static_cast<uint32_t>(grid.stages - 1));
  return grid;
}

namespace {

constexpr size_t kStampRecords = static_cast<size_t>(kSymmetricStampSamples) * kSymmetricStampBlocks;

// One line per stamped block (cuda/symmetric/stamps.cuh gives the format; scripts/symmetric_stamps.py
// reads it).
void print_stamps(const DispatchStampRecord* device_records, int rank) {
  std::vector<DispatchStampRecord> records(kStampRecords);
  const cudaError_t copied = cudaMemcpy(records.data(), device_records,
                                        kStampRecords * sizeof(DispatchStampRecord), cudaMemcpyDeviceToHost);
  if (copied != cudaSuccess) {
    cudaGetLastError();
    std::fprintf(stderr, "symmetric: rank %d's phase stamps could not be read: %s\n", rank,
                 cudaGetErrorString(copied));
    return;
  }
  for (size_t index = 0; index < records.size(); ++index) {
    const DispatchStampRecord& record = records[index];
    if (record.sequence == 0) continue;
    std::string line = "symstamp " + std::to_string(record.sequence) + " " + std::to_string(rank) + " " +
                       std::to_string(index % kSymmetricStampBlocks);
    for (uint64_t at : record.at) line += " " + std::to_string(at);
    for (uint64_t cycles : record.cycles) line += " " + std::to_string(cycles);
    detail::write_stderr_line(line);
  }
}

}  // namespace

SymmetricEngine::~SymmetricEngine() {
  if (state_ || stamps_) cudaSetDevice(device_);
  if (stamps_) {
    if (stamped_rank_ >= 0) print_stamps(stamps_, stamped_rank_);
    cudaFree(stamps_);
  }
  if (state_) cudaFree(state_);
}

void SymmetricEngine::prepare(int device, int sm_count) {
  device_ = device;
  sm_count_ = sm_count;
  SY_CUDA_CHECK(cudaSetDevice(device_));
  prepare_symmetric_kernels(device_);
  blocks_per_sm_ = symmetric_blocks_per_sm();
  SY_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&state_), sizeof(SymmetricDeviceState)));
  SY_CUDA_CHECK(cudaMemset(state_, 0, sizeof(SymmetricDeviceState)));
  store_read_lag_ = store_read_lag_from_environment();
  piece_bytes_ = piece_bytes_from_environment();
  routing_ = symmetric_routing_from_environment();
  pull_ = symmetric_pull_from_environment();
  const char* stamps = std::getenv("SWITCHYARD_SYMMETRIC_STAMPS");
  if (stamps != nullptr && std::string(stamps) == "1") {
    SY_CUDA_CHECK(
        cudaMalloc(reinterpret_cast<void**>(&stamps_), kStampRecords * sizeof(DispatchStampRecord)));
    SY_CUDA_CHECK(cudaMemset(stamps_, 0, kStampRecords * sizeof(DispatchStampRecord)));
    std::fprintf(stderr, "symmetric: dispatch phase stamps on (SWITCHYARD_SYMMETRIC_STAMPS=1)\n");
  }
  // The memset ran on the legacy stream, which the ranks' non-blocking streams do not wait for.
  SY_CUDA_CHECK(cudaDeviceSynchronize());
}

void SymmetricEngine::connect(const Config& config, HeapSharing sharing, int num_ranks, int ranks_on_device,
                              bool heap_output) {
  // A home (a receiver) follows the peers' plain y (x) pointers: only threads of this process on this
  // device share them (stream-ordered allocations are not covered by peer access across GPUs).
  const bool threads = sharing == HeapSharing::threads;
  const bool in_place_possible = threads && ranks_on_device == num_ranks;
  pointers_shared_ = in_place_possible;
  std::string found = threads ? "ranks as threads" : "ranks in separate processes (HeapSharing::processes)";
  if (ranks_on_device != num_ranks) {
    found += ", " + std::to_string(ranks_on_device) + " of the " + std::to_string(num_ranks) +
             " ranks on GPU " + std::to_string(device_);
  }
  const std::string needs = "every rank to be a thread of this process (HeapSharing::threads) on one GPU";
  combine_path_ = detail::resolve_symmetric_combine(config.symmetric_combine, in_place_possible, heap_output,
                                                    needs, found);
  // A receiving block keeps one x address per source in shared memory.
  const bool few_enough = num_ranks <= kMaxZeroCopyRanks;
  zero_copy_fits_ = few_enough;
  if (!few_enough)
    found += ", " + std::to_string(num_ranks) + " ranks (at most " + std::to_string(kMaxZeroCopyRanks) + ")";
  dispatch_requested_ = config.symmetric_dispatch;
  dispatch_path_ = detail::resolve_symmetric_dispatch(
      config.symmetric_dispatch, in_place_possible && few_enough,
      needs + " and at most " + std::to_string(kMaxZeroCopyRanks) + " ranks", found);
  // Where auto reads x in place, every receiver's outputs are reachable too: the sources push instead
  // (cuda/symmetric/push.cuh), unless SWITCHYARD_SYMMETRIC_PULL names a pull.
  if (config.symmetric_dispatch == SymmetricDispatch::automatic &&
      dispatch_path_ == SymmetricDispatch::zero_copy &&
      (pull_ == SymmetricPull::automatic || pull_ == SymmetricPull::push)) {
    dispatch_path_ = SymmetricDispatch::push;
  }
}

int SymmetricEngine::blocks_per_rank(int ranks_on_device) const {
  return symmetric_blocks_per_rank(sm_count_, blocks_per_sm_, ranks_on_device, device_);
}

SymmetricEngine::Launch SymmetricEngine::launch_of(const CallStart& call) const {
  return {call.env.stream, call.env.allocation_stream, call.env.sharing_ranks, owner_};
}

LowLatencyDispatchResult SymmetricEngine::dispatch(const detail::SymmetricDispatchPlan& plan) {
  const CallStart call = services_.begin_expert_major_call(plan.args.stream);
  return run_dispatch(plan, call.context, launch_of(call));
}

LowLatencyCombineResult SymmetricEngine::combine(const detail::SymmetricCombinePlan& plan) {
  const CallStart call = services_.begin_expert_major_call(plan.args.stream);
  return run_combine(plan, call.context, launch_of(call));
}

LowLatencyDispatchResult SymmetricEngine::run_dispatch(const detail::SymmetricDispatchPlan& plan,
                                                       KernelContext context, const Launch& launch) {
  const LowLatencyDispatchArgs& args = plan.args;
  const int num_ranks = plan.topology.num_ranks;
  const int64_t local = plan.local_experts;
  const int64_t rows = plan.expert_capacity;  // per local expert: R * max unless the call set one
  const common::SymmetricToken token = detail::symmetric_token(plan.hidden, plan.use_fp8, plan.topk);
  const uint32_t scale_bytes =
      static_cast<uint32_t>(common::align_up(token.num_scales * sizeof(float), common::kSymmetricAlignment));
  const SymmetricGrid grid =
      symmetric_grid(blocks_per_rank(launch.ranks_on_device), num_ranks, plan.local_experts, token.row_bytes,
                     scale_bytes, true, store_read_lag_, piece_bytes_);
  expect_aligned(args.x.data, "x", "rows are read with TMA and 16-byte loads");
  if (args.out_recv_x.defined())
    expect_aligned(args.out_recv_x.data, "out_recv_x", "rows are stored with TMA and 16-byte stores");

  auto handle = detail::make_expert_major_handle(plan, launch.owner, Engine::symmetric);
  // The handle's device tables, carved from one allocation: ranks as threads allocate at the same
  // moment and their stream-ordered allocations serialise in the driver, so each one more per call
  // delays the last rank's launch (bench/NOTES.md, session 5).
  const bool pull = combine_path_ == SymmetricCombine::pull;
  // The push (cuda/symmetric/push.cuh): every receiver's outputs must be reachable by every source, and
  // a receiving block keeps one per rank. Reachable: any outputs at plain addresses where every rank is a
  // thread of this process on one GPU (alike on every rank, whoever allocated them), else outputs in the
  // heap receive area (any process, any GPU; every rank must pass them there, or the call is refused at
  // the signature check). The library's own per-call outputs are stream-ordered allocations that peers'
  // kernels then write, ordered by the kernel's barrier and done words (bench/NOTES.md, session 25:
  // compute-sanitizer's memcheck, which cannot see that order, reports those writes).
  // Only where the caller left the dispatch's path to the library (config.symmetric_dispatch = auto: a
  // named publish or zero_copy keeps the pull), and for fp8 only with f32 scales (UE8M0 words pack four
  // casts' scales).
  const bool recv_in_heap =
      plan.recv_x_heap_offset >= 0 && (!plan.use_fp8 || plan.recv_scales_heap_offset >= 0);
  const bool push_fits =
      dispatch_requested_ == SymmetricDispatch::automatic && (!plan.use_fp8 || !plan.use_ue8m0);
  const bool push = push_fits && zero_copy_fits_ && (pointers_shared_ || recv_in_heap) &&
                    (pull_ == SymmetricPull::automatic || pull_ == SymmetricPull::push);
  const size_t src_slot_bytes = align128(static_cast<size_t>(local * rows) * sizeof(int32_t));
  const size_t overflow_bytes = align128(4 * sizeof(int32_t));
  // Each pair's position among this rank's rows for its expert: the pull combine's, and the push's.
  const size_t position_bytes =
      pull || push ? align128(static_cast<size_t>(plan.num_tokens * plan.topk) * sizeof(int32_t)) : 0;
  const size_t begin_bytes = pull ? align128(static_cast<size_t>(plan.num_experts) * sizeof(int32_t)) : 0;
  // Without the push, fp8 publishes: the cast there halves the bytes every receiver pulls. A heap-resident
  // bf16 x is read in place on any path (every peer maps this heap), where a receiving block can hold its
  // sources.
  const bool x_in_heap = plan.x_heap_offset >= 0 && zero_copy_fits_;
  const bool zero_copy =
      !plan.use_fp8 && !push && (x_in_heap || dispatch_path_ == SymmetricDispatch::zero_copy);
  // Every block routes where nothing else needs the blocks during the routing: with nothing to publish
  // (bench/NOTES.md, session 5: block 0 alone took ~110 us for 4096 tokens of top-8, while every other
  // block waited at the barrier), and with fp8, whose cast (or copy) every warp does after the routing
  // (session 14: block 0 alone took 918 us for 32768 tokens of top-8, the casts long done), unless the call's
  // pairs fit one batch of block 0's routing warps (symmetric_routing_blocks). The bf16 publish keeps block 0
  // alone: its TMA pipeline runs in every block from the start.
  const int routing_blocks =
      symmetric_routing_blocks(routing_, !(zero_copy || push || plan.use_fp8), plan.num_tokens * plan.topk,
                               grid.blocks, grid.routing_warps);
  const size_t exchange_bytes = align128(static_cast<size_t>(routing_blocks) *
                                         (static_cast<size_t>(plan.num_experts) + 1) * sizeof(int32_t));
  // The handle's own copies of the caller's out_layout_range / out_src_info, which are borrowed for
  // this call only (the kernel writes them beside the outputs); none where the library allocates them.
  const size_t tables_before_kept =
      src_slot_bytes + overflow_bytes + position_bytes + begin_bytes + exchange_bytes;
  const size_t kept_layout_range_bytes =
      args.out_layout_range.defined() ? align128(static_cast<size_t>(local * num_ranks * 2) * sizeof(int32_t))
                                      : 0;
  const size_t kept_src_info_bytes =
      args.out_src_info.defined() ? align128(static_cast<size_t>(local * rows) * sizeof(int32_t)) : 0;
  const Tensor tables = Tensor::empty(
      DType::i32,
      {static_cast<int64_t>((tables_before_kept + kept_layout_range_bytes + kept_src_info_bytes) / 4)},
      Device::cuda, device_, launch.alloc_stream);
  handle->src_slot = Tensor::part_of(tables, 0, DType::i32, {local, rows});
  handle->overflow = Tensor::part_of(tables, src_slot_bytes, DType::i32, {4});
  if (pull) {
    handle->position =
        Tensor::part_of(tables, src_slot_bytes + overflow_bytes, DType::i32, {plan.num_tokens, plan.topk});
    handle->begin = Tensor::part_of(tables, src_slot_bytes + overflow_bytes + position_bytes, DType::i32,
                                    {plan.num_experts});
  }

  LowLatencyDispatchResult result = expert_major_dispatch_outputs(plan, device_, launch.alloc_stream);
  handle->layout_range = kept_layout_range_bytes > 0
                             ? Tensor::part_of(tables, tables_before_kept, DType::i32,
                                               {local, static_cast<int64_t>(num_ranks), 2})
                             : result.layout_range;
  handle->src_info =
      kept_src_info_bytes > 0
          ? Tensor::part_of(tables, tables_before_kept + kept_layout_range_bytes, DType::i32, {local, rows})
          : result.src_info;

  SymmetricDispatchLaunch kernel{};
  kernel.layout = plan.layout;
  kernel.token = token;
  kernel.state = state_;
  kernel.grid = grid;
  kernel.x = args.x.as<const uint16_t>();
  kernel.x_scales = plan.x_fp8 ? args.x_scales.as<const float>() : nullptr;  // pre-cast rows: copied
  kernel.x_row_stride = static_cast<int64_t>(plan.hidden) * 2;  // x is contiguous (core checks it)
  kernel.zero_copy = zero_copy;
  kernel.pull_by_warps = symmetric_pull_by_warps(pull_, plan.use_fp8);
  if (zero_copy)
    kernel.x_rows = common::symmetric_rows_in_place(x_in_heap ? plan.x_heap_offset : -1, args.x.data);
  // Ranks that disagree on the push (its conditions are per rank) refuse the call at the signature check.
  kernel.signature = push ? plan.signature ^ kPushSignature : plan.signature;
  kernel.push = push;
  if (push) {
    kernel.recv_rows =
        common::symmetric_rows_in_place(recv_in_heap ? plan.recv_x_heap_offset : -1, result.recv_x.data());
    kernel.recv_scales = !plan.use_fp8  ? 0  // bf16 rows carry no scales
                         : recv_in_heap ? static_cast<uint64_t>(plan.recv_scales_heap_offset)
                                        : reinterpret_cast<uint64_t>(result.recv_x_scales.data());
  }
  kernel.routing_blocks = routing_blocks;
  kernel.routing_exchange =
      tables.as<int32_t>() +
      (src_slot_bytes + overflow_bytes + position_bytes + begin_bytes) / sizeof(int32_t);
  kernel.topk_idx = args.topk_idx.as<const int64_t>();
  kernel.num_tokens = plan.num_tokens;
  kernel.topk = plan.topk;
  kernel.hidden = plan.hidden;
  kernel.num_experts = plan.num_experts;
  kernel.local_experts = plan.local_experts;
  kernel.max_tokens_per_rank = plan.max_tokens_per_rank;
  kernel.capacity = plan.expert_capacity;
  kernel.round_scale = plan.round_scale;
  kernel.use_ue8m0 = plan.use_ue8m0;
  kernel.recv_x = result.recv_x.as<uint8_t>();
  kernel.recv_x_scales = result.recv_x_scales.defined() ? result.recv_x_scales.data() : nullptr;
  kernel.recv_count = result.recv_count.as<int32_t>();
  kernel.layout_range = result.layout_range.as<int32_t>();
  kernel.src_info = result.src_info.as<int32_t>();
  kernel.src_slot = handle->src_slot.as<int32_t>();
  kernel.kept_layout_range = kept_layout_range_bytes > 0 ? handle->layout_range.as<int32_t>() : nullptr;
  kernel.kept_src_info = kept_src_info_bytes > 0 ? handle->src_info.as<int32_t>() : nullptr;
  kernel.overflow = handle->overflow.as<int32_t>();
  kernel.position = pull   ? handle->position.as<int32_t>()
                    : push ? Tensor::part_of(tables, src_slot_bytes + overflow_bytes, DType::i32,
                                             {plan.num_tokens, plan.topk})
                                 .as<int32_t>()
                           : nullptr;
  kernel.begin = pull ? handle->begin.as<int32_t>() : nullptr;
  kernel.stamps = stamps_;
  stamped_rank_ = plan.rank;
  // Timeout reports count this engine's barriers.
  context.barrier_epoch = &state_->barriers;
  launch_symmetric_dispatch(context, kernel, launch.stream);
  handle->received.store(true, std::memory_order_release);
  result.handle = LowLatencyHandle(handle);
  return result;
}

LowLatencyCombineResult SymmetricEngine::run_combine(const detail::SymmetricCombinePlan& plan,
                                                     KernelContext context, const Launch& launch) {
  const LowLatencyCombineArgs& args = plan.args;
  const detail::ExpertMajorHandleData& handle = *plan.handle;
  const int num_ranks = plan.topology.num_ranks;
  const uint32_t row_bytes = static_cast<uint32_t>(plan.hidden) * 2;
  // Rows already home: the push combine's kernel, which then only checks the tables, waits and reduces.
  const bool pull = combine_path_ == SymmetricCombine::pull && !plan.rows_at_home;
  if (pull && !handle.position.defined()) {
    throw InvalidArgument(
        "handle: expected a dispatch made for the pull combine, got one without its row "
        "positions (config.symmetric_combine changed between dispatch and combine?)");
  }
  if (pull) detail::check_pull_reaches_y(plan, pointers_shared_);
  const SymmetricGrid grid =
      symmetric_grid(blocks_per_rank(launch.ranks_on_device), num_ranks, handle.local_experts, row_bytes, 0,
                     false, store_read_lag_, piece_bytes_);
  if (!plan.rows_at_home) expect_aligned(plan.y, "x", "expert rows are read with TMA and 16-byte loads");
  if (args.out_combined_x.defined()) {
    expect_aligned(args.out_combined_x.data, "out_combined_x", "rows are written with 16-byte stores");
  }

  LowLatencyCombineResult result;
  result.combined_x = output_or_allocate(args.out_combined_x, DType::bf16, {handle.num_tokens, plan.hidden},
                                         device_, launch.alloc_stream);

  SymmetricCombineLaunch kernel{};
  kernel.layout = plan.layout;
  kernel.state = state_;
  kernel.grid = grid;
  kernel.y = plan.y;
  kernel.y_rows = common::symmetric_rows_in_place(plan.y_heap_offset, plan.y);
  kernel.hidden = plan.hidden;
  kernel.local_experts = handle.local_experts;
  kernel.topk = handle.topk;
  kernel.max_tokens_per_rank = handle.max_tokens_per_rank;
  kernel.capacity = handle.rows_per_expert();
  kernel.overflow = handle.overflow.as<const int32_t>();
  kernel.layout_range = handle.layout_range.as<const int32_t>();
  kernel.src_info = handle.src_info.as<const int32_t>();
  kernel.src_slot = handle.src_slot.as<const int32_t>();
  kernel.topk_idx = args.topk_idx.as<const int64_t>();
  kernel.topk_weights = args.topk_weights.as<const float>();
  kernel.num_tokens = handle.num_tokens;
  kernel.combined_x = result.combined_x.as<uint16_t>();
  kernel.bias0 = args.bias0.defined() ? args.bias0.as<const uint16_t>() : nullptr;
  kernel.bias1 = args.bias1.defined() ? args.bias1.as<const uint16_t>() : nullptr;
  kernel.num_experts = handle.num_experts;
  kernel.rows_at_home = plan.rows_at_home;
  context.barrier_epoch = &state_->barriers;
  if (pull) {
    kernel.position = handle.position.as<const int32_t>();
    kernel.begin = handle.begin.as<const int32_t>();
    launch_symmetric_pull_combine(context, kernel, launch.stream);
  } else {
    launch_symmetric_combine(context, kernel, launch.stream);
  }
  return result;
}

common::SymmetricHomeRows SymmetricEngine::home_rows(const detail::SymmetricCombinePlan& plan) {
  // Raises what earlier kernels recorded, as the combine itself would, before the expert phase writes.
  const KernelContext context = services_.begin_expert_major_call(plan.args.stream).context;
  common::SymmetricHomeRows rows = detail::symmetric_home_rows(plan, context.heap, context.mask);
  rows.overflow = plan.handle->overflow.as<const int32_t>();
  // The half is counted on the device (a graph replay has its own turn): the combine is call calls + 1.
  rows.half = -1;
  rows.calls = &state_->calls;
  return rows;
}

void SymmetricEngine::barrier(const common::SymmetricLayout& layout, KernelContext context,
                              cudaStream_t stream) {
  context.barrier_epoch = &state_->barriers;
  launch_symmetric_barrier(context, layout, state_, stream);
}

}  // namespace switchyard::cuda
