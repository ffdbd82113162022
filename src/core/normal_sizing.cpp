#include "core/normal_sizing.hpp"

#include <algorithm>

#include "core/plan_context.hpp"
#include "switchyard/config.hpp"

namespace switchyard::detail {

common::DispatchMessage dispatch_message(int hidden, DType dtype, int topk, bool has_weights) {
  common::DispatchMessage message{};
  message.row_bytes = static_cast<uint32_t>(hidden * dtype_size(dtype));
  message.num_scales = dtype == DType::fp8_e4m3 ? static_cast<uint32_t>(hidden / common::kScaleBlock) : 0u;
  message.topk = static_cast<uint32_t>(topk);
  message.has_weights = has_weights ? 1u : 0u;
  return message;
}

common::CombineMessage combine_message(int hidden, int topk, bool has_weights) {
  common::CombineMessage message{};
  message.row_bytes = static_cast<uint32_t>(hidden * 2);
  message.topk = static_cast<uint32_t>(topk);
  message.has_weights = has_weights ? 1u : 0u;
  return message;
}

namespace {
common::NormalHeapLayout make_layout(const Topology& topology, const Config& config, int local_experts,
                                     size_t slot_bytes) {
  common::NormalHeapLayout layout{};
  layout.num_ranks = topology.num_ranks;
  layout.num_channels = config.num_channels;
  layout.local_experts = local_experts;
  layout.ring_slots = static_cast<uint32_t>(config.ring_slots);
  layout.slot_bytes = static_cast<uint32_t>(slot_bytes);
  return layout;
}

}  // namespace

common::InternodeHeapLayout make_internode_layout(const common::NormalHeapLayout& intranode,
                                                  const Topology& topology, const Config& config,
                                                  size_t rdma_slot_bytes) {
  common::InternodeHeapLayout layout{};
  layout.base = common::align_up(intranode.total_bytes(), common::kCounterStride);
  layout.num_nodes = topology.num_nodes();
  layout.ranks_per_node = topology.ranks_per_node;
  layout.num_channels = intranode.num_channels;
  // NOTES: the RDMA rings use the intranode ring's slot count and chunk: one knob for both stages.
  layout.rdma_slots = static_cast<uint32_t>(config.ring_slots);
  layout.rdma_slot_bytes = static_cast<uint32_t>(common::align_up(rdma_slot_bytes, common::kFieldAlignment));
  layout.notify_record_bytes = static_cast<uint32_t>(intranode.notify_record_bytes());
  layout.num_ranks = topology.num_ranks;
  return layout;
}

common::InternodeDispatchMessage internode_dispatch_message(int hidden, DType dtype, int topk,
                                                            bool has_weights) {
  common::InternodeDispatchMessage message{};
  message.row_bytes = static_cast<uint32_t>(hidden * dtype_size(dtype));
  message.num_scales = dtype == DType::fp8_e4m3 ? static_cast<uint32_t>(hidden / common::kScaleBlock) : 0u;
  message.topk = static_cast<uint32_t>(topk);
  message.has_weights = has_weights ? 1u : 0u;
  return message;
}

common::InternodeHeapLayout dispatch_internode_layout(const DispatchPlan& plan) {
  auto message = internode_dispatch_message(plan.hidden, plan.dtype, plan.topk, plan.has_weights);
  return make_internode_layout(dispatch_heap_layout(plan), plan.topology, plan.config, message.bytes());
}

common::InternodeHeapLayout combine_internode_layout(const CombinePlan& plan) {
  auto message = combine_message(plan.hidden, plan.topk, plan.has_weights);
  return make_internode_layout(combine_heap_layout(plan), plan.topology, plan.config, message.bytes());
}

size_t normal_call_bytes(const DispatchPlan& plan) {
  if (plan.topology.is_single_node()) return dispatch_heap_layout(plan).total_bytes();
  return dispatch_internode_layout(plan).end();
}

size_t normal_call_bytes(const CombinePlan& plan) {
  if (plan.topology.is_single_node()) return combine_heap_layout(plan).total_bytes();
  return combine_internode_layout(plan).end();
}

common::NormalHeapLayout dispatch_heap_layout(const DispatchPlan& plan) {
  const common::DispatchMessage message =
      dispatch_message(plan.hidden, plan.dtype, plan.topk, plan.has_weights);
  return make_layout(plan.topology, plan.config, plan.local_experts, message.bytes());
}

common::NormalHeapLayout combine_heap_layout(const CombinePlan& plan) {
  auto message = combine_message(plan.hidden, plan.topk, plan.has_weights);
  return make_layout(plan.topology, plan.config, 0, message.bytes());
}

}  // namespace switchyard::detail

namespace switchyard {

namespace {

// The intranode layout (the NVLink stage) of calls up to `sizing`, and the RDMA region's end after it
// (equal to the intranode bytes within one node).
struct NormalHeapExtent {
  size_t intranode_bytes;
  size_t end;
};

NormalHeapExtent normal_heap_extent(const Topology& topology, const Config& config,
                                    const BufferSizing& sizing) {
  topology.validate();
  config.validate();
  detail::check_sizing(sizing);
  auto dispatch = detail::dispatch_message(sizing.hidden, sizing.dtype, sizing.topk, true);
  // fp8 calls carry scales but a bf16 call of the same hidden needs the larger row: size for both.
  auto dispatch_bf16 = detail::dispatch_message(sizing.hidden, DType::bf16, sizing.topk, true);
  auto combine = detail::combine_message(sizing.hidden, sizing.topk, true);
  size_t slot_bytes = std::max({dispatch.bytes(), dispatch_bf16.bytes(), combine.bytes()});
  int local_experts = sizing.num_experts / std::max(1, topology.num_ranks);
  common::NormalHeapLayout layout{};
  layout.num_ranks = topology.num_ranks;
  // Auto channels resolve per backend; size for the most any backend picks.
  layout.num_channels = config.num_channels != Config::kAutoChannels
                            ? config.num_channels
                            : std::max(Config::kDefaultCpuChannels, Config::kMaxAutoCudaChannels);
  layout.local_experts = local_experts;
  layout.ring_slots = static_cast<uint32_t>(config.ring_slots);
  layout.slot_bytes = static_cast<uint32_t>(slot_bytes);
  const size_t intranode_bytes = layout.total_bytes();
  if (topology.is_single_node()) return {intranode_bytes, intranode_bytes};
  // Across nodes, the RDMA region follows, sized for the largest message either way.
  auto internode = detail::internode_dispatch_message(sizing.hidden, sizing.dtype, sizing.topk, true);
  auto internode_bf16 = detail::internode_dispatch_message(sizing.hidden, DType::bf16, sizing.topk, true);
  size_t rdma_slot_bytes = std::max({internode.bytes(), internode_bf16.bytes(), combine.bytes()});
  return {intranode_bytes, detail::make_internode_layout(layout, topology, config, rdma_slot_bytes).end()};
}

}  // namespace

size_t normal_heap_bytes(const Topology& topology, const Config& config, const BufferSizing& sizing) {
  return normal_heap_extent(topology, config, sizing).end;
}

size_t normal_rdma_heap_bytes(const Topology& topology, const Config& config, const BufferSizing& sizing) {
  const NormalHeapExtent extent = normal_heap_extent(topology, config, sizing);
  return extent.end - extent.intranode_bytes;
}

}  // namespace switchyard
