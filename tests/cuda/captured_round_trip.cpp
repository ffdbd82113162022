#include "cuda/captured_round_trip.hpp"

namespace switchyard::testing::expert_major {

CapturedRoundTrip::CapturedRoundTrip(Engine engine, const Case& c, Group& group, Buffer& buffer,
                                     const DeviceInputs& in, const TensorView& y, const PoisonedOutputs& out,
                                     cudaStream_t stream)
    : stream_(stream) {
  LowLatencyDispatchArgs args = dispatch_args(c, in.x, in.topk_idx, stream);
  out.attach(args);
  check_cuda(cudaStreamSynchronize(stream), "sync before capture");
  group.barrier();
  check_cuda(cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed), "begin dispatch capture");
  dispatched_ = dispatch_with(engine, buffer, args);
  check_cuda(cudaStreamEndCapture(stream, &dispatch_graph_), "end dispatch capture");
  check_cuda(cudaGraphInstantiate(&dispatch_exec_, dispatch_graph_, 0), "instantiate dispatch graph");
  LowLatencyCombineArgs cargs = combine_args(in.topk_idx, in.topk_weights, dispatched_.handle, y, stream);
  out.attach(cargs);
  check_cuda(cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed), "begin combine capture");
  combine_with(engine, buffer, cargs);
  check_cuda(cudaStreamEndCapture(stream, &combine_graph_), "end combine capture");
  check_cuda(cudaGraphInstantiate(&combine_exec_, combine_graph_, 0), "instantiate combine graph");
  group.barrier();
}

CapturedRoundTrip::~CapturedRoundTrip() {
  cudaGraphExecDestroy(dispatch_exec_);
  cudaGraphExecDestroy(combine_exec_);
  cudaGraphDestroy(dispatch_graph_);
  cudaGraphDestroy(combine_graph_);
}

void CapturedRoundTrip::launch_dispatch() const {
  check_cuda(cudaGraphLaunch(dispatch_exec_, stream_), "launch dispatch graph");
}

void CapturedRoundTrip::launch_combine() const {
  check_cuda(cudaGraphLaunch(combine_exec_, stream_), "launch combine graph");
}

}  // namespace switchyard::testing::expert_major
