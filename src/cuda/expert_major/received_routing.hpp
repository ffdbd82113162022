#pragma once
// The routing an expert-major handle (low_latency, symmetric) keeps for its combine: layout_range and
// src_info, which the dispatch kernels write into the call's outputs. Outputs the library allocated are
// shared with the handle (it co-owns them). The caller's out_layout_range / out_src_info are borrowed
// for the call only, so there the engine gives the handle tensors of its own, allocated with the call's
// other handle tensors (before any kernel), and fills them with copy_received_routing.
#include <cuda_runtime.h>

#include <cstdint>

#include "core/expert_major_handle.hpp"

namespace switchyard::cuda {

// After the kernel that writes `layout_range` and `src_info` (the call's outputs), on its stream:
// copies each into the handle's tensor where that is not the output itself. No host synchronisation,
// so it can be captured in a CUDA graph.
void copy_received_routing(const detail::ExpertMajorHandleData& handle, const int32_t* layout_range,
                           const int32_t* src_info, cudaStream_t stream);

}  // namespace switchyard::cuda
