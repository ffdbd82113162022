// The CPU hierarchical `normal` engine's calls: ring and RDMA counter reset and barrier, count
// exchange (notify, through the transport to other nodes), outputs (cpu/normal/call.hpp), then one
// thread per channel driving that channel's RDMA sender, coordinator, forwarder and receiver, and a
// transport flush.
#include "cpu/internode/engine.hpp"

#include <string>
#include <vector>

#include "core/normal_sizing.hpp"
#include "cpu/internode/combine_roles.hpp"
#include "cpu/internode/dispatch_roles.hpp"
#include "cpu/normal/call.hpp"
#include "cpu/normal/channel_role.hpp"
#include "cpu/normal/channel_workers.hpp"
#include "switchyard/errors.hpp"

namespace switchyard::cpu {

transport::Transport* InternodeEngine::transport() {
  if (!transport_) {
    const common::SymHeap& heap = calls_.heap();
    transport_ = std::make_unique<transport::LoopbackTransport>(
        heap, transport::LoopbackOptions::for_buffer(transport_options_, heap.rank));
  }
  return transport_.get();
}

void InternodeEngine::begin_call(const common::NormalHeapLayout& layout,
                                 const common::InternodeHeapLayout& rdma, const Topology& topology,
                                 const Config& config, const char* operation, uint64_t signature) {
  const common::SymHeap& heap = calls_.heap();
  calls_.zero_rings(layout);
  for (int channel = 0; channel < rdma.num_channels; ++channel) {
    for (int node = 0; node < rdma.num_nodes; ++node) {
      common::RdmaCounters* counters = rdma.counters(heap.base, channel, node);
      common::st_release_sys(&counters->recv_tail, 0);
      common::st_release_sys(&counters->recv_total, 0);
      common::st_release_sys(&counters->send_head, 0);
    }
  }
  calls_.open_call(layout, config, operation, signature, transport(), topology.ranks_per_node);
}

void InternodeEngine::end_call(const Config& config, int rank, const char* operation) {
  if (transport_ && !transport_->flush(config.timeout_seconds)) {
    throw TimeoutError(role_label(rank, operation, "transport flush", -1) +
                       ": operations still in flight after " + std::to_string(config.timeout_seconds) + " s");
  }
}

DispatchResult InternodeEngine::dispatch(const detail::DispatchPlan& plan) {
  const common::SymHeap& heap = calls_.heap();
  const common::NormalHeapLayout layout = detail::dispatch_heap_layout(plan);
  const Tensor is_token_in_rank = dispatch_routing(plan);
  const common::InternodeHeapLayout rdma = detail::dispatch_internode_layout(plan);
  begin_call(layout, rdma, plan.topology, plan.config, "dispatch",
             plan.cached ? common::routed_signature(plan.signature, routing_epoch_of(*plan.cached))
                         : plan.signature);
  transport::Transport* link = transport();
  DispatchCall call = calls_.start_dispatch(plan, layout, is_token_in_rank, link);

  const int num_channels = plan.config.num_channels;
  const int ranks_per_node = plan.topology.ranks_per_node;
  const int num_nodes = plan.topology.num_nodes();
  call.handle->forwarded.assign(static_cast<size_t>(num_channels) * num_nodes, {});
  InternodeDispatchContext internode{};
  internode.intranode = &call.context;
  internode.transport = link;
  internode.rdma = rdma;
  internode.rdma_message =
      detail::internode_dispatch_message(plan.hidden, plan.dtype, plan.topk, plan.has_weights);
  internode.ranks_per_node = ranks_per_node;
  internode.num_nodes = num_nodes;
  internode.forwarded = &call.handle->forwarded;
  run_channel_workers(num_channels, [&](int channel, const std::atomic<bool>& abort) {
    RdmaLink rdma_link{&heap,          link,      rdma,    plan.rank,
                       ranks_per_node, num_nodes, channel, call.context.chunk_tokens};
    std::vector<RdmaSendQueue> queues(num_nodes);
    RdmaDispatchSender sender(internode, rdma_link, queues);
    RdmaCoordinator coordinator(rdma_link, queues);
    DispatchForwarder forwarder(internode, rdma_link);
    NamedRole<DispatchReceiver> receiver("receiver", call.context, channel);
    drive_roles({&sender, &coordinator, &forwarder, &receiver}, plan.rank, "dispatch", channel,
                plan.config.timeout_seconds, abort);
  });
  end_call(plan.config, plan.rank, "dispatch");
  return finish_dispatch(plan, call);
}

CombineResult InternodeEngine::combine(const detail::CombinePlan& plan) {
  const common::SymHeap& heap = calls_.heap();
  const detail::NormalHandleData& handle = *plan.handle;
  const common::NormalHeapLayout layout = detail::combine_heap_layout(plan);
  CombineResult result = start_combine(plan);

  const common::InternodeHeapLayout rdma = detail::combine_internode_layout(plan);
  if (handle.forwarded.size() != static_cast<size_t>(plan.config.num_channels) * plan.topology.num_nodes()) {
    throw InvalidArgument("handle: expected a dispatch across " + std::to_string(plan.topology.num_nodes()) +
                          " nodes with " + std::to_string(plan.config.num_channels) +
                          " channels, got one without "
                          "the forwarder's record");
  }
  begin_call(layout, rdma, plan.topology, plan.config, "combine",
             common::routed_signature(plan.signature, routing_epoch_of(handle)));
  const CombineContext context = combine_context(heap, plan, layout, result);

  transport::Transport* link = transport();
  const int num_nodes = plan.topology.num_nodes();
  InternodeCombineContext internode{};
  internode.intranode = &context;
  internode.transport = link;
  internode.rdma = rdma;
  internode.num_nodes = num_nodes;
  internode.forwarded = &handle.forwarded;
  run_channel_workers(plan.config.num_channels, [&](int channel, const std::atomic<bool>& abort) {
    RdmaLink rdma_link{
        &heap, link, rdma, plan.rank, context.ranks_per_node, num_nodes, channel, context.chunk_tokens};
    std::vector<RdmaSendQueue> queues(num_nodes);
    NvlCombineSender sender(internode, channel);
    CombineForwarder forwarder(internode, rdma_link, queues);
    RdmaCoordinator coordinator(rdma_link, queues);
    RdmaCombineReceiver receiver(internode, rdma_link);
    drive_roles({&sender, &forwarder, &coordinator, &receiver}, plan.rank, "combine", channel,
                plan.config.timeout_seconds, abort);
  });
  end_call(plan.config, plan.rank, "combine");
  return result;
}

}  // namespace switchyard::cpu
