#pragma once
// The `normal` engine's dispatch and combine: every argument checked on the host, the call's heap
// footprint checked against the normal region, and a signature that every rank's call must match.
#include <cstddef>

#include "common/normal_protocol.hpp"
#include "core/backend.hpp"
#include "core/plan_context.hpp"

namespace switchyard::detail {

// What the normal engine's plans read besides: the channel count and the heap's normal region.
struct NormalPlanContext : PlanContext {
  int num_channels;            // the backend's, Config::num_channels resolved: a call's default
  int max_num_channels;        // the most a call's CallTuning may ask for
  size_t normal_region_bytes;  // the normal engine's part of the heap: [0, normal_region_bytes)
  size_t heap_bytes;           // the whole heap, named in the message of a call too large for it
  // The heap-resident dispatch input (BufferSizing::normal_heap_input_tokens) and combine input
  // (BufferSizing::normal_heap_combine_rows), in this rank's heap at heap_base.
  common::NormalInputLayout input;
  common::NormalCombineInputLayout combine_input;
  const uint8_t* heap_base;
};

// Buffer::normal_input's views of this rank's heap-resident dispatch input.
NormalInputViews normal_input_views(const NormalPlanContext& buffer, int64_t num_tokens, int hidden,
                                    DType dtype);
// Buffer::normal_combine_input's views for `handle`'s dispatch (hidden 0: the sizing's).
NormalCombineInputViews normal_combine_input_views(const NormalPlanContext& buffer,
                                                   const DispatchHandle& handle, int hidden);

DispatchPlan plan_dispatch(const DispatchArgs& args, const NormalPlanContext& buffer);
CombinePlan plan_combine(const CombineArgs& args, const NormalPlanContext& buffer);

}  // namespace switchyard::detail
