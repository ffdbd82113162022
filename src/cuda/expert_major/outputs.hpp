#pragma once
// The device outputs of an expert-major dispatch, shared by the CUDA low_latency and symmetric
// engines, which must hand back the very same tensors (cpu/expert_major/outputs.hpp is the CPU side).
#include <cuda_runtime.h>

#include <initializer_list>

#include "core/backend.hpp"
#include "switchyard/low_latency.hpp"

namespace switchyard::cuda {

// The caller's preallocated output, or a fresh one on the call's allocation stream.
Tensor output_or_allocate(const TensorView& given, DType dtype, std::initializer_list<int64_t> dims,
                          int device, cudaStream_t alloc_stream);

// recv_x [L, C, H] (bf16, or e4m3 with use_fp8), recv_x_scales (f32 [L, C, H / 128], or packed UE8M0
// i32 [L, C, ceil(H / 512)] with use_ue8m0; none without fp8), recv_count i32 [L], layout_range i32
// [L, R, 2] and src_info i32 [L, C], C = plan.expert_capacity: the caller's out_* where given.
LowLatencyDispatchResult expert_major_dispatch_outputs(const detail::ExpertMajorDispatchPlan& plan,
                                                       int device, cudaStream_t alloc_stream);

}  // namespace switchyard::cuda
