// The CPU `low_latency` engine's roles: dispatch sender and receiver, combine sender and receiver.
// Each is a function over one call's context; the calls wire them together.
#include "cpu/low_latency/engine.hpp"

#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "common/fp8_cast.hpp"
#include "common/logfmt_wire.hpp"
#include "common/numeric.hpp"
#include "core/low_latency_sizing.hpp"
#include "cpu/backend/bounded_wait.hpp"
#include "cpu/backend/rank_mask.hpp"
#include "cpu/expert_major/outputs.hpp"
#include "cpu/low_latency/link.hpp"
#include "switchyard/errors.hpp"

namespace switchyard::cpu {

namespace {

// Waits (bounded) until `word` holds a signal of the call tagged `tag` (common::low_latency_call_tag),
// and returns it; none when `peer` is masked, or its wait timed out and masking.on_timeout masked it
// then. A signal of the same call with another shape is refused as such.
std::optional<uint64_t> wait_for_signal(const uint64_t* word, uint32_t tag, int peer, const Masking& masking,
                                        double timeout_seconds, const std::function<std::string()>& who) {
  WaitBudget budget(timeout_seconds, nullptr);
  for (;;) {
    uint64_t signal = common::ld_acquire_sys(word);
    if (common::low_latency_signal_is_for(signal, tag)) return signal;
    if (common::low_latency_signal_of_other_shape(signal, tag)) {
      throw InvalidArgument(
          "low_latency: expected every rank to call with the same shape (hidden, k, num_experts, "
          "max_tokens_per_rank, fp8 options); " +
          who() +
          " got a signal of this call made with "
          "another shape");
    }
    if (masking.mask.masked(peer)) return std::nullopt;
    try {
      budget.idle([&] {
        std::ostringstream text;
        text << who() << ": waiting for the signal of low-latency call "
             << (tag & common::kLowLatencySequenceMask) << " (last seen call "
             << ((signal >> 32) & common::kLowLatencySequenceMask) << ")";
        return text.str();
      });
    } catch (const TimeoutError&) {
      if (!masking.on_timeout) throw;
      masking.mask.mask(peer);
      return std::nullopt;
    }
  }
}

// Times one wait into the caller's wait_recv_cost_stats (i64 [R]) entry of the awaited rank, from
// construction to destruction (a wait that throws counts too); reads no clock without the tensor.
class WaitCost {
 public:
  WaitCost(int64_t* stats, int source) : entry_(stats ? stats + source : nullptr) {
    if (entry_) started_ = std::chrono::steady_clock::now();
  }
  ~WaitCost() {
    if (entry_) {
      *entry_ +=
          std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - started_)
              .count();
    }
  }
  WaitCost(const WaitCost&) = delete;
  WaitCost& operator=(const WaitCost&) = delete;

