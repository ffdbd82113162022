// The opening of `normal` calls: ring reset + barrier, and for a fresh dispatch the count exchange
// (notify) that tells every rank where each (source, channel) range lands.
#include <mutex>
#include <set>

#include "cuda/backend/dependent_launch.hpp"
#include "cuda/backend/kernel_preload.hpp"
#include "cuda/normal/dispatch_stamps.cuh"
#include "cuda/normal/kernels.hpp"
#include "device/cuda_check.hpp"
#include "device/device_barrier.cuh"
#include "device/warp_group.cuh"

namespace switchyard::cuda {

namespace {

constexpr int kNotifyThreads = 1024;
constexpr int kBeginThreads = 256;
// NOTES: room for R * C channel counters and E expert counters (e.g. 128 ranks x 64 channels plus
// 16384 experts); set once in prepare_normal_kernels.
constexpr size_t kNotifySharedBytes = 128 * 1024;

// The signature a call on a handle's routing opens with (launch_begin_call).
__device__ __forceinline__ uint64_t opening_signature(uint64_t signature, const int64_t* routing_epoch) {
  return routing_epoch ? common::routed_signature(signature, static_cast<uint64_t>(*routing_epoch))
                       : signature;
}

__global__ void begin_call_kernel(KernelContext context, uint64_t signature, const int64_t* routing_epoch) {
  ptx::wait_for_previous_grid();  // launched by launch_dependent: before any global access
  reset_own_rings(context);
  block_barrier_all_ranks(context, opening_signature(signature, routing_epoch));
}

__global__ void begin_combine_in_place_kernel(KernelContext context, const int32_t* recv_channel_start,
                                              common::NormalCombineInputLayout input, uint64_t signature,
                                              const int64_t* routing_epoch) {
  ptx::wait_for_previous_grid();  // launched by launch_dependent: before any global access
  reset_own_rings(context);
  const int num_channels = context.num_channels;
  for (int index = threadIdx.x; index < context.num_ranks * num_channels; index += blockDim.x) {
    const int home = index / num_channels;
    input.first_rows(context.heap.peer_base(home), context.rank)[index % num_channels] =
        recv_channel_start[index];
  }
  // Its fence orders the table's writes before our arrival.
  block_barrier_all_ranks(context, opening_signature(signature, routing_epoch));
}

// Counts (pass 1) or lists (pass 2) each destination's tokens per channel, a warp per
// (destination, channel), 32 tokens per ballot. Pass 1 reads every (token, destination) once: with
// routing_copy it copies each into the handle's is_token_in_rank as it goes.
__device__ void scan_channel_tokens(const KernelContext& context, const NotifyLaunch& launch, int32_t* counts,
                                    bool fill) {
  const int num_ranks = context.num_ranks;
  const int num_channels = context.num_channels;
  const int warps = blockDim.x / 32;
  const int lane = lane_id();
  for (int pair = threadIdx.x / 32; pair < num_ranks * num_channels; pair += warps) {
    const int destination = pair / num_channels;
    const int channel = pair % num_channels;
    const int64_t begin = common::channel_begin(launch.num_tokens, num_channels, channel);
    const int64_t end = common::channel_begin(launch.num_tokens, num_channels, channel + 1);
    const int32_t base = fill ? launch.send_channel_prefix[destination * (num_channels + 1) + channel] : 0;
    int32_t found = 0;
    for (int64_t first = begin; first < end; first += 32) {
      const int64_t token = first + lane;
      const bool in_rank = token < end && launch.is_token_in_rank[token * num_ranks + destination];
      if (!fill && launch.routing_copy && token < end)
        launch.routing_copy[token * num_ranks + destination] = in_rank;
      const uint32_t mask = __ballot_sync(0xffffffffu, in_rank);
      if (fill && token < end) {
        const int32_t position = found + __popc(mask & ((1u << lane) - 1u));
        launch.send_slot[token * num_ranks + destination] = in_rank ? position : -1;
        if (in_rank) {
          launch.send_list[destination * launch.num_tokens + base + position] = static_cast<int32_t>(token);
          // x in the heap: the receivers pull by this copy (written before the barrier after the scan).
          if (launch.heap_send_lists) {
            launch.heap_send_lists[destination * launch.heap_send_list_stride + base + position] =
                static_cast<int32_t>(token);
          }
        }
      }
      found += __popc(mask);
    }
    if (!fill && lane == 0) counts[pair] = found;
  }
}

// Steps 1-4 of the notify. Returns false where the block stopped before counting (a barrier that failed or
// was refused; the error block says why), true once the handle's counts are written (and, posting, the
// mailbox's counts: post_counts then writes its tag).
//
// One barrier: everything a peer needs from us is written before it, into the record set of that barrier's
// parity (NormalHeapLayout::notify_record), and it both opens the call and delivers the counts. Until session
// 34 the call opened with a barrier of its own and the records followed it, guarded by a second one; one
// barrier is safe because nothing written before it can still be read by a peer's previous call:
//   - records: the set of this barrier's parity was last read by a peer in the call whose notify passed the
//     barrier two back; a peer passes no barrier without us, so it is past those reads;
//   - our rings: reset here before we arrive, and no peer pushes this call's rows before it passes;
//   - the heap input's routing (send lists, topk_idx and weights): the previous in-place call that read it
//     closed with a barrier after its reads (close_call_by_last_block), and no other call reads it.
__device__ bool count_and_plan(const KernelContext& context, const NotifyLaunch& launch) {
  extern __shared__ int32_t shared_counts[];
  const int num_ranks = context.num_ranks;
  const int num_channels = context.num_channels;
  const int local_experts = launch.local_experts;
  const int num_experts = num_ranks * local_experts;
  int32_t* channel_counts = shared_counts;                            // [R * C], destination-major
  int32_t* expert_counts = shared_counts + num_ranks * num_channels;  // [E]
  // The number the barrier below will get: an opening barrier (a signature) always takes the next one
  // (number_barrier). Read before thread 0 numbers it (block_barrier_all_ranks starts with __syncthreads).
  const uint64_t epoch = *context.barrier_epoch + 1;
  // -1 until the exchange has passed (thread 0 writes the count below): a host that copied the counts back
  // and then met an error tells by it whether its peers went on to move rows (DispatchCounts::exchanged).
  if (threadIdx.x == 0) launch.recv_token_count[0] = -1;

  // 1. Our rings are empty again (no peer pushes to them before the barrier passes).
  reset_own_rings(context);
  for (int i = threadIdx.x; i < num_ranks * num_channels; i += blockDim.x) channel_counts[i] = 0;
  for (int i = threadIdx.x; i < num_experts; i += blockDim.x) expert_counts[i] = 0;
  __syncthreads();

  // 2. Count what goes where, and list each destination's tokens for the senders and for combine.
  scan_channel_tokens(context, launch, channel_counts, false);
  const int64_t num_slots = launch.num_tokens * launch.topk;
  for (int64_t i = threadIdx.x; i < num_slots; i += blockDim.x) {
    const int64_t expert = launch.topk_idx[i];
    // x in the heap: the routing the receivers pull by, copied as given (the scan reads it anyway).
    if (launch.heap_topk_idx) launch.heap_topk_idx[i] = expert;
    if (launch.heap_topk_weights) launch.heap_topk_weights[i] = launch.topk_weights[i];
    if (expert >= 0 && expert < num_experts) {
      atomicAdd(&expert_counts[expert], 1);
    } else if (expert != -1) {
      WaitSite site{common::WaitRole::notify, common::WaitTarget::invalid_expert, -1, -1};
      record_wait_failure(context, site, num_experts, expert, 0, false);
    }
  }
  if (launch.num_tokens_per_expert) {  // no topk_idx: the layout's counts
    for (int i = threadIdx.x; i < num_experts; i += blockDim.x)
      expert_counts[i] = launch.num_tokens_per_expert[i];
  }
  __syncthreads();
  for (int destination = threadIdx.x; destination < num_ranks; destination += blockDim.x) {
    int32_t running = 0;
    int32_t* prefix = launch.send_channel_prefix + destination * (num_channels + 1);
    for (int channel = 0; channel < num_channels; ++channel) {
      prefix[channel] = running;
      running += channel_counts[destination * num_channels + channel];
    }
    prefix[num_channels] = running;
  }
  __syncthreads();
  scan_channel_tokens(context, launch, channel_counts, true);

  // 3. Publish our counts in every destination's notify record for us, in the set of the barrier's parity.
  const int fields = num_channels + local_experts;
  for (int i = threadIdx.x; i < num_ranks * fields; i += blockDim.x) {
    const int destination = i / fields;
    const int field = i % fields;
    common::NotifyRecord record =
        context.layout.notify_record(context.heap.peer_base(destination), context.rank, epoch);
    if (field < num_channels) {
      record.channel_counts[field] = channel_counts[destination * num_channels + field];
    } else {
      record.expert_counts[field - num_channels] =
          expert_counts[destination * local_experts + field - num_channels];
    }
  }
  for (int destination = threadIdx.x; destination < num_ranks; destination += blockDim.x) {
    *context.layout.notify_signature(context.heap.peer_base(destination), context.rank, epoch) =
        launch.signature;
  }
  stamp_dispatch(launch.stamps, kStampPublished);
  // The barrier's fence makes every thread's writes above visible before our arrival (its __syncthreads
  // orders them before the arrival's stores).
  if (!block_barrier_all_ranks(context, launch.signature)) return false;
  stamp_dispatch(launch.stamps, kStampExchanged);
  // The routing this call makes is named by that barrier's number, the same on every rank.
  if (threadIdx.x == 0) *launch.routing_epoch = static_cast<int64_t>(epoch);

  // 4. Read every source's record for us.
  __shared__ int signatures_match;
  if (threadIdx.x == 0) signatures_match = 1;
  __syncthreads();
  for (int source = threadIdx.x; source < num_ranks; source += blockDim.x) {
    const uint64_t signature = *context.layout.notify_signature(context.heap.base, source, epoch);
    if (signature != launch.signature) {
      WaitSite site{common::WaitRole::notify, common::WaitTarget::call_signature, -1, source};
      record_wait_failure(context, site, static_cast<int64_t>(launch.signature),
                          static_cast<int64_t>(signature), 0);
      atomicExch(&signatures_match, 0);
    }
  }
  for (int i = threadIdx.x; i < num_ranks * num_channels; i += blockDim.x) {
    channel_counts[i] = context.layout.notify_record(context.heap.base, i / num_channels, epoch)
                            .channel_counts[i % num_channels];
  }
  __syncthreads();
  if (!signatures_match) return false;
  if (threadIdx.x == 0) {
    // Source-major, then channel: the rank-major receive order.
    int32_t running = 0;
    for (int i = 0; i < num_ranks * num_channels; ++i) {
      launch.recv_channel_start[i] = running;
      running += channel_counts[i];
    }
    launch.recv_channel_start[num_ranks * num_channels] = running;
    launch.recv_token_count[0] = running;
    if (launch.posted.words) *launch.posted.recv_tokens() = running;
  }
  for (int expert = threadIdx.x; expert < local_experts; expert += blockDim.x) {
    int64_t sum = 0;
    for (int source = 0; source < num_ranks; ++source) {
      sum += context.layout.notify_record(context.heap.base, source, epoch).expert_counts[expert];
    }
    const int64_t aligned =
        (sum + launch.expert_alignment - 1) / launch.expert_alignment * launch.expert_alignment;
    launch.recv_expert_counts[expert] = static_cast<int32_t>(aligned);
    if (launch.posted.words) launch.posted.expert_counts()[expert] = static_cast<int32_t>(aligned);
  }
  return true;
}

// SWITCHYARD_NORMAL_COUNTS=poll: the mailbox's status, then its tag, which the host polls for
// (common/posted_counts.hpp). Posted whether or not the block counted, so the host never waits for a tag
// that will not come: a block that gave up posts kCountsGaveUp after its error record.
__device__ void post_counts(const NotifyLaunch& launch, bool counted) {
  // NOTES: every thread fences its own writes (the counts, an error record) at system scope before the
  // block meets, so that they reach the host before the tag that thread 0 writes after it.
  __threadfence_system();
  __syncthreads();
  if (threadIdx.x == 0) {
    *launch.posted.status() = counted ? common::kCountsPosted : common::kCountsGaveUp;
    common::st_release_sys(launch.posted.tag(), launch.posted_tag);
  }
}

__global__ void dispatch_notify_kernel(KernelContext context, NotifyLaunch launch) {
  ptx::wait_for_previous_grid();  // launched by launch_dependent: before any global access
  stamp_dispatch(launch.stamps, kStampNotifyEntered);
  const bool counted = count_and_plan(context, launch);
  if (launch.posted.words) post_counts(launch, counted);
  stamp_dispatch(launch.stamps, kStampNotifyDone);
}

}  // namespace

void prepare_dispatch_kernel();
void prepare_combine_kernel();
void prepare_layout_kernel();
void prepare_gather_kernel();
void prepare_stage_kernel();

void prepare_normal_kernels(int device) {
  // Loading and attributes belong to a device's context: once per device (a process may drive several).
  static std::mutex mutex;
  static std::set<int> prepared;
  const std::lock_guard<std::mutex> lock(mutex);
  if (!prepared.insert(device).second) return;
  [] {
    preload_kernel(begin_call_kernel);
    preload_kernel(begin_combine_in_place_kernel);
    preload_kernel(dispatch_notify_kernel);
    SY_CUDA_CHECK(cudaFuncSetAttribute(dispatch_notify_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(kNotifySharedBytes)));
    prepare_dispatch_kernel();
    prepare_combine_kernel();
    prepare_layout_kernel();
    prepare_gather_kernel();
    prepare_stage_kernel();
  }();
}

void launch_begin_call(const KernelContext& context, uint64_t signature, const int64_t* routing_epoch,
                       cudaStream_t stream) {
  launch_dependent(begin_call_kernel, 1, kBeginThreads, 0, stream, context, signature, routing_epoch);
}

void launch_begin_combine_in_place(const KernelContext& context, const int32_t* recv_channel_start,
                                   const common::NormalCombineInputLayout& input, uint64_t signature,
                                   const int64_t* routing_epoch, cudaStream_t stream) {
  launch_dependent(begin_combine_in_place_kernel, 1, kBeginThreads, 0, stream, context, recv_channel_start,
                   input, signature, routing_epoch);
}

void launch_dispatch_notify(const KernelContext& context, const NotifyLaunch& launch, cudaStream_t stream) {
  const size_t shared_bytes =
      sizeof(int32_t) * (static_cast<size_t>(context.num_ranks) * context.num_channels +
                         static_cast<size_t>(context.num_ranks) * launch.local_experts);
  if (shared_bytes > kNotifySharedBytes) {
    throw InvalidArgument("num_experts: expected (num_ranks * channels + num_experts) * 4 <= " +
                          std::to_string(kNotifySharedBytes) + " bytes of notify counters, got " +
                          std::to_string(shared_bytes));
  }
  launch_dependent(dispatch_notify_kernel, 1, kNotifyThreads, shared_bytes, stream, context, launch);
}

}  // namespace switchyard::cuda
