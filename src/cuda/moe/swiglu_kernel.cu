// The SwiGLU kernels between the layer's GEMMs (swiglu_kernel.hpp).
#include "common/moe_numerics.hpp"
#include "cuda/backend/dependent_launch.hpp"
#include "cuda/backend/kernel_preload.hpp"
#include "cuda/moe/swiglu_kernel.hpp"
#include "device/bf16x8.cuh"
#include "device/cuda_check.hpp"
#include "device/fp8_cast.cuh"
#include "device/ptx.cuh"

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
  ptx::wait_for_previous_grid();  // launched by launch_dependent: before any global access
  const int local = blockIdx.y;
  const int64_t r = swiglu_row(args, local);
  if (r < 0) return;
  const int intermediate = args.space.intermediate;
  const uint16_t* h = args.gate_up + args.space.row(local, r) * 2 * intermediate;
  uint16_t* a = static_cast<uint16_t*>(args.activations) + args.space.activation_row(local, r);
  for (int c = threadIdx.x % 32; c < intermediate; c += 32) {
    a[c] = common::float_to_bf16(common::swiglu(common::bf16_to_float(h[args.weights.gate_column(c)]),
                                                common::bf16_to_float(h[args.weights.up_column(c)]),
                                                args.clamp));
  }
}

// A step is 256 channels: two requantisation blocks, one per half warp, each lane 8 consecutive channels
// (one 16-byte load of gate and one of up: 8 consecutive channels are 8 consecutive columns of h in either
// W1 layout, blocks stay whole). The phase is HBM-bound (h's bf16 read is most of its bytes), so each
// lane first issues the loads of kSwigluSteps steps and only then computes: 2 x 16 x kSwigluSteps bytes
// in flight per lane rather than one step's.
constexpr int kSwigluStepChannels = 256;
constexpr int kSwigluSteps = 4;

// One step's block: silu(gate) * up of the lane's 8 channels, the half warp's amax (max is exact in any
// order, and fmaxf drops a NaN as the CPU's comparison does), the scale and the e4m3 bytes. Lanes past
// I (an odd number of blocks) compute on zeros and store nothing; the shuffles stay within each half.
__device__ __forceinline__ void requantise_step(const SwigluArgs& args, const int4& gate, const int4& up,
                                                int c, uint8_t* a, float* scales) {
  float g[8], u[8], v[8];
  unpack_bf16x8(g, gate);
  unpack_bf16x8(u, up);
  float amax = 0.0f;
  for (int i = 0; i < 8; ++i) {
    v[i] = common::swiglu(g[i], u[i], args.clamp);
    amax = fmaxf(amax, fabsf(v[i]));
  }
  for (int offset = 8; offset > 0; offset /= 2)
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, offset));
  if (c >= args.space.intermediate) return;
  const float scale = common::fp8_block_scale(amax, false);
  const float inverse = 1.0f / scale;
  const float low[4] = {v[0], v[1], v[2], v[3]}, high[4] = {v[4], v[5], v[6], v[7]};
  *reinterpret_cast<uint2*>(a + c) = make_uint2(fp8x4_e4m3(low, inverse), fp8x4_e4m3(high, inverse));
  if (c % common::kMoeScaleBlock == 0) scales[c / common::kMoeScaleBlock] = scale;
}

__global__ void swiglu_to_fp8_kernel(SwigluArgs args) {
  ptx::wait_for_previous_grid();  // launched by launch_dependent: before any global access
  const int local = blockIdx.y;
  const int64_t r = swiglu_row(args, local);
  if (r < 0) return;
  const int intermediate = args.space.intermediate;
  const int lane = threadIdx.x % 32;
  const uint16_t* h = args.gate_up + args.space.row(local, r) * 2 * intermediate;
  uint8_t* a = static_cast<uint8_t*>(args.activations) + args.space.activation_row(local, r);
  float* scales = args.activation_scales + args.space.activation_scales_row(local, r);
  for (int first = 0; first < intermediate; first += kSwigluSteps * kSwigluStepChannels) {
    int4 gate[kSwigluSteps], up[kSwigluSteps];
#pragma unroll
    for (int step = 0; step < kSwigluSteps; ++step) {
      const int c = first + step * kSwigluStepChannels + lane * 8;
      gate[step] = up[step] = make_int4(0, 0, 0, 0);
      if (c < intermediate) {
        gate[step] = __ldcs(reinterpret_cast<const int4*>(h + args.weights.gate_column(c)));
        up[step] = __ldcs(reinterpret_cast<const int4*>(h + args.weights.up_column(c)));
      }
    }
#pragma unroll
    for (int step = 0; step < kSwigluSteps; ++step) {
      if (first + step * kSwigluStepChannels >= intermediate) break;  // warp-uniform
      requantise_step(args, gate[step], up[step], first + step * kSwigluStepChannels + lane * 8, a, scales);
    }
  }
}

}  // namespace

void launch_swiglu(const SwigluArgs& args, bool fp8, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>((args.space.capacity + kSwigluWarps - 1) / kSwigluWarps),
                  static_cast<unsigned>(args.space.local_experts));
  launch_dependent(fp8 ? swiglu_to_fp8_kernel : swiglu_to_bf16_kernel, grid, 32 * kSwigluWarps, 0, stream,
                   args);
}

void preload_swiglu_kernels() {
  preload_kernel(swiglu_to_bf16_kernel);
  preload_kernel(swiglu_to_fp8_kernel);
}

}  // namespace switchyard::cuda::moe_kernels