 private:
  int64_t* entry_;
  std::chrono::steady_clock::time_point started_;
};

std::string label(int rank, const char* role) {
  return "rank " + std::to_string(rank) + " (cpu " + role + ")";
}

std::string across_nodes_note(const LowLatencyLink& link, int source) {
  return link.same_node(source) ? "" : " (on another node: through the transport)";
}

// ---- dispatch -----------------------------------------------------------------------------------

struct DispatchCall {
  const common::SymHeap* heap;
  LowLatencyLink* link;
  common::LowLatencyLayout layout;
  common::LowLatencyDispatchMessage message;
  uint32_t sequence;
  uint32_t tag;  // of every signal this call writes and waits for
  int half;
  int rank;
  int num_ranks;
  int local_experts;
  int hidden;
  int64_t max_tokens_per_rank;
  bool use_fp8;
  bool round_scale;
  bool use_ue8m0;
  double timeout_seconds;
  Masking masking;
  int64_t* wait_recv_cost_stats;  // the caller's i64 [R], or null
};

// Writes each (token, slot) pair into its expert's receive slot on the expert's rank, at the
// position given by the prefix count of this rank's pairs for that expert, then publishes the
// count of every expert (zero included) with release semantics. The message is built here, then
// written whole through the link: stored within the node, put across nodes. Masked ranks get
// nothing: no rows, no counts.
void dispatch_sender(const DispatchCall& call, const TensorView& x, const TensorView& topk_idx) {
  const common::SymHeap& heap = *call.heap;
  LowLatencyLink& link = *call.link;
  const int64_t num_tokens = x.shape[0];
  const int topk = static_cast<int>(topk_idx.shape[1]);
  const int num_experts = call.local_experts * call.num_ranks;
  const int64_t* ids = topk_idx.as<const int64_t>();
  const uint16_t* rows = x.as<const uint16_t>();

  // Read once: the ranks this call sends to (none when this rank is masked in its own view).
  const Participants targets(call.masking, call.rank, call.num_ranks);
  std::vector<uint32_t> position(num_experts, 0);
  std::vector<uint8_t> message(call.message.bytes(), 0);
  for (int64_t token = 0; token < num_tokens; ++token) {
    const uint16_t* row = rows + token * call.hidden;
    bool built = false;
    for (int slot = 0; slot < topk; ++slot) {
      const int64_t expert = ids[token * topk + slot];
      if (expert < 0 || !targets.in(static_cast<int>(expert / call.local_experts))) continue;
      if (!built) {  // once per token: only the slot differs between its messages
        if (call.use_fp8) {
          common::cast_row_to_fp8(row, call.hidden, call.round_scale, call.message.row(message.data()),
                                  call.message.scales(message.data()));
        } else {
          std::memcpy(call.message.row(message.data()), row, call.message.row_bytes);
        }
        *call.message.src_token(message.data()) = static_cast<int32_t>(token);
        built = true;
      }
      *call.message.src_slot(message.data()) = slot;
      const int destination = static_cast<int>(expert / call.local_experts);
      const int local = static_cast<int>(expert % call.local_experts);
      link.write(destination,
                 call.layout.dispatch_slot(heap.base, call.half, local, call.rank, position[expert]++),
                 message.data(), message.size());
    }
  }
  for (int expert = 0; expert < num_experts; ++expert) {
    const int destination = expert / call.local_experts;
    if (!targets.in(destination)) continue;
    link.signal(destination,
                call.layout.dispatch_signal(heap.base, call.half, expert % call.local_experts, call.rank),
                common::low_latency_signal(call.tag, position[expert]));
  }
}

using DispatchOutputs = ExpertMajorOutputs;

// Waits for every (local expert, source) count first, then copies each source's rows out in slot
// order, local expert by local expert and source by source, so rows land source-major and in source
// token order. A source masked before or during the waits counts as having sent nothing.
void dispatch_receiver(const DispatchCall& call, const DispatchOutputs& out) {
  const common::SymHeap& heap = *call.heap;
  const int64_t rows_per_expert = call.num_ranks * call.max_tokens_per_rank;
  const int num_scales = static_cast<int>(call.message.num_scales);
  const int scale_words = call.use_ue8m0 ? common::ue8m0_words(num_scales) : num_scales;
  uint8_t* recv_x = out.recv_x.as<uint8_t>();
  int32_t* recv_count = out.recv_count.as<int32_t>();
  int32_t* layout_range = out.layout_range.as<int32_t>();
  int32_t* src_info = out.src_info.as<int32_t>();
  int32_t* src_slot = out.handle->src_slot.as<int32_t>();

  std::vector<int64_t> counts(static_cast<size_t>(call.local_experts) * call.num_ranks, 0);
  for (int local = 0; local < call.local_experts; ++local) {
    for (int source = 0; source < call.num_ranks; ++source) {
      if (!call.masking.reaches(call.rank, source)) continue;  // left out (or this rank masked itself)
      uint64_t* word = call.layout.dispatch_signal(heap.base, call.half, local, source);
      std::optional<uint64_t> signal;
      {
        const WaitCost cost(call.wait_recv_cost_stats, source);
        signal = wait_for_signal(word, call.tag, source, call.masking, call.timeout_seconds, [&] {
          return label(call.rank, "low_latency dispatch receiver") + ", local expert " +
                 std::to_string(local) + ", source rank " + std::to_string(source) +
                 across_nodes_note(*call.link, source);
        });
      }
      if (!signal) continue;
      LowLatencyLink::clear_after_use(word);
      const int64_t count = common::low_latency_signal_count(*signal);
      if (count > call.max_tokens_per_rank) {
        throw Error("low_latency_dispatch: rank " + std::to_string(source) + " sent " +
                    std::to_string(count) + " rows to local expert " + std::to_string(local) + " of rank " +
                    std::to_string(call.rank) + ", more than max_tokens_per_rank " +
                    std::to_string(call.max_tokens_per_rank) +
                    " (every rank must call with the same max_tokens_per_rank)");
      }
      counts[local * call.num_ranks + source] = count;
    }
  }
  // Masked during the waits (or before): left out whole, also where its count had arrived.
  const Participants participants(call.masking, call.rank, call.num_ranks);
  for (int local = 0; local < call.local_experts; ++local) {
    int64_t begin = 0;
    for (int source = 0; source < call.num_ranks; ++source) {
      const int64_t count = participants.in(source) ? counts[local * call.num_ranks + source] : 0;
      layout_range[(local * call.num_ranks + source) * 2] = static_cast<int32_t>(begin);
      layout_range[(local * call.num_ranks + source) * 2 + 1] = static_cast<int32_t>(count);
      for (int64_t position = 0; position < count; ++position) {
        uint8_t* message = call.layout.dispatch_slot(heap.base, call.half, local, source, position);
        const int64_t row = local * rows_per_expert + begin + position;
        std::memcpy(recv_x + row * call.message.row_bytes, call.message.row(message), call.message.row_bytes);
        if (call.use_ue8m0) {
          common::pack_ue8m0(call.message.scales(message), num_scales,
                             out.recv_x_scales.as<int32_t>() + row * scale_words);
        } else if (num_scales > 0) {
          std::memcpy(out.recv_x_scales.as<float>() + row * num_scales, call.message.scales(message),
                      num_scales * sizeof(float));
        }
        src_info[row] = *call.message.src_token(message);
        src_slot[row] = *call.message.src_slot(message);
      }
      begin += count;
    }
    recv_count[local] = static_cast<int32_t>(begin);
    for (int64_t row = local * rows_per_expert + begin; row < (local + 1) * rows_per_expert; ++row) {
      src_info[row] = -1;
      src_slot[row] = -1;
    }
  }
  keep_received_routing(out);
  out.handle->received.store(true, std::memory_order_release);
}

// ---- combine ------------------------------------------------------------------------------------

struct CombineCall {
  const common::SymHeap* heap;
  LowLatencyLink* link;
  common::LowLatencyLayout layout;
  uint32_t sequence;
  uint32_t tag;  // of every signal this call writes and waits for
  int half;
  int rank;
  int num_ranks;
  int local_experts;
  int hidden;
  int64_t max_tokens_per_rank;
  double timeout_seconds;
  Masking masking;
  bool use_logfmt;                // rows travel packed as LogFMT-10 (common/logfmt_wire.hpp)
  int64_t* wait_recv_cost_stats;  // the caller's i64 [R], or null
};

// Sends each received row's expert output back to its home rank, into the combine row of its
// (slot, token), as bf16 or packed as LogFMT-10 (only the packed row's bytes travel), then signals
// each home rank once per local expert. Masked homes get nothing.
void combine_sender(const CombineCall& call, const detail::ExpertMajorHandleData& handle, const uint16_t* y) {
  const common::SymHeap& heap = *call.heap;
  LowLatencyLink& link = *call.link;
  const int64_t rows_per_expert = call.num_ranks * call.max_tokens_per_rank;
  const int32_t* layout_range = handle.layout_range.as<const int32_t>();
  const int32_t* src_info = handle.src_info.as<const int32_t>();
  const int32_t* src_slot = handle.src_slot.as<const int32_t>();
  const size_t row_bytes = static_cast<size_t>(call.hidden) * 2;
  std::vector<uint8_t> packed(call.use_logfmt ? common::logfmt_wire_max_row_bytes(call.hidden) : 0);
  const Participants homes(call.masking, call.rank, call.num_ranks);  // none when masked in its own view
  for (int local = 0; local < call.local_experts; ++local) {
    for (int home = 0; home < call.num_ranks; ++home) {
      if (!homes.in(home)) continue;
      const int32_t begin = layout_range[(local * call.num_ranks + home) * 2];
      const int32_t count = layout_range[(local * call.num_ranks + home) * 2 + 1];
      for (int64_t row = local * rows_per_expert + begin; row < local * rows_per_expert + begin + count;
           ++row) {
        uint8_t* target = call.layout.combine_row(heap.base, call.half, src_slot[row], src_info[row]);
        if (call.use_logfmt) {
          const uint32_t bytes =
              common::logfmt_wire_encode_row(y + row * call.hidden, call.hidden, packed.data());
          link.write(home, target, packed.data(), bytes);
        } else {
          link.write(home, target, y + row * call.hidden, row_bytes);
        }
      }
      link.signal(home,
                  call.layout.combine_signal(heap.base, call.half, call.rank * call.local_experts + local),
                  common::low_latency_signal(call.tag, static_cast<uint32_t>(count)));
    }
  }
}

// Waits for every expert's rows, then reduces each token's valid slots in increasing order with
// fp32 fused multiply-adds from +0, rounding to bf16 once. Slots whose expert is on a masked rank
// (before or during the waits) are left out, as if topk_idx held -1 there.
void combine_receiver(const CombineCall& call, const std::vector<int64_t>& topk_idx,
                      const std::vector<float>& topk_weights, int topk, const CombineBiases& biases,
                      uint16_t* combined_x) {
  const common::SymHeap& heap = *call.heap;
  const int num_experts = call.local_experts * call.num_ranks;
  for (int expert = 0; expert < num_experts; ++expert) {
    const int source = expert / call.local_experts;
    if (!call.masking.reaches(call.rank, source)) continue;
    uint64_t* word = call.layout.combine_signal(heap.base, call.half, expert);
    std::optional<uint64_t> signal;
    {
      const WaitCost cost(call.wait_recv_cost_stats, source);
      signal = wait_for_signal(word, call.tag, source, call.masking, call.timeout_seconds, [&] {
        return label(call.rank, "low_latency combine receiver") + ", expert " + std::to_string(expert) +
               " on rank " + std::to_string(source) + across_nodes_note(*call.link, source);
      });
    }
    if (signal) LowLatencyLink::clear_after_use(word);
  }
  const std::vector<int64_t> slots =
      Participants(call.masking, call.rank, call.num_ranks)
          .surviving_slots(topk_idx.data(), topk_idx.size(), call.local_experts);
  const int64_t num_tokens = topk == 0 ? 0 : static_cast<int64_t>(slots.size()) / topk;
  reduce_weighted_slots(slots.data(), topk_weights.data(), num_tokens, topk, call.hidden, combined_x, biases,
                        call.use_logfmt, [&](int slot, int64_t token) -> const void* {
                          return call.layout.combine_row(heap.base, call.half, slot, token);
                        });
}

}  // namespace

