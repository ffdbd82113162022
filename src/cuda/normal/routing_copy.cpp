#include "cuda/normal/routing_copy.hpp"

#include "device/cuda_check.hpp"

namespace switchyard::cuda {

Tensor copy_is_token_in_rank(const TensorView& caller, int device, cudaStream_t stream,
                             cudaStream_t allocation_stream) {
  Tensor owned = Tensor::empty(DType::boolean, {caller.shape[0], caller.shape[1]}, Device::cuda, device,
                               allocation_stream);
  copy_is_token_in_rank_into(caller, owned, stream);
  return owned;
}

void copy_is_token_in_rank_into(const TensorView& caller, const Tensor& owned, cudaStream_t stream) {
  if (caller.nbytes() > 0) {
    SY_CUDA_CHECK(
        cudaMemcpyAsync(owned.data(), caller.data, caller.nbytes(), cudaMemcpyDeviceToDevice, stream));
  }
}

}  // namespace switchyard::cuda
