#include <map>
#include <mutex>

#include "cuda/backend/kernel_preload.hpp"
#include "cuda/timing/gpu_timer.hpp"
#include "device/cuda_check.hpp"
#include "device/ptx.cuh"

namespace switchyard::cuda {

namespace {

__global__ void read_timer_kernel(uint64_t* now) {
  *now = ptx::globaltimer_ns();
}

__global__ void timer_wait_kernel(uint64_t until_ns, uint64_t limit_ns, uint64_t* marks) {
  const uint64_t begin = ptx::globaltimer_ns();
  uint64_t now = begin;
  while (now < until_ns && now - begin < limit_ns) {
    __nanosleep(200);
    now = ptx::globaltimer_ns();
  }
  if (marks != nullptr) {
    // Volatile: the host polls marks[1] through its mapping while the stream runs.
    reinterpret_cast<volatile uint64_t*>(marks)[0] = begin;
    reinterpret_cast<volatile uint64_t*>(marks)[1] = now;
  }
}

__global__ void timer_mark_kernel(uint64_t* word) {
  // Volatile: the host may poll the word through its mapping.
  *reinterpret_cast<volatile uint64_t*>(word) = ptx::globaltimer_ns();
}

}  // namespace

void preload_gpu_timer_kernels() {
  preload_kernel(read_timer_kernel);
  preload_kernel(timer_wait_kernel);
  preload_kernel(timer_mark_kernel);
}

uint64_t gpu_timer_now_ns() {
  // Once per device and process, kept for the process's life: a stream of its own and a host-mapped word the
  // kernel writes (no allocation per read: cudaFree would wait for the whole device).
  struct Reader {
    cudaStream_t stream = nullptr;
    MappedHostWords<uint64_t> word;
  };
  static std::mutex mutex;
  // Never destroyed: freeing page-locked memory while the process exits races the runtime's own teardown.
  static std::map<int, Reader>& readers = *new std::map<int, Reader>;
  int device = 0;
  SY_CUDA_CHECK(cudaGetDevice(&device));
  const std::lock_guard<std::mutex> lock(mutex);
  Reader& reader = readers[device];
  if (reader.stream == nullptr) {
    preload_gpu_timer_kernels();
    reader.word.allocate(1);
    SY_CUDA_CHECK(cudaStreamCreateWithFlags(&reader.stream, cudaStreamNonBlocking));
  }
  read_timer_kernel<<<1, 1, 0, reader.stream>>>(reader.word.device());
  SY_CUDA_CHECK_LAUNCH();
  SY_CUDA_CHECK(cudaStreamSynchronize(reader.stream));
  return *reinterpret_cast<volatile uint64_t*>(reader.word.host());
}

void enqueue_gpu_timer_wait(cudaStream_t stream, uint64_t until_ns, uint64_t limit_ns, uint64_t* marks) {
  timer_wait_kernel<<<1, 1, 0, stream>>>(until_ns, limit_ns, marks);
  SY_CUDA_CHECK_LAUNCH();
}

void enqueue_gpu_timer_mark(cudaStream_t stream, uint64_t* word) {
  timer_mark_kernel<<<1, 1, 0, stream>>>(word);
  SY_CUDA_CHECK_LAUNCH();
}

HoldMarks::HoldMarks() : marks_(3) {
  preload_gpu_timer_kernels();
}

void HoldMarks::clear() {
  marks_.clear();
}

bool HoldMarks::released() const {
  return reinterpret_cast<const volatile uint64_t*>(marks_.host())[1] != 0;
}

uint64_t HoldMarks::held_ns() const {
  const volatile uint64_t* marks = marks_.host();
  const uint64_t begin = marks[0], end = marks[1];
  return end > begin ? end - begin : 0;
}

uint64_t HoldMarks::since_release_ns() const {
  const volatile uint64_t* marks = marks_.host();
  const uint64_t release = marks[1], end = marks[2];
  return release != 0 && end > release ? end - release : 0;
}

}  // namespace switchyard::cuda
