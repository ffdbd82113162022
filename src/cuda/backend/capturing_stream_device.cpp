#include "cuda/backend/capturing_stream_device.hpp"

#include <cuda.h>

namespace switchyard::cuda {
namespace {

// The driver's functions, taken from the runtime's entry-point table (no link against libcuda, which
// the build machines without a GPU lack); CUDA 12.0's signatures, which the drivers in use keep.
struct DriverContextCalls {
  using StreamGetCtx = CUresult (*)(CUstream, CUcontext*);
  using CtxPushCurrent = CUresult (*)(CUcontext);
  using CtxGetDevice = CUresult (*)(CUdevice*);
  using CtxPopCurrent = CUresult (*)(CUcontext*);
  StreamGetCtx stream_get_ctx = nullptr;
  CtxPushCurrent push_current = nullptr;
  CtxGetDevice get_device = nullptr;
  CtxPopCurrent pop_current = nullptr;

  bool complete() const { return stream_get_ctx && push_current && get_device && pop_current; }
};

template <class Function>
void take_entry_point(const char* symbol, Function& out) {
  void* address = nullptr;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  if (cudaGetDriverEntryPointByVersion(symbol, &address, 12000, cudaEnableDefault, &found) == cudaSuccess &&
      found == cudaDriverEntryPointSuccess) {
    out = reinterpret_cast<Function>(address);
  } else {
    cudaGetLastError();  // not sticky; a later call must not report it
  }
}

const DriverContextCalls& driver_context_calls() {
  static const DriverContextCalls calls = [] {
    DriverContextCalls taken;
    take_entry_point("cuStreamGetCtx", taken.stream_get_ctx);
    take_entry_point("cuCtxPushCurrent", taken.push_current);
    take_entry_point("cuCtxGetDevice", taken.get_device);
    take_entry_point("cuCtxPopCurrent", taken.pop_current);
    return taken;
  }();
  return calls;
}

}  // namespace

void prepare_capturing_stream_checks() {
  driver_context_calls();
}

std::optional<int> capturing_stream_device(cudaStream_t stream) {
  const DriverContextCalls& driver = driver_context_calls();
  if (!driver.complete()) return std::nullopt;
  CUcontext context = nullptr;
  if (driver.stream_get_ctx(stream, &context) != CUDA_SUCCESS || !context) {
    return std::nullopt;
  }
  // NOTES: cuCtxGetDevice asks the current context, so the stream's is made current for the question and
  // the caller's restored right after.
  if (driver.push_current(context) != CUDA_SUCCESS) return std::nullopt;
  CUdevice device = -1;
  const CUresult asked = driver.get_device(&device);
  CUcontext popped = nullptr;
  driver.pop_current(&popped);
  if (asked != CUDA_SUCCESS) return std::nullopt;
  return static_cast<int>(device);
}

}  // namespace switchyard::cuda
