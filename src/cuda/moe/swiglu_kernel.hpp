#pragma once
// The layer's activation between its GEMMs (docs/MOE.md rounding points 3 and 4): per received row of
// h [L, C, 2I] (bf16, in W1's stored row order: gate and up halves, or 128-channel blocks interleaved,
// common::MoeWeightLayout::gate_column), a = swiglu(gate, up) in fp32 with
// common::swiglu, then rounded to bf16, or requantised per 128 channels to e4m3 with an f32 scale by
// common::requantise_block_to_fp8's arithmetic (the
// hardware cast, device/fp8_cast.cuh). One warp per row; rows at or past min(count, C) are
// left alone (the combine never reads them).
#include <cuda_runtime.h>

#include <cstdint>

#include "common/moe_layout.hpp"

namespace switchyard::cuda::moe_kernels {

constexpr int kSwigluWarps = 4;  // rows per block

struct SwigluArgs {
  common::MoeWeightLayout weights;
  common::MoeWorkspaceLayout space;
  const uint16_t* gate_up;  // h, bf16
  const int32_t* recv_count;
  float clamp;
  void* activations;         // a: uint16_t (bf16) or uint8_t (e4m3)
  float* activation_scales;  // fp8 only
};

// Enqueues the kernel of the recipe (fp8: requantised to e4m3, else bf16) over every local expert's
// capacity rows on `stream`.
void launch_swiglu(const SwigluArgs& args, bool fp8, cudaStream_t stream);

// Loads both kernels into the current device's context (cuda/backend/kernel_preload.hpp says why).
void preload_swiglu_kernels();

}  // namespace switchyard::cuda::moe_kernels
