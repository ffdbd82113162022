// cuda::MappedHostWords (device/mapped_host_words.hpp), the one owner of the host-mapped words through which
// a running kernel tells the host something (the timer's marks, the normal dispatch's posted counts, the
// backend's error record): the words start zeroed, the device's writes through device() are what host() reads
// while nothing waits for the kernel's end, allocate() replaces them with fresh zeroed words, a move hands
// them over, and clear() zeroes them. Then the timer's end mark (cuda/timing/gpu_timer.hpp) on those words.
// Skipped (reported as skipped) where no GPU is present.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <thread>
#include <utility>

#include "cuda/timing/gpu_timer.hpp"
#include "device/mapped_host_words.hpp"

namespace switchyard::cuda {
namespace {

bool has_gpu() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

// Writes value + i into words[i], then waits for the host's go (words[count] != 0) and writes the last word:
// the host must see the first writes while this kernel is still running.
__global__ void write_then_wait_kernel(volatile int64_t* words, int count, int64_t value) {
  for (int i = 0; i < count; ++i) words[i] = value + i;
  __threadfence_system();
  const uint64_t limit = 2'000'000'000;  // 2 s: a host that never answers must not hang the test
  uint64_t begin = 0, now = 0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(begin));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (words[count] == 0 && now - begin < limit);
  words[count + 1] = words[count] == 0 ? -1 : value;
}

TEST(MappedHostWords, TheDevicesWritesAreSeenByTheHostWhileTheKernelRuns) {
  if (!has_gpu()) GTEST_SKIP() << "no CUDA device: GPU tests are skipped, not passed";
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  constexpr int kCount = 6;
  MappedHostWords<int64_t> words(kCount + 2);
  ASSERT_EQ(words.size(), static_cast<size_t>(kCount + 2));
  ASSERT_NE(words.host(), nullptr);
  ASSERT_NE(words.device(), nullptr);
  for (int i = 0; i < kCount + 2; ++i) EXPECT_EQ(words.host()[i], 0) << i;

  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  write_then_wait_kernel<<<1, 1, 0, stream>>>(words.device(), kCount, 100);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  volatile int64_t* host = words.host();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (host[kCount - 1] != 100 + kCount - 1 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::yield();
  }
  EXPECT_EQ(cudaStreamQuery(stream), cudaErrorNotReady) << "the kernel ended before the host answered";
  for (int i = 0; i < kCount; ++i) EXPECT_EQ(host[i], 100 + i) << i;
  host[kCount] = 1;  // the go
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  EXPECT_EQ(host[kCount + 1], 100) << "the kernel did not see the host's write through the mapping";

  // A move hands the words over; the moved-from owner has none and frees nothing.
  int64_t* const host_before = words.host();
  MappedHostWords<int64_t> moved = std::move(words);
  EXPECT_EQ(moved.host(), host_before);
  EXPECT_EQ(words.host(), nullptr);
  EXPECT_EQ(words.device(), nullptr);
  EXPECT_EQ(words.size(), 0u);
  EXPECT_EQ(moved.host()[0], 100);

  // clear() zeroes them; allocate() replaces them with fresh zeroed words of the new count.
  moved.clear();
  for (int i = 0; i < kCount + 2; ++i) EXPECT_EQ(moved.host()[i], 0) << i;
  moved.host()[0] = 7;
  moved.allocate(3);
  EXPECT_EQ(moved.size(), 3u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(moved.host()[i], 0) << i;
  cudaStreamDestroy(stream);
}

// The timer's end mark, the bench's end of a phase timed from a hold's release (tools/bench/start_hold.*): a
// mark queued behind a wait for a moment ~5 ms ahead comes after the moment, and HoldMarks says how long
// after the release it came.
TEST(MappedHostWords, TheTimersEndMarkFollowsTheHoldsRelease) {
  if (!has_gpu()) GTEST_SKIP() << "no CUDA device: GPU tests are skipped, not passed";
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  HoldMarks marks;
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  marks.clear();
  EXPECT_EQ(marks.since_release_ns(), 0u);
  const uint64_t moment = gpu_timer_now_ns() + 5'000'000;
  enqueue_gpu_timer_wait(stream, moment, 1'000'000'000, marks.device_marks());
  enqueue_gpu_timer_mark(stream, marks.device_end_mark());
  EXPECT_FALSE(marks.released()) << "the hold let its stream go ~5 ms early";
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  EXPECT_TRUE(marks.released());
  EXPECT_GE(marks.held_ns(), 1'000'000u);  // most of the 5 ms lead
  // The mark ran right behind the release: nothing else was queued.
  EXPECT_GT(marks.since_release_ns(), 0u);
  EXPECT_LT(marks.since_release_ns(), 1'000'000u);
  cudaStreamDestroy(stream);
}

}  // namespace
}  // namespace switchyard::cuda
