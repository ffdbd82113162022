#pragma once
// The layer's activation between its GEMMs (docs/MOE.md rounding points 3 and 4): per received row of
// h [L, C, 2I] (fp32: gate channels [0, I), up channels [I, 2I)), a = swiglu(gate, up) in fp32 with
// common::swiglu, then rounded to bf16, or requantised per 128 channels to e4m3 with an f32 scale by
// common::requantise_block_to_fp8's arithmetic (the
// hardware cast, device/fp8_cast.cuh). One warp per row; rows at or past min(count, C) are
// left alone (the combine never reads them).
#include <cuda_runtime.h>

#include <cstdint>

#include "common/moe_layout.hpp"
#include "common/moe_numerics.hpp"
#include "device/fp8_cast.cuh"

namespace switchyard::cuda::moe_kernels {

constexpr int kSwigluWarps = 4;  // rows per block

struct SwigluArgs {
  common::MoeWorkspaceLayout space;
  const float* gate_up;  // h
  const int32_t* recv_count;
  float clamp;
  void* activations;         // a: uint16_t (bf16) or uint8_t (e4m3)
  float* activation_scales;  // fp8 only
};

// The row this warp owns, or -1 when it is past the expert's received rows.
__device__ inline int64_t swiglu_row(const SwigluArgs& args, int local) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kSwigluWarps + threadIdx.x / 32;
  const int64_t count =
      args.recv_count[local] < args.space.capacity ? args.recv_count[local] : args.space.capacity;
  return r < count ? r : -1;
}

__global__ void swiglu_to_bf16_kernel(SwigluArgs args) {
  const int local = blockIdx.y;
  const int64_t r = swiglu_row(args, local);
  if (r < 0) return;
  const int intermediate = args.space.intermediate;
  const float* gate = args.gate_up + args.space.row(local, r) * 2 * intermediate;
  const float* up = gate + intermediate;
  uint16_t* a = static_cast<uint16_t*>(args.activations) + args.space.activation_row(local, r);
  for (int c = threadIdx.x % 32; c < intermediate; c += 32) {
    a[c] = common::float_to_bf16(common::swiglu(gate[c], up[c], args.clamp));
  }
}

// Each lane holds 4 of a block's 128 channels; the warp's amax is the block's (max is exact in any
// order, and fmaxf drops a NaN as the CPU's comparison does).
__global__ void swiglu_to_fp8_kernel(SwigluArgs args) {
  const int local = blockIdx.y;
  const int64_t r = swiglu_row(args, local);
  if (r < 0) return;
  const int intermediate = args.space.intermediate;
  const int lane = threadIdx.x % 32;
  const float* gate = args.gate_up + args.space.row(local, r) * 2 * intermediate;
  const float* up = gate + intermediate;
  uint8_t* a = static_cast<uint8_t*>(args.activations) + args.space.activation_row(local, r);
  float* scales = args.activation_scales + args.space.activation_scales_row(local, r);
  for (int block = 0; block < intermediate / common::kMoeScaleBlock; ++block) {
    const int c = block * common::kMoeScaleBlock + lane * 4;
    const float4 g = *reinterpret_cast<const float4*>(gate + c);
    const float4 u = *reinterpret_cast<const float4*>(up + c);
    const float v[4] = {common::swiglu(g.x, u.x, args.clamp), common::swiglu(g.y, u.y, args.clamp),
                        common::swiglu(g.z, u.z, args.clamp), common::swiglu(g.w, u.w, args.clamp)};
    float amax = 0.0f;
    for (int i = 0; i < 4; ++i) amax = fmaxf(amax, fabsf(v[i]));
    for (int offset = 16; offset > 0; offset /= 2)
      amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, offset));
    const float scale = common::fp8_block_scale(amax, false);
    *reinterpret_cast<uint32_t*>(a + c) = fp8x4_e4m3(v, 1.0f / scale);
    if (lane == 0) scales[block] = scale;
  }
}

}  // namespace switchyard::cuda::moe_kernels
