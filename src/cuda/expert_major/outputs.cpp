#include "cuda/expert_major/outputs.hpp"

#include "common/fp8_cast.hpp"

namespace switchyard::cuda {

Tensor output_or_allocate(const TensorView& given, DType dtype, std::initializer_list<int64_t> dims,
                          int device, cudaStream_t alloc_stream) {
  if (given.defined()) return Tensor::borrow(given);
  return Tensor::empty(dtype, dims, Device::cuda, device, alloc_stream);
}

LowLatencyDispatchResult expert_major_dispatch_outputs(const detail::ExpertMajorDispatchPlan& plan,
                                                       int device, cudaStream_t alloc_stream) {
  const LowLatencyDispatchArgs& args = plan.args;
  const int64_t local = plan.local_experts;
  const int64_t rows = plan.expert_capacity;
  const int64_t num_ranks = plan.topology.num_ranks;
  const int num_scales = plan.use_fp8 ? plan.hidden / common::kFp8CastBlock : 0;
  LowLatencyDispatchResult result;
  result.recv_x = output_or_allocate(args.out_recv_x, plan.use_fp8 ? DType::fp8_e4m3 : DType::bf16,
                                     {local, rows, plan.hidden}, device, alloc_stream);
  if (plan.use_ue8m0) {
    result.recv_x_scales =
        output_or_allocate(args.out_recv_x_scales, DType::i32, {local, rows, common::ue8m0_words(num_scales)},
                           device, alloc_stream);
  } else if (plan.use_fp8) {
    result.recv_x_scales = output_or_allocate(args.out_recv_x_scales, DType::f32, {local, rows, num_scales},
                                              device, alloc_stream);
  }
  result.recv_count = output_or_allocate(args.out_recv_count, DType::i32, {local}, device, alloc_stream);
  result.layout_range =
      output_or_allocate(args.out_layout_range, DType::i32, {local, num_ranks, 2}, device, alloc_stream);
  result.src_info = output_or_allocate(args.out_src_info, DType::i32, {local, rows}, device, alloc_stream);
  return result;
}

}  // namespace switchyard::cuda
