#include <cuda_runtime.h>

#include <cmath>

#include "device/cuda_check.hpp"
#include "synthetic_weights.hpp"

namespace switchyard::moe_bench {

namespace {

__global__ void fill_bf16(uint16_t* out, uint64_t count, uint64_t seed, int rank, WeightTensor tensor,
                          float scale) {
  for (uint64_t i = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<uint64_t>(gridDim.x) * blockDim.x) {
    out[i] = synthetic_bf16(seed, rank, tensor, i, scale);
  }
}
__global__ void fill_e4m3(uint8_t* out, uint64_t count, uint64_t seed, int rank, WeightTensor tensor) {
  for (uint64_t i = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<uint64_t>(gridDim.x) * blockDim.x) {
    out[i] = synthetic_e4m3(seed, rank, tensor, i);
  }
}
__global__ void fill_scales(float* out, uint64_t count, uint64_t seed, int rank, WeightTensor tensor,
                            float scale) {
  for (uint64_t i = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<uint64_t>(gridDim.x) * blockDim.x) {
    out[i] = synthetic_scale(seed, rank, tensor, i, scale);
  }
}

}  // namespace

void fill_weights_on_device(const MoeWeights& weights, const common::MoeWeightLayout& layout,
                            int local_experts, bool fp8, uint64_t seed, int rank, void* stream_pointer) {
  const cudaStream_t stream = static_cast<cudaStream_t>(stream_pointer);
  const float w1_scale = 1.0f / std::sqrt(static_cast<float>(layout.hidden));
  const float w2_scale = 1.0f / std::sqrt(static_cast<float>(layout.intermediate));
  const uint64_t w1_count = layout.w1_elements(local_experts), w2_count = layout.w2_elements(local_experts);
  constexpr int kBlocks = 1024, kThreads = 256;
  if (fp8) {
    fill_e4m3<<<kBlocks, kThreads, 0, stream>>>(weights.w1.as<uint8_t>(), w1_count, seed, rank,
                                                WeightTensor::w1);
    fill_e4m3<<<kBlocks, kThreads, 0, stream>>>(weights.w2.as<uint8_t>(), w2_count, seed, rank,
                                                WeightTensor::w2);
    fill_scales<<<kBlocks, kThreads, 0, stream>>>(weights.w1_scales.as<float>(), weights.w1_scales.numel(),
                                                  seed, rank, WeightTensor::w1_scales, w1_scale);
    fill_scales<<<kBlocks, kThreads, 0, stream>>>(weights.w2_scales.as<float>(), weights.w2_scales.numel(),
                                                  seed, rank, WeightTensor::w2_scales, w2_scale);
  } else {
    fill_bf16<<<kBlocks, kThreads, 0, stream>>>(weights.w1.as<uint16_t>(), w1_count, seed, rank,
                                                WeightTensor::w1, w1_scale);
    fill_bf16<<<kBlocks, kThreads, 0, stream>>>(weights.w2.as<uint16_t>(), w2_count, seed, rank,
                                                WeightTensor::w2, w2_scale);
  }
  SY_CUDA_CHECK_LAUNCH();
}

void fill_activations_on_device(const TensorView& a, const TensorView& scales, WeightTensor which,
                                WeightTensor which_scales, uint64_t seed, int rank, void* stream_pointer) {
  const cudaStream_t stream = static_cast<cudaStream_t>(stream_pointer);
  constexpr int kBlocks = 1024, kThreads = 256;
  const uint64_t count = static_cast<uint64_t>(a.numel());
  if (a.dtype == DType::fp8_e4m3) {
    fill_e4m3<<<kBlocks, kThreads, 0, stream>>>(a.as<uint8_t>(), count, seed, rank, which);
    fill_scales<<<kBlocks, kThreads, 0, stream>>>(scales.as<float>(), static_cast<uint64_t>(scales.numel()),
                                                  seed, rank, which_scales, 1.0f);
  } else {
    fill_bf16<<<kBlocks, kThreads, 0, stream>>>(a.as<uint16_t>(), count, seed, rank, which, 1.0f);
  }
  SY_CUDA_CHECK_LAUNCH();
}

void fill_expert_on_host(const MoeWeights& weights, const common::MoeWeightLayout& layout, int local,
                         bool fp8, uint64_t seed, int rank) {
  const float w1_scale = 1.0f / std::sqrt(static_cast<float>(layout.hidden));
  const float w2_scale = 1.0f / std::sqrt(static_cast<float>(layout.intermediate));
  const uint64_t w1_begin = layout.w1_row(local, 0), w1_end = layout.w1_row(local + 1, 0);
  const uint64_t w2_begin = layout.w2_row(local, 0), w2_end = layout.w2_row(local + 1, 0);
  if (fp8) {
    for (uint64_t i = w1_begin; i < w1_end; ++i)
      weights.w1.as<uint8_t>()[i] = synthetic_e4m3(seed, rank, WeightTensor::w1, i);
    for (uint64_t i = w2_begin; i < w2_end; ++i)
      weights.w2.as<uint8_t>()[i] = synthetic_e4m3(seed, rank, WeightTensor::w2, i);
    for (uint64_t i = layout.w1_scales_row(local, 0);
         i < static_cast<uint64_t>(layout.w1_scales_row(local + 1, 0)); ++i) {
      weights.w1_scales.as<float>()[i] = synthetic_scale(seed, rank, WeightTensor::w1_scales, i, w1_scale);
    }
    for (uint64_t i = layout.w2_scales_row(local, 0);
         i < static_cast<uint64_t>(layout.w2_scales_row(local + 1, 0)); ++i) {
      weights.w2_scales.as<float>()[i] = synthetic_scale(seed, rank, WeightTensor::w2_scales, i, w2_scale);
    }
  } else {
    for (uint64_t i = w1_begin; i < w1_end; ++i) {
      weights.w1.as<uint16_t>()[i] = synthetic_bf16(seed, rank, WeightTensor::w1, i, w1_scale);
    }
    for (uint64_t i = w2_begin; i < w2_end; ++i) {
      weights.w2.as<uint16_t>()[i] = synthetic_bf16(seed, rank, WeightTensor::w2, i, w2_scale);
    }
  }
}

}  // namespace switchyard::moe_bench
