#pragma once
// The `normal` engine's heap layout and message formats for a given call: one place for the
// arithmetic that sizes buffers, shared by the backends and by normal_heap_bytes().
#include "common/internode_protocol.hpp"
#include "common/normal_protocol.hpp"
#include "core/backend.hpp"

namespace switchyard::detail {

common::DispatchMessage dispatch_message(int hidden, DType dtype, int topk, bool has_weights);
common::CombineMessage combine_message(int hidden, int topk, bool has_weights);

// The heap layout of a dispatch (its rings carry whole tokens; a dispatch in place uses only its barrier
// and notify words, docs/normal-in-place.md).
common::NormalHeapLayout dispatch_heap_layout(const DispatchPlan& plan);
common::NormalHeapLayout combine_heap_layout(const CombinePlan& plan);

// Across nodes (ranks_per_node < num_ranks): the token that crosses the network in dispatch, and
// the RDMA region, which follows the call's intranode layout. Combine's RDMA slot carries one node
// partial, in the CombineMessage format.
common::InternodeDispatchMessage internode_dispatch_message(int hidden, DType dtype, int topk,
                                                            bool has_weights);
// The RDMA region after `intranode` for these knobs and an RDMA slot of `rdma_slot_bytes`.
common::InternodeHeapLayout make_internode_layout(const common::NormalHeapLayout& intranode,
                                                  const Topology& topology, const Config& config,
                                                  size_t rdma_slot_bytes);
common::InternodeHeapLayout dispatch_internode_layout(const DispatchPlan& plan);
common::InternodeHeapLayout combine_internode_layout(const CombinePlan& plan);
// Bytes of the normal region a call uses: the intranode layout, plus the RDMA region across nodes.
size_t normal_call_bytes(const DispatchPlan& plan);
size_t normal_call_bytes(const CombinePlan& plan);

}  // namespace switchyard::detail