LowLatencyEngine::LowLatencyEngine(HostHeap& heap, detail::BufferId owner, common::RankMaskView mask,
                                   const TransportOptions& transport)
    : heap_(heap), owner_(owner), mask_(mask), transport_(transport) {}
LowLatencyEngine::~LowLatencyEngine() = default;

LowLatencyLink& LowLatencyEngine::link(const Topology& topology) {
  if (!link_) link_ = std::make_unique<LowLatencyLink>(heap_.view(), topology, transport_);
  return *link_;
}

LowLatencyDispatchResult LowLatencyEngine::dispatch(const detail::LowLatencyDispatchPlan& plan) {
  const LowLatencyDispatchArgs& args = plan.args;
  const int num_ranks = plan.topology.num_ranks;

  DispatchCall call{};
  call.heap = &heap_.view();
  call.link = &link(plan.topology);
  call.layout = plan.layout;
  call.message = detail::low_latency_dispatch_message(plan.hidden, plan.use_fp8);
  call.sequence = ++sequence_;
  call.tag = common::low_latency_call_tag(call.sequence, plan.signature);
  call.half = common::low_latency_half(call.sequence);
  call.rank = plan.rank;
  call.num_ranks = num_ranks;
  call.local_experts = plan.local_experts;
  call.hidden = plan.hidden;
  call.max_tokens_per_rank = plan.max_tokens_per_rank;
  call.use_fp8 = plan.use_fp8;
  call.round_scale = plan.round_scale;
  call.use_ue8m0 = plan.use_ue8m0;
  call.timeout_seconds = plan.config.timeout_seconds;
  call.masking = {mask_, plan.config.mask_ranks_on_timeout};
  call.wait_recv_cost_stats =
      args.wait_recv_cost_stats.defined() ? args.wait_recv_cost_stats.as<int64_t>() : nullptr;

  DispatchOutputs out = prepare_expert_major_outputs(plan, owner_, Engine::low_latency);

  dispatch_sender(call, args.x, args.topk_idx);

  LowLatencyDispatchResult result = dispatch_result(out);
  if (args.return_recv_hook) {
    result.hook = [call, out] { dispatch_receiver(call, out); };
  } else {
    dispatch_receiver(call, out);
  }
  return result;
}

