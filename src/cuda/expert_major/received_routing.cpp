#include "cuda/expert_major/received_routing.hpp"

#include "device/cuda_check.hpp"

namespace switchyard::cuda {

namespace {

void copy_if_separate(const Tensor& kept, const int32_t* output, cudaStream_t stream) {
  if (kept.data() == output || kept.nbytes() == 0) return;
  SY_CUDA_CHECK(cudaMemcpyAsync(kept.data(), output, kept.nbytes(), cudaMemcpyDeviceToDevice, stream));
}

}  // namespace

void copy_received_routing(const detail::ExpertMajorHandleData& handle, const int32_t* layout_range,
                           const int32_t* src_info, cudaStream_t stream) {
  copy_if_separate(handle.layout_range, layout_range, stream);
  copy_if_separate(handle.src_info, src_info, stream);
}

}  // namespace switchyard::cuda
