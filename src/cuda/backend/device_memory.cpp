// Device allocations for Tensor::empty, and whether a CUDA device is usable at all.
#include "core/device_memory.hpp"

#include <cuda_runtime.h>

#include <atomic>
#include <mutex>
#include <utility>
#include <vector>

#include "device/cuda_check.hpp"

namespace switchyard::detail {

namespace {

// While a stream is being captured in CUDA's global or thread-local mode (torch.cuda.graph's default is
// global), cudaMalloc and cudaFree are "unsafe" calls that CUDA refuses, and the refusal invalidates
// the capture. The calls below switch this thread to the relaxed mode for their duration, as
// cudaThreadExchangeStreamCaptureMode exists for.
class RelaxedCaptureMode {
 public:
  RelaxedCaptureMode() { ok_ = cudaThreadExchangeStreamCaptureMode(&mode_) == cudaSuccess; }
  ~RelaxedCaptureMode() {
    if (ok_) cudaThreadExchangeStreamCaptureMode(&mode_);
  }
  RelaxedCaptureMode(const RelaxedCaptureMode&) = delete;
  RelaxedCaptureMode& operator=(const RelaxedCaptureMode&) = delete;

 private:
  cudaStreamCaptureMode mode_ = cudaStreamCaptureModeRelaxed;  // the caller's, while swapped out
  bool ok_ = false;
};

// Sets a device for a scope and puts the caller's back.
class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    SY_CUDA_CHECK(cudaGetDevice(&previous_));
    SY_CUDA_CHECK(cudaSetDevice(device));
  }
  ~DeviceScope() { cudaSetDevice(previous_); }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int previous_ = 0;
};

// ---- allocations owned by a captured graph as well as by their tensor ----------------------------
//
// A call captured in a CUDA graph allocates its outputs and its handle's tables once, at capture, and
// every replay's kernels use those addresses. The caller keeps the outputs it reads, but may drop the
// rest (DeepEP's users drop the handle after capture: theirs is made of torch tensors from the graph's
// pool). Freed with their tensor, the replays would read and write freed memory. So such an
// allocation is also referenced by the graph, through a CUDA user object, and freed only once both
// the tensor and the graph (with every executable instantiated from it) are gone.
//
// CUDA runs a user object's destructor on a thread of its own, where no CUDA call is allowed: the
// destructor queues the pointer, and the next allocation or free on any thread returns it to the pool.
// These allocations come from the stream-ordered allocator on a private stream per device, so that
// neither the allocation nor the deferred free synchronises the device: with ranks as threads, a
// device-wide synchronisation waits for peers' kernels that wait for this thread.

struct GraphOwnedBytes {
  void* pointer;
  int device;
};

class DeferredFrees {
 public:
  static DeferredFrees& instance() {
    // Never destroyed: CUDA may run a destructor callback while the process exits.
    static DeferredFrees* frees = new DeferredFrees();
    return *frees;
  }
  void push(GraphOwnedBytes* bytes) {
    const std::lock_guard<std::mutex> lock(mutex_);
    queued_.push_back(bytes);
    pending_.store(true, std::memory_order_release);
  }
  // Frees what the destructor callbacks queued. Errors are not thrown: this runs inside unrelated
  // calls (and in deleters), and a failed free leaks one block rather than failing that call.
  void drain() {
    // NOTES: every allocation of every call drains, and almost always finds nothing: one atomic load
    // keeps the mutex (shared by every rank thread) off that path.
    if (!pending_.load(std::memory_order_acquire)) return;
    std::vector<GraphOwnedBytes*> queued;
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      pending_.store(false, std::memory_order_relaxed);
      if (queued_.empty()) return;
      queued.swap(queued_);
    }
    int previous = 0;
    if (cudaGetDevice(&previous) != cudaSuccess) previous = -1;
    const RelaxedCaptureMode relaxed;
    for (GraphOwnedBytes* bytes : queued) {
      if (cudaSetDevice(bytes->device) == cudaSuccess)
        cudaFreeAsync(bytes->pointer, side_stream(bytes->device));
      delete bytes;
    }
    cudaGetLastError();
    if (previous >= 0) cudaSetDevice(previous);
  }
  // The private stream of `device` (the current device): created once, never destroyed.
  cudaStream_t side_stream(int device) {
    const std::lock_guard<std::mutex> lock(mutex_);
    if (device >= static_cast<int>(streams_.size())) streams_.resize(device + 1, nullptr);
    if (!streams_[device]) {
      const RelaxedCaptureMode relaxed;
      SY_CUDA_CHECK(cudaStreamCreateWithFlags(&streams_[device], cudaStreamNonBlocking));
    }
    return streams_[device];
  }

 private:
  std::mutex mutex_;
  std::atomic<bool> pending_{false};  // queued_ may be non-empty (set under the mutex)
  std::vector<GraphOwnedBytes*> queued_;
  std::vector<cudaStream_t> streams_;
};

