// The CPU `symmetric` engine's stages: dispatch publisher and puller, combine pusher and reducer.
// Each is a function over one call's context; the calls wire them together around the barrier.
#include "cpu/symmetric/engine.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "common/fp8_cast.hpp"
#include "common/numeric.hpp"
#include "core/expert_capacity.hpp"
#include "core/expert_major_plan.hpp"
#include "core/symmetric_sizing.hpp"
#include "cpu/expert_major/outputs.hpp"
#include "cpu/symmetric/participants.hpp"
#include "cpu/symmetric/pull_combine.hpp"
#include "cpu/symmetric/source.hpp"
#include "switchyard/errors.hpp"

namespace switchyard::cpu {

namespace {

struct Call {
  const common::SymHeap* heap;
  common::SymmetricLayout layout;
  uint32_t sequence;
  int half;
  int rank;
  int num_ranks;
  int local_experts;
  int hidden;
  int64_t max_tokens_per_rank;
  int64_t capacity;  // rows per local expert in the outputs (expert_capacity, resolved)
  Masking masking;   // whom the call leaves out (cpu/symmetric/participants.hpp)
};

// ---- dispatch -----------------------------------------------------------------------------------

// Publishes this rank's tokens in its own input buffer (cast to fp8 here, once per routed token; copied
// as given, with the caller's scales, when x is fp8 already (`x_scales` defined); not at all with
// `zero_copy`, where the receivers read x in place), and writes into each target's workspace,
// through map(), every (token, slot) routed to each of its experts in (token, slot) order, then the count of
// every expert (zero included). With `positions` (the pull combine's, [N, K]) it also keeps each pair's
// position there, -1 for no expert. Only `targets` are written to: a slot routed to another rank's
// expert is dropped (as if its id were -1), and so is every slot when this rank is masked itself.
void dispatch_publisher(const Call& call, const Participants& targets,
                        const common::SymmetricToken& token_layout, bool use_fp8, bool round_scale,
                        bool zero_copy, const TensorView& x, const TensorView& x_scales,
                        const TensorView& topk_idx, int32_t* positions) {
  const common::SymHeap& heap = *call.heap;
  const common::SymmetricLayout& layout = call.layout;
  const int64_t num_tokens = x.shape[0];
  const int topk = static_cast<int>(topk_idx.shape[1]);
  const int num_experts = call.local_experts * call.num_ranks;
  const int64_t* ids = topk_idx.as<const int64_t>();
  const uint16_t* rows = x.as<const uint16_t>();

  std::vector<int32_t> position(num_experts, 0);
  auto sent = [&](int64_t expert) {
    return expert >= 0 && targets.in(static_cast<int>(expert / call.local_experts));
  };
  for (int64_t token = 0; token < num_tokens; ++token) {
    const int64_t* token_ids = ids + token * topk;
    uint8_t* published = layout.input_token(heap.base, call.half, token);
    std::memcpy(token_layout.topk_idx(published), token_ids, topk * sizeof(int64_t));
    if (positions) std::fill(positions + token * topk, positions + (token + 1) * topk, -1);
    if (std::none_of(token_ids, token_ids + topk, sent)) continue;
    const uint16_t* row = rows + token * call.hidden;
    if (x_scales.defined()) {
      // Rows the caller cast (use_fp8 with fp8 x): their bytes and scales, bit for bit.
      std::memcpy(token_layout.row(published), x.as<const uint8_t>() + token * token_layout.row_bytes,
                  token_layout.row_bytes);
      std::memcpy(token_layout.scales(published),
                  x_scales.as<const float>() + token * token_layout.num_scales,
                  token_layout.num_scales * sizeof(float));
    } else if (use_fp8) {
      common::cast_row_to_fp8(row, call.hidden, round_scale, token_layout.row(published),
                              token_layout.scales(published));
    } else if (!zero_copy) {
      std::memcpy(token_layout.row(published), row, token_layout.row_bytes);
    }
    for (int slot = 0; slot < topk; ++slot) {
      const int64_t expert = token_ids[slot];
      if (!sent(expert)) continue;
      const int target = static_cast<int>(expert / call.local_experts);
      const int local = static_cast<int>(expert % call.local_experts);
      if (positions) positions[token * topk + slot] = position[expert];
      *heap.map(layout.route(heap.base, call.half, local, call.rank, position[expert]++), target) =
          common::SymmetricRoute{static_cast<int32_t>(token), slot};
    }
  }
  for (int expert = 0; expert < num_experts; ++expert) {
    const int target = expert / call.local_experts;
    if (!targets.in(target)) continue;
    *heap.map(layout.count(heap.base, call.half, expert % call.local_experts, call.rank), target) =
        position[expert];
  }
}

using DispatchOutputs = ExpertMajorOutputs;

// An expert that received more rows than the call's capacity.
struct Overflow {
  int expert = -1;  // global id; -1 for none
  int64_t rows = 0;
};

// After the barrier every rank's workspace holds this call's counts (each source wrote them before
// arriving), so every rank reads all of them through map() and finds the same first overflowing
// expert: every rank raises the same CapacityError, not only the expert's own. Only the participants'
// workspaces and counts: alike on every survivor when their masks are.
Overflow find_overflow(const Call& call, const Participants& participants) {
  Overflow overflow;
  if (call.capacity >= call.num_ranks * call.max_tokens_per_rank) return overflow;  // cannot overflow
  const common::SymHeap& heap = *call.heap;
  for (int target = 0; target < call.num_ranks && overflow.expert < 0; ++target) {
    if (!participants.in(target)) continue;
    for (int local = 0; local < call.local_experts; ++local) {
      int64_t rows = 0;
      for (int source = 0; source < call.num_ranks; ++source) {
        if (!participants.in(source)) continue;
        // A count out of range is the target's own error to report (dispatch_puller); it adds nothing here.
        const int32_t count = *heap.map(call.layout.count(heap.base, call.half, local, source), target);
        if (count > 0 && count <= call.max_tokens_per_rank) rows += count;
      }
      if (rows > call.capacity) {
        overflow.expert = target * call.local_experts + local;
        overflow.rows = rows;
        break;
      }
    }
  }
  return overflow;
}

// Reads the counts in this rank's workspace to place each source's rows (source-major, then in
// (token, slot) order), then pulls every row that fits the capacity from its source's input buffer at
// the mapped address (or from its x, where `sources` says it announced it). Sources are visited starting
// after this rank, so that the ranks pull from different peers at once. A source that does not take
// part counts as having sent nothing (its workspace entries here are stale, its memory never read).
void dispatch_puller(const Call& call, const Participants& participants,
                     const common::SymmetricToken& token_layout, int topk, bool use_ue8m0,
                     const SourceRows& sources, const DispatchOutputs& out) {
  const common::SymHeap& heap = *call.heap;
  const common::SymmetricLayout& layout = call.layout;
  const int64_t rows_per_expert = call.capacity;
  const int num_scales = static_cast<int>(token_layout.num_scales);
  const int scale_words = use_ue8m0 ? common::ue8m0_words(num_scales) : num_scales;
  uint8_t* recv_x = out.recv_x.as<uint8_t>();
  int32_t* recv_count = out.recv_count.as<int32_t>();
  int32_t* layout_range = out.layout_range.as<int32_t>();
  int32_t* src_info = out.src_info.as<int32_t>();
  int32_t* src_slot = out.handle->src_slot.as<int32_t>();

  for (int local = 0; local < call.local_experts; ++local) {
    int32_t begin = 0;
    for (int source = 0; source < call.num_ranks; ++source) {
      const int32_t count = participants.in(source) ? *layout.count(heap.base, call.half, local, source) : 0;
      if (count < 0 || count > call.max_tokens_per_rank) {
        throw Error("symmetric_dispatch: rank " + std::to_string(source) + " routed " +
                    std::to_string(count) + " rows to local expert " + std::to_string(local) + " of rank " +
                    std::to_string(call.rank) + ", outside 0..max_tokens_per_rank " +
                    std::to_string(call.max_tokens_per_rank) +
                    " (every rank must call with the same max_tokens_per_rank)");
      }
      layout_range[(local * call.num_ranks + source) * 2] = begin;
      layout_range[(local * call.num_ranks + source) * 2 + 1] = count;
      begin += count;
    }
    recv_count[local] = begin;
  }

  for (int local = 0; local < call.local_experts; ++local) {
    for (int step = 0; step < call.num_ranks; ++step) {
      const int source = (call.rank + 1 + step) % call.num_ranks;
      const int32_t begin = layout_range[(local * call.num_ranks + source) * 2];
      const int32_t count = layout_range[(local * call.num_ranks + source) * 2 + 1];
      // Rows at and past the capacity are not written (an overflow, raised after the pull).
      const int64_t fitting = std::clamp<int64_t>(rows_per_expert - begin, 0, count);
      for (int32_t position = 0; position < fitting; ++position) {
        const common::SymmetricRoute route = *layout.route(heap.base, call.half, local, source, position);
        if (route.token < 0 || route.token >= call.max_tokens_per_rank || route.slot < 0 ||
            route.slot >= topk) {
          throw Error("symmetric_dispatch: rank " + std::to_string(source) + " routed (token " +
                      std::to_string(route.token) + ", slot " + std::to_string(route.slot) + ") to rank " +
                      std::to_string(call.rank) +
                      ", outside this call's shape (every rank must call with the same "
                      "max_tokens_per_rank and k)");
        }
        uint8_t* published = heap.map(layout.input_token(heap.base, call.half, route.token), source);
        const uint8_t* source_row = sources.x(source) != nullptr
                                        ? sources.x(source) + route.token * sources.row_stride(source)
                                        : token_layout.row(published);
        const int64_t row = local * rows_per_expert + begin + position;
        std::memcpy(recv_x + row * token_layout.row_bytes, source_row, token_layout.row_bytes);
        if (use_ue8m0) {
          common::pack_ue8m0(token_layout.scales(published), num_scales,
                             out.recv_x_scales.as<int32_t>() + row * scale_words);
        } else if (num_scales > 0) {
          std::memcpy(out.recv_x_scales.as<float>() + row * num_scales, token_layout.scales(published),
                      num_scales * sizeof(float));
        }
        src_info[row] = route.token;
        src_slot[row] = route.slot;
      }
    }
    const int64_t received = std::min<int64_t>(recv_count[local], rows_per_expert);
    for (int64_t row = local * rows_per_expert + received; row < (local + 1) * rows_per_expert; ++row) {
      src_info[row] = -1;
      src_slot[row] = -1;
    }
  }
}

// ---- combine ------------------------------------------------------------------------------------

// Pushes each received row's expert output into its home rank's combine buffer at (slot, token),
// through map(). Homes are visited starting after this rank, so that no home is hot. Only homes that
// take part (`homes`): nothing is written to a masked one.
void combine_pusher(const Call& call, const Participants& homes, const detail::ExpertMajorHandleData& handle,
                    const uint16_t* y) {
  const common::SymHeap& heap = *call.heap;
  const int64_t rows_per_expert = call.capacity;
  const int32_t* layout_range = handle.layout_range.as<const int32_t>();
  const int32_t* src_info = handle.src_info.as<const int32_t>();
  const int32_t* src_slot = handle.src_slot.as<const int32_t>();
  const size_t row_bytes = static_cast<size_t>(call.hidden) * 2;
  for (int local = 0; local < call.local_experts; ++local) {
    for (int step = 0; step < call.num_ranks; ++step) {
      const int home = (call.rank + 1 + step) % call.num_ranks;
      if (!homes.in(home)) continue;
      const int32_t begin = layout_range[(local * call.num_ranks + home) * 2];
      const int32_t count = layout_range[(local * call.num_ranks + home) * 2 + 1];
      // Only rows inside the capacity exist (an overflowed dispatch raised and returned no handle).
      const int64_t end = std::min<int64_t>(begin + count, rows_per_expert);
      for (int64_t row = local * rows_per_expert + begin; row < local * rows_per_expert + end; ++row) {
        uint8_t* target =
            heap.map(call.layout.combine_row(heap.base, call.half, src_slot[row], src_info[row]), home);
        std::memcpy(target, y + row * call.hidden, row_bytes);
      }
    }
  }
}

// Reduces each token's valid slots in increasing order with fp32 fused multiply-adds from +0,
// rounding to bf16 once, from this rank's own combine buffer. Slots routed to the experts of a rank
// that does not take part are dropped, as if topk_idx held -1 there.
void combine_reducer(const Call& call, const Participants& participants, const int64_t* topk_idx,
                     const float* topk_weights, int64_t num_tokens, int topk, const CombineBiases& biases,
                     uint16_t* combined_x) {
  const common::SymHeap& heap = *call.heap;
  const std::vector<int64_t> ids =
      participants.surviving_slots(topk_idx, num_tokens * topk, call.local_experts);
  reduce_weighted_slots(
      ids.data(), topk_weights, num_tokens, topk, call.hidden, combined_x, biases, /*use_logfmt=*/false,
      [&](int slot, int64_t token) {
        return reinterpret_cast<const uint16_t*>(call.layout.combine_row(heap.base, call.half, slot, token));
      });
}

}  // namespace

LowLatencyDispatchResult SymmetricEngine::dispatch(const detail::SymmetricDispatchPlan& plan) {
  const LowLatencyDispatchArgs& args = plan.args;
  const int num_ranks = plan.topology.num_ranks;

  Call call{};
  call.heap = &heap_.view();
  call.layout = plan.layout;
  call.sequence = ++sequence_;
  call.half = common::symmetric_half(call.sequence);
  call.rank = plan.rank;
  call.num_ranks = num_ranks;
  call.local_experts = plan.local_experts;
  call.hidden = plan.hidden;
  call.max_tokens_per_rank = plan.max_tokens_per_rank;
  call.capacity = plan.expert_capacity;
  call.masking = Masking{mask_, plan.config.mask_ranks_on_timeout};
  const common::SymmetricToken token_layout = detail::symmetric_token(plan.hidden, plan.use_fp8, plan.topk);

  DispatchOutputs out = prepare_expert_major_outputs(plan, owner_, Engine::symmetric);
  const std::shared_ptr<detail::ExpertMajorHandleData>& handle = out.handle;
  const bool pull = combine_path_ == SymmetricCombine::pull;
  if (pull) {
    handle->position = Tensor::empty(DType::i32, {plan.num_tokens, plan.topk});
    handle->begin = Tensor::empty(DType::i32, {plan.num_experts});
  }

  // fp8 keeps the publish: the cast there halves the bytes every receiver pulls (pre-cast fp8 rows are
  // published too, their scales beside them). A heap-resident x is read in place on any path: every peer
  // maps this heap.
  const bool x_in_heap = plan.x_heap_offset >= 0;
  const bool zero_copy = !plan.use_fp8 && (x_in_heap || dispatch_path_ == SymmetricDispatch::zero_copy);
  const InPlaceCall sources_call{&heap_.view(), plan.layout, call.sequence, plan.config.timeout_seconds,
                                 call.masking};
  const common::SymmetricRows rows =
      zero_copy ? common::symmetric_rows_in_place(plan.x_heap_offset, args.x.data) : common::SymmetricRows{};
  announce_source(sources_call, rows, static_cast<int64_t>(plan.hidden) * 2, plan.signature);
  const Participants targets(call.masking, call.rank, num_ranks);
  dispatch_publisher(call, targets, token_layout, plan.use_fp8, plan.round_scale, zero_copy, args.x,
                     plan.x_fp8 ? args.x_scales : TensorView(), args.topk_idx,
                     pull ? handle->position.as<int32_t>() : nullptr);
  try {
    barrier_.arrive_and_wait(heap_.view(), plan.layout.signal(heap_.base(), 0), call.masking,
                             plan.config.timeout_seconds, "symmetric dispatch");
  } catch (...) {
    // Peers may pass the barrier (we arrived): none reads x once this returns.
    withdraw_source(sources_call);
    throw;
  }
  // Fixed after the barrier: a source it masked (on a timeout) is left out of the whole pull, so the
  // outputs are the survivors' already in this call.
  const Participants participants = targets.still(call.masking, call.rank);
  Overflow overflow;
  std::exception_ptr failure;
  try {
    // First: the counts and routes below are laid out by the call's shape, which must be every rank's.
    const SourceRows sources(sources_call, plan.signature, participants);
    if (pull) {
      pull_row_begins(heap_.view(), plan.layout, call.half, plan.local_experts, plan.max_tokens_per_rank,
                      participants, handle->begin.as<int32_t>());
    }
    overflow = find_overflow(call, participants);
    dispatch_puller(call, participants, token_layout, plan.topk, plan.use_ue8m0, sources, out);
  } catch (...) {
    failure = std::current_exception();
  }
  // Even after a failure: peers wait for our done word, and we return only when nobody reads our x.
  finish_sources(sources_call, zero_copy);
  if (failure) std::rethrow_exception(failure);

  keep_received_routing(out);
  handle->received.store(true, std::memory_order_release);
  if (overflow.expert >= 0) {
    // Every rank found the same expert, and each finished its pulls: raising here leaves no peer waiting.
    throw CapacityError(detail::expert_capacity_message(plan.expert_capacity, overflow.expert,
                                                        overflow.expert / plan.local_experts, overflow.rows));
  }

  LowLatencyDispatchResult result = dispatch_result(out);
  return result;
}

LowLatencyCombineResult SymmetricEngine::combine(const detail::SymmetricCombinePlan& plan) {
  const LowLatencyCombineArgs& args = plan.args;
  const detail::ExpertMajorHandleData& handle = *plan.handle;

  Call call{};
  call.heap = &heap_.view();
  call.layout = plan.layout;
  call.sequence = ++sequence_;
  call.half = common::symmetric_half(call.sequence);
  call.rank = plan.rank;
  call.num_ranks = plan.topology.num_ranks;
  call.local_experts = handle.local_experts;
  call.hidden = plan.hidden;
  call.max_tokens_per_rank = handle.max_tokens_per_rank;
  call.capacity = handle.rows_per_expert();
  call.masking = Masking{mask_, plan.config.mask_ranks_on_timeout};

  LowLatencyCombineResult result;
  result.combined_x = output_or_allocate(args.out_combined_x, DType::bf16, {handle.num_tokens, plan.hidden});

  if (combine_path_ == SymmetricCombine::pull && !plan.rows_at_home) {
    if (!handle.position.defined()) {
      throw InvalidArgument(
          "handle: expected a dispatch made for the pull combine, got one without its row "
          "positions (config.symmetric_combine changed between dispatch and combine?)");
    }
    detail::check_pull_reaches_y(plan, pointers_shared_);
    const common::SymmetricRows y = common::symmetric_rows_in_place(plan.y_heap_offset, plan.y);
    pull_combine(
        InPlaceCall{&heap_.view(), plan.layout, call.sequence, plan.config.timeout_seconds, call.masking},
        handle, y, plan.hidden, args.topk_idx.as<const int64_t>(), args.topk_weights.as<const float>(),
        combine_biases(args), result.combined_x.as<uint16_t>());
    return result;
  }
  const Participants homes(call.masking, call.rank, call.num_ranks);
  // With rows_at_home the expert phase wrote every row where the pusher would (home_rows below).
  if (!plan.rows_at_home) combine_pusher(call, homes, handle, plan.y);
  barrier_.arrive_and_wait(heap_.view(), plan.layout.signal(heap_.base(), 0), call.masking,
                           plan.config.timeout_seconds, "symmetric combine");
  // Fixed after the barrier: an expert rank it masked (on a timeout) is dropped from the whole reduction.
  combine_reducer(call, homes.still(call.masking, call.rank), args.topk_idx.as<const int64_t>(),
                  args.topk_weights.as<const float>(), handle.num_tokens, handle.topk, combine_biases(args),
                  result.combined_x.as<uint16_t>());
  return result;
}

common::SymmetricHomeRows SymmetricEngine::home_rows(const detail::SymmetricCombinePlan& plan) {
  common::SymmetricHomeRows rows = detail::symmetric_home_rows(plan, heap_.view(), mask_);
  // The combine is the next symmetric call (an overflowed dispatch raised: there is no handle to combine).
  rows.half = common::symmetric_half(sequence_ + 1);
  return rows;
}

}  // namespace switchyard::cpu
