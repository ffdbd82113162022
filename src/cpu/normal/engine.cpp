// The CPU `normal` engine's calls on one node: ring reset and barrier, count exchange (notify),
// outputs (cpu/normal/call.hpp), then one thread per channel driving that channel's sender and
// receiver.
#include "cpu/normal/engine.hpp"

#include <cstring>

#include "core/normal_sizing.hpp"
#include "cpu/normal/call.hpp"
#include "cpu/normal/channel_role.hpp"
#include "cpu/normal/channel_workers.hpp"
#include "cpu/normal/combine_roles.hpp"
#include "cpu/normal/dispatch_roles.hpp"
#include "cpu/normal/in_place_gather.hpp"

namespace switchyard::cpu {

namespace {

// Runs a channel's two roles until both are done, with the bounded-wait policy.
template <typename Sender, typename Receiver>
void drive_channel(Sender& sender, Receiver& receiver, int rank, const char* operation, int channel,
                   double timeout_seconds, const std::atomic<bool>& abort) {
  WaitBudget budget(timeout_seconds, &abort);
  while (!sender.done() || !receiver.done()) {
    bool progressed = sender.step();
    progressed = receiver.step() || progressed;
    if (progressed) {
      budget.progressed();
      continue;
    }
    budget.idle([&] {
      if (!receiver.done()) return role_label(rank, operation, "receiver", channel) + receiver.waiting_for();
      return role_label(rank, operation, "sender", channel) + sender.waiting_for();
    });
  }
}

// The caller's inputs that are not the heap input's views, copied into them (core/staged_heap_input.hpp):
// before the call's first barrier, after which peers may read them.
void stage_heap_input(const common::SymHeap& heap, const detail::StagedHeapInput& staged) {
  for (const detail::StagedCopy& copy : staged) {
    if (!copy.scales.column_major) {
      std::memcpy(heap.base + copy.heap_offset, copy.from, copy.bytes);
      continue;
    }
    float* rows = reinterpret_cast<float*>(heap.base + copy.heap_offset);
    for (int64_t token = 0; token < copy.scales.num_tokens; ++token) {
      common::copy_token_scales(static_cast<const float*>(copy.from), copy.scales, token,
                                rows + token * copy.scales.num_scales);
    }
  }
}

}  // namespace

DispatchResult NormalEngine::dispatch(const detail::DispatchPlan& plan) {
  const common::NormalHeapLayout layout = detail::dispatch_heap_layout(plan);
  const Tensor is_token_in_rank = dispatch_routing(plan);
  // With x in the heap no ring is used: the sources leave their routing beside their rows, before the first
  // barrier, and the receivers pull both (docs/normal-in-place.md).
  if (!plan.x_in_heap) calls_.zero_rings(layout);
  stage_heap_input(calls_.heap(), plan.staged);
  if (plan.x_in_heap && !plan.gather_by_handle) {
    leave_routing(calls_.heap(), plan, is_token_in_rank.as<const uint8_t>());
  }
  calls_.open_call(layout, plan.config, "dispatch",
                   plan.cached ? common::routed_signature(plan.signature, routing_epoch_of(*plan.cached))
                               : plan.signature);
  // A rank whose outputs cannot be made after the counts still plays its part (DispatchCall::failure), and
  // finish_dispatch raises the failure once the call is over.
  DispatchCall call = calls_.start_dispatch(plan, layout, is_token_in_rank, nullptr);
  run_channel_workers(plan.config.num_channels, [&](int channel, const std::atomic<bool>& abort) {
    if (plan.x_in_heap) {
      gather_rows(call.context,
                  plan.gather_by_handle ? plan.cached->recv_src_token.as<const int32_t>() : nullptr, channel);
      return;
    }
    DispatchSender sender(call.context, channel);
    DispatchReceiver receiver(call.context, channel);
    drive_channel(sender, receiver, plan.rank, "dispatch", channel, plan.config.timeout_seconds, abort);
  });
  // Rows read in place: every peer is done reading this rank's input before the caller may refill it.
  if (plan.x_in_heap) calls_.arrive_and_wait(layout, plan.config, "dispatch");
  return finish_dispatch(plan, call);
}

CombineResult NormalEngine::combine(const detail::CombinePlan& plan) {
  const common::NormalHeapLayout layout = detail::combine_heap_layout(plan);
  CombineResult result = start_combine(plan);
  const CombineContext context = combine_context(calls_.heap(), plan, layout, result);
  calls_.zero_rings(layout);
  stage_heap_input(calls_.heap(), plan.staged);
  // Rows read in place: each home learns where its rows start on every expert rank before the barrier.
  if (plan.y_in_heap) publish_first_rows(context);
  calls_.open_call(layout, plan.config, "combine",
                   common::routed_signature(plan.signature, routing_epoch_of(*plan.handle)));
  run_channel_workers(plan.config.num_channels, [&](int channel, const std::atomic<bool>& abort) {
    CombineSender sender(context, channel);
    CombineReceiver receiver(context, channel);
    drive_channel(sender, receiver, plan.rank, "combine", channel, plan.config.timeout_seconds, abort);
  });
  // Rows read in place: every home is done reading this rank's rows before the caller may refill them.
  if (plan.y_in_heap) calls_.arrive_and_wait(layout, plan.config, "combine");
  return result;
}

}  // namespace switchyard::cpu