void destroy_graph_owned(void* bytes) {
  DeferredFrees::instance().push(static_cast<GraphOwnedBytes*>(bytes));
}

// `size` bytes on `device` (current) for a call being captured into `graph`.
std::shared_ptr<void> allocate_for_graph(size_t size, int device, cudaGraph_t graph) {
  const RelaxedCaptureMode relaxed;
  DeferredFrees& frees = DeferredFrees::instance();
  const cudaStream_t side = frees.side_stream(device);
  void* pointer = nullptr;
  SY_CUDA_CHECK(cudaMallocAsync(&pointer, size, side));
  // The graph's kernels run on other streams: the allocation must be complete before any launch.
  cudaError_t status = cudaStreamSynchronize(side);
  auto* bytes = new GraphOwnedBytes{pointer, device};
  cudaUserObject_t object = nullptr;
  // Two references: the tensor's (released by its deleter) and the graph's.
  if (status == cudaSuccess) {
    status = cudaUserObjectCreate(&object, bytes, destroy_graph_owned, 2, cudaUserObjectNoDestructorSync);
  }
  if (status == cudaSuccess) {
    status = cudaGraphRetainUserObject(graph, object, 1, cudaGraphUserObjectMove);
    if (status != cudaSuccess) cudaUserObjectRelease(object, 2);  // runs the destructor: queued
  } else {
    cudaFreeAsync(pointer, side);
    delete bytes;
  }
  SY_CUDA_CHECK(status);
  return std::shared_ptr<void>(pointer, [object](void*) {
    const RelaxedCaptureMode relaxed_release;
    cudaUserObjectRelease(object, 1);
    DeferredFrees::instance().drain();
  });
}

}  // namespace

std::shared_ptr<void> allocate_cuda_bytes(size_t bytes, int device_index, void* stream_pointer) {
  const DeviceScope scope(device_index);
  DeferredFrees::instance().drain();
  cudaStream_t stream = static_cast<cudaStream_t>(stream_pointer);
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  cudaGraph_t graph = nullptr;
  if (stream) SY_CUDA_CHECK(cudaStreamGetCaptureInfo(stream, &capture, nullptr, &graph));
  // NOTES: zero-byte tensors still get a distinct, valid pointer.
  const size_t size = bytes == 0 ? 256 : bytes;
  if (capture == cudaStreamCaptureStatusActive && graph) return allocate_for_graph(size, device_index, graph);

  void* pointer = nullptr;
  const bool stream_ordered = stream && capture == cudaStreamCaptureStatusNone;
  if (stream_ordered) {
    SY_CUDA_CHECK(cudaMallocAsync(&pointer, size, stream));
    // cudaFree would synchronise the whole device: with ranks as threads spinning on each other,
    // that waits for a peer that waits for us.
    return std::shared_ptr<void>(pointer, [stream](void* p) { cudaFreeAsync(p, stream); });
  }
  {
    const RelaxedCaptureMode relaxed;
    SY_CUDA_CHECK(cudaMalloc(&pointer, size));
  }
  return std::shared_ptr<void>(pointer, [](void* p) {
    const RelaxedCaptureMode relaxed;  // the tensor may die while some stream is being captured
    cudaFree(p);
  });
}

void copy_cuda_rows(void* destination, size_t destination_pitch, const void* source, size_t source_pitch,
                    size_t width, size_t height, int device_index, void* stream) {
  const DeviceScope scope(device_index);
  SY_CUDA_CHECK(cudaMemcpy2DAsync(destination, destination_pitch, source, source_pitch, width, height,
                                  cudaMemcpyDeviceToDevice, static_cast<cudaStream_t>(stream)));
}

bool cuda_backend_available() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return count > 0;
}

}  // namespace switchyard::detail
