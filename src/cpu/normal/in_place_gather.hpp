#pragma once
// A dispatch with x in the heap (DispatchPlan::x_in_heap; docs/normal-in-place.md) uses no ring. Before the
// call's first barrier each source leaves its routing in its own heap (leave_routing): per destination the
// tokens it gets, channel by channel, and its topk_idx and topk_weights. After the counts are known each
// receiver pulls its rows, and their routing, straight from its sources' heaps (gather_rows). A cached
// dispatch without topk_idx (DispatchPlan::gather_by_handle) needs none of it: the receiver's own handle
// holds every row's source token.
#include <cstdint>

#include "common/sym_heap.hpp"
#include "core/engine_plans.hpp"
#include "cpu/normal/dispatch_roles.hpp"

namespace switchyard::cpu {

// Writes this rank's send lists (from `is_token_in_rank`, [N, R]) and its topk_idx and topk_weights into
// its heap input (common::NormalInputLayout).
void leave_routing(const common::SymHeap& heap, const detail::DispatchPlan& plan,
                   const uint8_t* is_token_in_rank);

// Pulls the rows of `channel` from every source: row r of (source s, channel) is entry
// r - first_row(s) of s's send list for this rank, or with `cached_recv_src_token` token
// cached_recv_src_token[r]. Copies the row and its scales, writes its routing as this rank sees it (local
// expert ids, -1 and weight 0 for other ranks' experts) and its source token.
void gather_rows(const DispatchContext& context, const int32_t* cached_recv_src_token, int channel);

}  // namespace switchyard::cpu
