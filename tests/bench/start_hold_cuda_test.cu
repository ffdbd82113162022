// The bench's timer start on one GPU (tools/bench/start_hold.*, phase_clock.hpp): a phase is timed on the
// GPU's clock from the hold's release to a mark after the work, so that a phase of a spin kernel times the
// spin, not the lead the hold waited through nor the hold's launch. Two ranks (threads) on one stream each,
// as the bench's ranks on one GPU. Skipped (reported as skipped) where no GPU is present.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "phase_clock.hpp"
#include "start_hold.hpp"
#include "switchyard/group.hpp"
#include "timer.hpp"

namespace switchyard::bench {
namespace {

// A kernel that spins for `ns` on the GPU's clock: work of a known length.
__global__ void spin_kernel(uint64_t ns) {
  uint64_t begin = 0, now = 0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(begin));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - begin < ns);
}

bool has_gpu() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

TEST(BenchStartHold, ThePhaseRunsFromTheHoldsReleaseToTheEndMarkAndTheWorkStaysIn) {
  if (!has_gpu()) GTEST_SKIP() << "no CUDA device: GPU tests are skipped, not passed";
  constexpr double kAheadUs = 20'000;      // the hold: 20 ms of lead, far above any launch gap
  constexpr uint64_t kWorkNs = 2'000'000;  // the work: 2 ms
  std::vector<double> seconds(2), held(2);
  std::vector<int64_t> missed(2);
  run_ranks(2, [&](Group& group) {
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
    cudaStream_t stream = nullptr;
    ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
    // Loaded before the timing: a kernel's first launch loads its module (lazily, by default), and that was
    // seen to wait 20 ms for the other rank's running hold (session 38), which then let its own moment pass.
    spin_kernel<<<1, 1, 0, stream>>>(0);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    group.barrier();
    {
      std::unique_ptr<PhaseTimer> timer = make_phase_timer(Backend::cuda, stream);
      StartHold start_hold(group, stream, StartMode::timer, kAheadUs);
      PhaseClock clock(
          group, *timer, [&] { ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess); }, {}, &start_hold);
      const int rank = group.rank();
      seconds[rank] = clock.time([&] { spin_kernel<<<1, 1, 0, stream>>>(kWorkNs); });
      held[rank] = start_hold.held_seconds();
      missed[rank] = clock.start_holds_missed();
      EXPECT_EQ(clock.start_holds(), 1);
      EXPECT_EQ(start_hold.timing(), StartTiming::release_mark);
      EXPECT_TRUE(start_hold.released());
    }
    cudaStreamDestroy(stream);
  });
  for (int rank = 0; rank < 2; ++rank) {
    SCOPED_TRACE(rank);
    // The hold ran most of its lead (the moment was picked before the allgather and the enqueue).
    EXPECT_GT(held[rank], 0.5 * kAheadUs * 1e-6);
    EXPECT_LT(held[rank], 2.0 * kAheadUs * 1e-6);
    // The work is in the time, the hold is not (a few hundred us of slack for a busy host).
    EXPECT_GE(seconds[rank], kWorkNs * 1e-9);
    EXPECT_LT(seconds[rank], kWorkNs * 1e-9 + 500e-6);
    EXPECT_EQ(missed[rank], 0);
  }
}

}  // namespace
}  // namespace switchyard::bench
