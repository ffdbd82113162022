#pragma once
// One call captured from a rank's stream into a CUDA graph, instantiated, and replayed with launch():
// the launch-free latency of a call whose work is all on the stream (graph_replay.hpp).
#include <functional>
#include <memory>
#include <string>

#include "switchyard/buffer.hpp"

namespace switchyard::bench {

class CapturedCall {
 public:
  // Captures what `call` enqueues on `stream` and instantiates it. A failure (the call throws, or
  // the capture or the instantiation fails) throws, naming `what`, with the stream out of capture
  // mode again: the library's error as it was, or SystemError for a CUDA call. Throws Unsupported in
  // a build without the CUDA backend.
  CapturedCall(Stream stream, const std::string& what, const std::function<void()>& call);
  ~CapturedCall();
  CapturedCall(const CapturedCall&) = delete;
  CapturedCall& operator=(const CapturedCall&) = delete;

  // Replays the graph on the stream it was captured from.
  void launch();

 private:
  struct Graph;
  std::unique_ptr<Graph> graph_;
};

}  // namespace switchyard::bench
