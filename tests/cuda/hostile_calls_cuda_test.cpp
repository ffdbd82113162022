// The CUDA backend against careless or hostile callers: heap handles swapped between ranks or edited
// are refused before anything is mapped (the identity page, core/heap_identity.hpp), and ranks that
// make the same expert-major call with different shapes are refused on every rank with an
// InvalidArgument (the call digest, core/call_signature.hpp), well before the timeout, with no
// output written. Skipped (reported as skipped) without a GPU.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "core/handle_format.hpp"
#include "cuda/expert_major_round_trip.hpp"
#include "cuda/rank_device.hpp"
#include "support/expert_major_cases.hpp"
#include "support/test_seed.hpp"
#include "switchyard/buffer.hpp"
#include "switchyard/errors.hpp"

namespace switchyard {
namespace {

using namespace testing::expert_major;

#define SWITCHYARD_REQUIRE_GPU() \
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device: GPU tests are skipped, not passed"

// NOTES: long, so that a refusal that only came by timing out shows as a failure of the deadline.
constexpr double kTimeoutSeconds = 60.0;
constexpr double kDeadlineSeconds = 20.0;

std::string refusal(const std::function<void()>& call) {
  try {
    call();
  } catch (const InvalidArgument& error) {
    return error.what();
  } catch (const std::exception& error) {
    return std::string("not an InvalidArgument: ") + error.what();
  }
  return "no exception";
}

TEST(CudaHeapHandles, RankTwosHeapUnderRankOnesHeaderIsRefusedNamingBothRanks) {
  SWITCHYARD_REQUIRE_GPU();
  const Case c = make("heap", 3, {4, 4, 4}, 4, 2, 12);
  std::vector<std::unique_ptr<Buffer>> buffers;
  std::vector<Bytes> handles;
  for (int rank = 0; rank < 3; ++rank) {
    buffers.push_back(
        std::make_unique<Buffer>(cuda_buffer_options(c, rank, Regions::symmetric, kTimeoutSeconds)));
    handles.push_back(buffers.back()->local_handle());
  }
  Bytes spliced = handles[1];
  std::copy(handles[2].begin() + sizeof(detail::HandleHeader), handles[2].end(),
            spliced.begin() + sizeof(detail::HandleHeader));
  handles[1] = spliced;
  const std::string message = refusal([&] { buffers[0]->connect(handles); });
  EXPECT_NE(message.find("all_handles[1]"), std::string::npos) << message;
  EXPECT_NE(message.find("belongs to rank 2, expected rank 1"), std::string::npos) << message;
  EXPECT_FALSE(buffers[0]->is_connected());
}

class CudaMismatchedCalls : public ::testing::TestWithParam<Engine> {};

TEST_P(CudaMismatchedCalls, RankZeroWithHalfTheExpertsIsRefusedOnEveryRank) {
  SWITCHYARD_REQUIRE_GPU();
  const Engine engine = GetParam();
  const int ranks = 4;
  const Case full = make("full", ranks, {6, 6, 6, 6}, 6, 2, 48);
  const Case half = make("half", ranks, {6, 6, 6, 6}, 6, 2, 24);
  const uint64_t seed = testing::seed_for(::testing::UnitTest::GetInstance()->current_test_info()->name());
  SCOPED_TRACE("seed " + std::to_string(seed));
  const Expected expected_full = expected_for(full, seed);
  const Expected expected_half = expected_for(half, seed);

  std::mutex mutex;
  std::vector<std::string> messages(ranks);
  std::vector<bool> untouched(ranks, false);
  const auto start = std::chrono::steady_clock::now();
  with_gpu_ranks(
      full, regions_of(engine),
      [&](Group& group, Buffer& buffer, cudaStream_t stream) {
        const int rank = group.rank();
        const Case& mine = rank == 0 ? half : full;
        const Expected& expected = rank == 0 ? expected_half : expected_full;
        const int device = testing::device_for_rank(rank, ranks);
        const DeviceInputs in = upload_inputs(expected.data[rank], device, stream);
        LowLatencyDispatchArgs args = dispatch_args(mine, in.x, in.topk_idx, stream);
        const PoisonedOutputs out = poisoned_device_outputs(mine, 6, device, stream);
        out.attach(args);
        // The device finds the mismatch; it is raised where device errors are: here, at synchronize.
        const std::string message = refusal([&] {
          dispatch_with(engine, buffer, args);
          buffer.synchronize(stream);
        });
        const bool clean =
            all_poison_on_device(out.recv_x, stream) && all_poison_on_device(out.recv_count, stream);
        std::lock_guard<std::mutex> lock(mutex);
        messages[rank] = message;
        untouched[rank] = clean;
      },
      kTimeoutSeconds);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, kDeadlineSeconds) << "the refusal waited for a timeout";
  for (int rank = 0; rank < ranks; ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank) + ": " + messages[rank]);
    EXPECT_NE(messages[rank].find("expected every rank to call with the same shape"), std::string::npos);
    EXPECT_TRUE(untouched[rank]) << "recv_x or recv_count was written";
  }
}

INSTANTIATE_TEST_SUITE_P(Engines, CudaMismatchedCalls,
                         ::testing::Values(Engine::low_latency, Engine::symmetric),
                         [](const ::testing::TestParamInfo<Engine>& info) {
                           return std::string(engine_name(info.param));
                         });

}  // namespace
}  // namespace switchyard
