#pragma once
// What a CUDA engine asks of its backend when a call starts. The backend (cuda/backend/cuda_backend.cpp)
// implements it and hands it to each engine it constructs, so that an engine is a unit
// (core/engine.hpp) whose calls take only core's plan: the streams, the device error block and the
// call count stay the backend's.
#include "cuda/backend/call_env.hpp"
#include "device/kernel_context.hpp"
#include "switchyard/buffer.hpp"

namespace switchyard::cuda {

// A call's start: its kernel context (the heap, the error block, the timeouts, the masks; any heap
// layout, which the engine sets) and where it runs.
struct CallStart {
  KernelContext context;
  CallEnv env;
};

class CallServices {
 public:
  // Each makes the buffer's device current, resolves `stream` (the caller's, checked to belong to this
  // GPU, or the buffer's own), counts the call and raises what kernels of earlier calls recorded, before
  // anything of this call is enqueued.
  // A `normal` call: the context carries the call's channels and chunk (`call`: the Buffer's Config, or
  // with the call's CallTuning applied).
  virtual CallStart begin_normal_call(Stream stream, const Config& call) = 0;
  // A call of an expert-major engine (low_latency, symmetric).
  virtual CallStart begin_expert_major_call(Stream stream) = 0;

 protected:
  ~CallServices() = default;
};

}  // namespace switchyard::cuda
