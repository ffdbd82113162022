// The SwiGLU kernels between the layer's GEMMs (swiglu_kernel.hpp).
#include "common/moe_numerics.hpp"
#include "cuda/backend/kernel_preload.hpp"
#include "cuda/moe/swiglu_kernel.hpp"
#include "device/cuda_check.hpp"
#include "device/fp8_cast.cuh"

namespace switchyard::cuda::moe_kernels {

// The row this warp owns, or -1 when it is past the expert's received rows.
namespace {

__device__ int64_t swiglu_row(const SwigluArgs& args, int local) {
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
  const float* h = args.gate_up + args.space.row(local, r) * 2 * intermediate;
  uint16_t* a = static_cast<uint16_t*>(args.activations) + args.space.activation_row(local, r);
  for (int c = threadIdx.x % 32; c < intermediate; c += 32) {
    a[c] = common::float_to_bf16(
        common::swiglu(h[args.weights.gate_column(c)], h[args.weights.up_column(c)], args.clamp));
  }
}

// Each lane holds 4 of a block's 128 channels (4 consecutive channels are 4 consecutive columns of h in
// either layout: blocks stay whole); the warp's amax is the block's (max is exact in any order, and fmaxf
// drops a NaN as the CPU's comparison does).
__global__ void swiglu_to_fp8_kernel(SwigluArgs args) {
  const int local = blockIdx.y;
  const int64_t r = swiglu_row(args, local);
  if (r < 0) return;
  const int intermediate = args.space.intermediate;
  const int lane = threadIdx.x % 32;
  const float* h = args.gate_up + args.space.row(local, r) * 2 * intermediate;
  uint8_t* a = static_cast<uint8_t*>(args.activations) + args.space.activation_row(local, r);
  float* scales = args.activation_scales + args.space.activation_scales_row(local, r);
  for (int block = 0; block < intermediate / common::kMoeScaleBlock; ++block) {
    const int c = block * common::kMoeScaleBlock + lane * 4;
    const float4 g = *reinterpret_cast<const float4*>(h + args.weights.gate_column(c));
    const float4 u = *reinterpret_cast<const float4*>(h + args.weights.up_column(c));
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

}  // namespace

void launch_swiglu(const SwigluArgs& args, bool fp8, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>((args.space.capacity + kSwigluWarps - 1) / kSwigluWarps),
                  static_cast<unsigned>(args.space.local_experts));
  if (fp8) {
    swiglu_to_fp8_kernel<<<grid, 32 * kSwigluWarps, 0, stream>>>(args);
  } else {
    swiglu_to_bf16_kernel<<<grid, 32 * kSwigluWarps, 0, stream>>>(args);
  }
  SY_CUDA_CHECK_LAUNCH();
}

void preload_swiglu_kernels() {
  preload_kernel(swiglu_to_bf16_kernel);
  preload_kernel(swiglu_to_fp8_kernel);
}

}  // namespace switchyard::cuda::moe_kernels
