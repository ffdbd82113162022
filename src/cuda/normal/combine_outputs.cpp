#include "cuda/normal/combine_outputs.hpp"

#include "core/carved_allocation.hpp"

namespace switchyard::cuda {

CombineResult combine_outputs(const detail::CombinePlan& plan, int64_t num_tokens, int device,
                              cudaStream_t allocation_stream) {
  const CombineArgs& args = plan.args;
  const bool new_x = !args.out_combined_x.defined();
  const bool new_weights = plan.has_weights && !args.out_combined_topk_weights.defined();
  detail::CarvedAllocation outputs;
  const size_t x_at = new_x ? outputs.reserve(DType::bf16, num_tokens * plan.hidden) : 0;
  const size_t weights_at = new_weights ? outputs.reserve(DType::f32, num_tokens * plan.topk) : 0;
  const Tensor storage =
      new_x || new_weights ? outputs.allocate(Device::cuda, device, allocation_stream) : Tensor();
  CombineResult result;
  result.combined_x = new_x ? Tensor::part_of(storage, x_at, DType::bf16, {num_tokens, plan.hidden})
                            : Tensor::borrow(args.out_combined_x);
  if (plan.has_weights) {
    result.combined_topk_weights =
        new_weights ? Tensor::part_of(storage, weights_at, DType::f32, {num_tokens, plan.topk})
                    : Tensor::borrow(args.out_combined_topk_weights);
  }
  return result;
}

}  // namespace switchyard::cuda
