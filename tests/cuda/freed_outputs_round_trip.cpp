#include "cuda/freed_outputs_round_trip.hpp"

#include <memory>
#include <string>
#include <vector>

#include "cuda/device_tensors.hpp"
#include "cuda/expert_major_round_trip.hpp"
#include "cuda/rank_device.hpp"

namespace switchyard::testing::expert_major {

void check_combine_after_the_callers_outputs_were_freed(Engine engine, const Case& c,
                                                        const Expected& expected, bool hook, int rank,
                                                        Buffer& buffer, cudaStream_t stream,
                                                        Failures& failures) {
  const int device = device_of(buffer);
  const DeviceInputs in = upload_inputs(expected.data[rank], device, stream);
  auto outputs = std::make_unique<PoisonedOutputs>(
      poisoned_device_outputs(c, expected.data[rank].x.size(0), device, stream));
  LowLatencyDispatchArgs args = dispatch_args(c, in.x, in.topk_idx, stream);
  outputs->attach(args);
  args.return_recv_hook = hook;
  LowLatencyDispatchResult dispatched = dispatch_with(engine, buffer, args);
  if (hook) dispatched.hook();
  buffer.synchronize(stream);
  const Outputs out = download(dispatched, stream);
  check_dispatch(out, expected.dispatched[rank], "the reference", rank, failures);
  const Tensor y = to_device(expert_outputs(out.recv_x, out.recv_x_scales, rank), device, stream);

  // Zero counts and rows: a combine that still read these would send nothing, and its homes would
  // wait for their rows until the timeout. Then freed on `stream`, where the pool may hand the memory to
  // the next allocations: those get the same zeros.
  std::vector<TensorView> shapes;
  for (const Tensor* routing : {&outputs->layout_range, &outputs->src_info}) {
    check_cuda(cudaMemsetAsync(routing->data(), 0, routing->nbytes(), stream), "overwrite");
    shapes.push_back(routing->view());
  }
  outputs.reset();
  constexpr int kScribblesPerShape = 4;
  std::vector<Tensor> scribbles;
  for (int i = 0; i < kScribblesPerShape; ++i) {
    for (const TensorView& shape : shapes) {
      Tensor scribble =
          Tensor::empty_like_shape(shape.dtype, shape.shape, shape.ndim, Device::cuda, device, stream);
      check_cuda(cudaMemsetAsync(scribble.data(), 0, scribble.nbytes(), stream), "scribble");
      scribbles.push_back(scribble);
    }
  }

  const Tensor weights = to_device(expected.data[rank].topk_weights, device, stream);
  LowLatencyCombineResult combined =
      combine_with(engine, buffer, combine_args(in.topk_idx, weights, dispatched.handle, y, stream));
  if (combined.hook) combined.hook();
  buffer.synchronize(stream);
  compare(to_host(combined.combined_x, stream), expected.combined[rank],
          std::string("combined_x") + (hook ? " (hooks)" : ""), rank, failures);
}

}  // namespace switchyard::testing::expert_major
