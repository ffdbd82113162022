#pragma once
// The outputs of an expert-major dispatch and the handle that goes with them, shared by the
// low_latency and symmetric engines, which must produce the very same tensors.
#include <memory>

#include "core/backend.hpp"
#include "core/low_latency_handle.hpp"

namespace switchyard::cpu {

struct ExpertMajorOutputs {
  Tensor recv_x, recv_x_scales, recv_count, layout_range, src_info;
  std::shared_ptr<detail::LowLatencyHandleData> handle;
};

// The caller's preallocated outputs or fresh ones, and a handle recording the plan's routing (a
// copy of topk_idx) for `engine`'s combine.
ExpertMajorOutputs prepare_expert_major_outputs(const detail::ExpertMajorDispatchPlan& plan, const void* owner,
                                                Engine engine);

}  // namespace switchyard::cpu
