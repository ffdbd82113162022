#include "cuda_graph.hpp"

#include "cuda_check.hpp"
#include "switchyard/errors.hpp"

namespace switchyard::bench {

#if defined(SWITCHYARD_WITH_CUDA)

namespace {

// NOTES: relaxed, not thread-local. Ranks are threads, so the capture must not restrict what other
// threads do (the global mode would: a peer's allocation would invalidate it); thread-local and
// relaxed both leave other threads alone. Thread-local also forbids this thread's own "unsafe" calls,
// and both engines' dispatch makes one: the handle's routing table is a plain cudaMalloc during a
// capture (Tensor::empty allocates plain, persistent memory while its stream captures), which
// thread-local capture refuses. The library's own graph tests capture relaxed for the same reason.
// A plain cudaMalloc cannot wait on a spinning kernel here: graph_replay.cpp captures only while every
// rank's stream is idle.
constexpr cudaStreamCaptureMode kCaptureMode = cudaStreamCaptureModeRelaxed;

// Ends a capture that failed, so that the stream can be used again, and drops its graph.
void abandon_capture(cudaStream_t stream) {
  cudaGraph_t graph = nullptr;
  cudaStreamEndCapture(stream, &graph);
  if (graph) cudaGraphDestroy(graph);
  cudaGetLastError();  // the capture's errors are not sticky: clear them for the calls that follow
}

}  // namespace

struct CapturedCall::Graph {
  cudaStream_t stream = nullptr;
  cudaGraphExec_t exec = nullptr;
  std::string what;
};

CapturedCall::CapturedCall(Stream stream, const std::string& what, const std::function<void()>& call)
    : graph_(std::make_unique<Graph>()) {
  graph_->stream = cuda_stream(stream);
  graph_->what = what;
  check_cuda(cudaStreamBeginCapture(graph_->stream, kCaptureMode), "cudaStreamBeginCapture (" + what + ")");
  try {
    call();
  } catch (...) {
    abandon_capture(graph_->stream);
    throw;
  }
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(graph_->stream, &graph);
  if (ended != cudaSuccess) {
    if (graph) cudaGraphDestroy(graph);
    cudaGetLastError();
    check_cuda(ended, "cudaStreamEndCapture (" + what + ")");
  }
  const cudaError_t instantiated = cudaGraphInstantiate(&graph_->exec, graph, 0);
  // The executable graph does not need the graph it was made from.
  cudaGraphDestroy(graph);
  if (instantiated != cudaSuccess) {
    graph_->exec = nullptr;
    cudaGetLastError();
    check_cuda(instantiated, "cudaGraphInstantiate (" + what + ")");
  }
}

CapturedCall::~CapturedCall() {
  if (graph_ && graph_->exec) cudaGraphExecDestroy(graph_->exec);
}

void CapturedCall::launch() {
  check_cuda(cudaGraphLaunch(graph_->exec, graph_->stream), "cudaGraphLaunch (" + graph_->what + ")");
}

#else

struct CapturedCall::Graph {};

CapturedCall::CapturedCall(Stream /*stream*/, const std::string& what,
                           const std::function<void()>& /*call*/) {
  throw Unsupported("switchyard-bench: built without the CUDA backend, so " + what + " cannot be captured");
}

CapturedCall::~CapturedCall() = default;

void CapturedCall::launch() {
  throw Unsupported("switchyard-bench: built without the CUDA backend, so there is no CUDA graph");
}

#endif

}  // namespace switchyard::bench
