#pragma once
// A cached dispatch with x in the heap (DispatchPlan::gather_in_place): the cached handle already holds
// the receive order, so a receiver needs nothing from its sources but their rows. Each channel's worker
// copies its (source, channel) ranges straight from the sources' heaps; no ring is touched
// (docs/normal-in-place.md, "The cached dispatch").
#include <cstdint>

#include "cpu/normal/dispatch_roles.hpp"

namespace switchyard::cpu {

// Copies the rows of `channel` from every source: row r of (source s, channel) comes from token
// `cached_recv_src_token[r]` of s's heap input, and that index is written to the new handle's
// recv_src_token. Runs between the call's first barrier (every source's x is written) and its last (no
// peer still reads this rank's x when the caller refills it).
void gather_cached_rows(const DispatchContext& context, const int32_t* cached_recv_src_token, int channel);

}  // namespace switchyard::cpu