LowLatencyCombineResult LowLatencyEngine::combine(const detail::LowLatencyCombinePlan& plan) {
  const LowLatencyCombineArgs& args = plan.args;
  const detail::ExpertMajorHandleData& handle = *plan.handle;

  CombineCall call{};
  call.heap = &heap_.view();
  call.link = &link(plan.topology);
  call.layout = plan.layout;
  call.sequence = ++sequence_;
  call.tag = common::low_latency_call_tag(call.sequence, plan.signature);
  call.half = common::low_latency_half(call.sequence);
  call.rank = plan.rank;
  call.num_ranks = plan.topology.num_ranks;
  call.local_experts = handle.local_experts;
  call.hidden = plan.hidden;
  call.max_tokens_per_rank = handle.max_tokens_per_rank;
  call.timeout_seconds = plan.config.timeout_seconds;
  call.masking = {mask_, plan.config.mask_ranks_on_timeout};
  call.use_logfmt = args.use_logfmt;
  call.wait_recv_cost_stats =
      args.wait_recv_cost_stats.defined() ? args.wait_recv_cost_stats.as<int64_t>() : nullptr;

  LowLatencyCombineResult result;
  result.combined_x = output_or_allocate(args.out_combined_x, DType::bf16, {handle.num_tokens, plan.hidden});
  // The receive half may run later (hook): it keeps its own copy of the routing it reduces with.
  const size_t pairs = static_cast<size_t>(handle.num_tokens) * handle.topk;
  std::vector<int64_t> topk_idx(args.topk_idx.as<const int64_t>(), args.topk_idx.as<const int64_t>() + pairs);
  std::vector<float> topk_weights(args.topk_weights.as<const float>(),
                                  args.topk_weights.as<const float>() + pairs);

  combine_sender(call, handle, plan.y);

  auto receive = [call, topk_idx = std::move(topk_idx), topk_weights = std::move(topk_weights),
                  topk = handle.topk, biases = combine_biases(args), combined_x = result.combined_x] {
    combine_receiver(call, topk_idx, topk_weights, topk, biases, combined_x.as<uint16_t>());
  };
  if (args.return_recv_hook) {
    result.hook = std::move(receive);
  } else {
    receive();
  }
  return result;
}

}  // namespace switchyard::cpu
