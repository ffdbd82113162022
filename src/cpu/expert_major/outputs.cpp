#include "cpu/expert_major/outputs.hpp"

#include <cstring>

#include "common/fp8_cast.hpp"
#include "core/expert_major_plan.hpp"

namespace switchyard::cpu {

Tensor output_or_allocate(const TensorView& given, DType dtype, std::initializer_list<int64_t> dims) {
  return given.defined() ? Tensor::borrow(given) : Tensor::empty(dtype, dims);
}

CombineBiases combine_biases(const LowLatencyCombineArgs& args) {
  CombineBiases biases;
  if (args.bias0.defined()) biases.bias0 = args.bias0.as<const uint16_t>();
  if (args.bias1.defined()) biases.bias1 = args.bias1.as<const uint16_t>();
  return biases;
}

namespace {

Tensor kept_by_handle(const Tensor& output, bool caller_owned) {
  if (!caller_owned) return output;
  Tensor copy =
      Tensor::empty_like_shape(output.dtype(), output.view().shape, output.view().ndim, Device::cpu, 0);
  if (output.nbytes() > 0) std::memcpy(copy.data(), output.data(), output.nbytes());
  return copy;
}

}  // namespace

void keep_received_routing(const ExpertMajorOutputs& out) {
  out.handle->layout_range = kept_by_handle(out.layout_range, out.caller_layout_range);
  out.handle->src_info = kept_by_handle(out.src_info, out.caller_src_info);
}

ExpertMajorOutputs prepare_expert_major_outputs(const detail::ExpertMajorDispatchPlan& plan,
                                                detail::BufferId owner, Engine engine) {
  const LowLatencyDispatchArgs& args = plan.args;
  const int64_t local = plan.local_experts;
  const int64_t rows = plan.expert_capacity;  // per local expert (R * max unless the call set one)
  const int num_scales = plan.use_fp8 ? plan.hidden / common::kFp8CastBlock : 0;

  auto handle = detail::make_expert_major_handle(plan, owner, engine);
  handle->topk_idx = Tensor::empty(DType::i64, {plan.num_tokens, plan.topk});
  if (args.topk_idx.nbytes() > 0)
    std::memcpy(handle->topk_idx.data(), args.topk_idx.data, args.topk_idx.nbytes());
  handle->src_slot = Tensor::empty(DType::i32, {local, rows});

  ExpertMajorOutputs out;
  out.recv_x = output_or_allocate(args.out_recv_x, plan.use_fp8 ? DType::fp8_e4m3 : DType::bf16,
                                  {local, rows, plan.hidden});
  if (plan.use_ue8m0) {
    out.recv_x_scales = output_or_allocate(args.out_recv_x_scales, DType::i32,
                                           {local, rows, common::ue8m0_words(num_scales)});
  } else if (plan.use_fp8) {
    out.recv_x_scales = output_or_allocate(args.out_recv_x_scales, DType::f32, {local, rows, num_scales});
  }
  out.recv_count = output_or_allocate(args.out_recv_count, DType::i32, {local});
  out.layout_range =
      output_or_allocate(args.out_layout_range, DType::i32, {local, plan.topology.num_ranks, 2});
  out.src_info = output_or_allocate(args.out_src_info, DType::i32, {local, rows});
  out.caller_layout_range = args.out_layout_range.defined();
  out.caller_src_info = args.out_src_info.defined();
  out.handle = handle;
  return out;
}

LowLatencyDispatchResult dispatch_result(const ExpertMajorOutputs& out) {
  LowLatencyDispatchResult result;
  result.recv_x = out.recv_x;
  result.recv_x_scales = out.recv_x_scales;
  result.recv_count = out.recv_count;
  result.layout_range = out.layout_range;
  result.src_info = out.src_info;
  result.handle = LowLatencyHandle(out.handle);
  return result;
}

}  // namespace switchyard::cpu
