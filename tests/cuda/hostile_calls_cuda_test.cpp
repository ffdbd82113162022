// The CUDA backend against careless or hostile callers: heap handles swapped between ranks or edited
// are refused before anything is mapped (the identity page, core/heap_identity.hpp), and ranks that
// make the same expert-major call with different shapes are refused on every rank with an
// InvalidArgument (the call digest, core/call_signature.hpp), well before the timeout, with no
// output written, and the Buffer goes on (the next call, made alike, goes through); a caller's stream of
// another GPU is refused, being captured or not. Skipped (reported as skipped) without a GPU.
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
#include "support/expert_major_gtest.hpp"
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

TEST(CudaMisuse, ASecondBufferOfARankOnAPeersHeapIsRefusedUntilTheFirstIsGone) {
  SWITCHYARD_REQUIRE_GPU();
  const Case c = make("two", 2, {4, 4}, 4, 2, 8);
  auto first = std::make_unique<Buffer>(cuda_buffer_options(c, 0, Regions::symmetric, kTimeoutSeconds));
  auto second = std::make_unique<Buffer>(cuda_buffer_options(c, 0, Regions::symmetric, kTimeoutSeconds));
  Buffer peer(cuda_buffer_options(c, 1, Regions::symmetric, kTimeoutSeconds));
  const Bytes peer_handle = peer.local_handle();
  first->connect({first->local_handle(), peer_handle});
  const std::string message = refusal([&] { second->connect({second->local_handle(), peer_handle}); });
  EXPECT_NE(message.find("another live Buffer of rank 0"), std::string::npos) << message;
  first.reset();
  auto third = std::make_unique<Buffer>(cuda_buffer_options(c, 0, Regions::symmetric, kTimeoutSeconds));
  EXPECT_NO_THROW(third->connect({third->local_handle(), peer_handle}));
}

TEST(CudaMisuse, ABufferDestroyedWithItsCallInFlightLeavesTheContextUsable) {
  SWITCHYARD_REQUIRE_GPU();
  const Case c = make("in_flight", 1, {6}, 6, 2, 8);
  const Expected expected = expected_for(c, 7);
  for (Engine engine : {Engine::low_latency, Engine::symmetric}) {
    SCOPED_TRACE(engine_name(engine));
    GpuRank gpu(cuda_buffer_options(c, 0, regions_of(engine), kTimeoutSeconds));
    const DeviceInputs in = upload_inputs(expected.data[0], gpu.device, gpu.stream);
    LowLatencyDispatchResult dispatched =
        dispatch_with(engine, *gpu.buffer, dispatch_args(c, in.x, in.topk_idx, gpu.stream));
    gpu.buffer.reset();  // no synchronize: the kernels may still run
    EXPECT_EQ(cudaStreamSynchronize(gpu.stream), cudaSuccess);
    EXPECT_EQ(cudaGetLastError(), cudaSuccess);
    // A new Buffer on the same GPU still round-trips.
    GpuRank again(cuda_buffer_options(c, 0, regions_of(engine), kTimeoutSeconds));
    const DeviceInputs in_again = upload_inputs(expected.data[0], again.device, again.stream);
    LowLatencyDispatchResult redone =
        dispatch_with(engine, *again.buffer, dispatch_args(c, in_again.x, in_again.topk_idx, again.stream));
    EXPECT_NO_THROW(again.buffer->synchronize(again.stream));
    const Outputs got = download(redone, again.stream);
    std::string why;
    EXPECT_TRUE(workload::bitwise_equal(got.recv_count, expected.dispatched[0].recv_count, &why)) << why;
  }
}

TEST(CudaMisuse, AHookCalledAfterItsBufferWasDestroyedIsRefused) {
  SWITCHYARD_REQUIRE_GPU();
  const Case c = make("hook", 1, {4}, 4, 2, 4);
  const Expected expected = expected_for(c, 3);
  GpuRank gpu(cuda_buffer_options(c, 0, Regions::low_latency, kTimeoutSeconds));
  const DeviceInputs in = upload_inputs(expected.data[0], gpu.device, gpu.stream);
  LowLatencyDispatchArgs args = dispatch_args(c, in.x, in.topk_idx, gpu.stream);
  args.return_recv_hook = true;
  LowLatencyDispatchResult dispatched = gpu.buffer->low_latency_dispatch(args);
  gpu.buffer.reset();
  const std::string message = refusal([&] { dispatched.hook(); });
  EXPECT_NE(message.find("hook: expected the Buffer"), std::string::npos) << message;
}

// One rank's low_latency buffer on GPU 0 with its inputs on the device: the stream checks' calls.
struct OneRankOnGpuZero {
  Case c;
  Expected expected;
  GpuRank gpu;
  DeviceInputs in;

  explicit OneRankOnGpuZero(uint64_t seed)
      : c(make("stream", 1, {4}, 4, 2, 4)),
        expected(expected_for(c, seed)),
        gpu(options_on_gpu_zero(c)),
        in(upload_inputs(expected.data[0], gpu.device, gpu.stream)) {}
  LowLatencyDispatchArgs args(cudaStream_t stream) const {
    return dispatch_args(c, in.x, in.topk_idx, stream);
  }

 private:
  static BufferOptions options_on_gpu_zero(const Case& c) {
    BufferOptions options = cuda_buffer_options(c, 0, Regions::low_latency, kTimeoutSeconds);
    options.device = 0;
    return options;
  }
};

constexpr const char* kGpuOneRefused = "stream: expected a stream of this buffer's GPU 0, got one of GPU 1";

bool two_gpus() {
  int devices = 0;
  return cudaGetDeviceCount(&devices) == cudaSuccess && devices >= 2;
}

// The buffer remembers the last stream that passed its device check, so the other GPU's stream comes after a
// checked stream of this GPU was destroyed: its handle can come back as the new stream, which must be checked
// again, not taken for the old one.
TEST(CudaMisuse, AStreamOfAnotherGpuIsRefusedNamingBothEvenWithACheckedStreamsHandle) {
  SWITCHYARD_REQUIRE_GPU();
  if (!two_gpus()) GTEST_SKIP() << "needs two GPUs";
  OneRankOnGpuZero rank(5);
  cudaStream_t checked = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&checked, cudaStreamNonBlocking), cudaSuccess);
  LowLatencyDispatchResult accepted = rank.gpu.buffer->low_latency_dispatch(rank.args(checked));
  ASSERT_NO_THROW(rank.gpu.buffer->synchronize(checked));
  const cudaStream_t old_handle = checked;
  ASSERT_EQ(cudaStreamDestroy(checked), cudaSuccess);
  // GPU 1's streams until one reuses the old handle (the driver may or may not); the last is refused.
  ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
  std::vector<cudaStream_t> others;
  for (int tries = 0; tries < 16 && (others.empty() || others.back() != old_handle); ++tries) {
    cudaStream_t other = nullptr;
    ASSERT_EQ(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking), cudaSuccess);
    others.push_back(other);
  }
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  const std::string message =
      refusal([&] { rank.gpu.buffer->low_latency_dispatch(rank.args(others.back())); });
  EXPECT_NE(message.find(kGpuOneRefused), std::string::npos)
      << message << (others.back() == old_handle ? " (the old handle reused)" : " (a new handle)");
  for (cudaStream_t other : others) cudaStreamDestroy(other);
}

// The capture path's device check (the stream's context, asked through the driver) must leave a capture of
// this GPU's stream valid in CUDA's global mode, torch's default, which refuses the unsafe calls.
TEST(CudaMisuse, AStreamOfThisGpuBeingCapturedGloballyIsAcceptedAndItsCaptureStaysValid) {
  SWITCHYARD_REQUIRE_GPU();
  OneRankOnGpuZero rank(7);
  GpuRank& gpu = rank.gpu;
  // Outputs given by the caller: the captured call then allocates nothing stream-ordered.
  const PoisonedOutputs out =
      poisoned_device_outputs(rank.c, rank.expected.data[0].x.size(0), gpu.device, gpu.stream);
  ASSERT_EQ(cudaStreamSynchronize(gpu.stream), cudaSuccess);
  LowLatencyDispatchArgs args = rank.args(gpu.stream);
  out.attach(args);
  ASSERT_EQ(cudaStreamBeginCapture(gpu.stream, cudaStreamCaptureModeGlobal), cudaSuccess);
  std::string refused;
  LowLatencyDispatchResult captured;
  try {
    captured = gpu.buffer->low_latency_dispatch(args);
  } catch (const std::exception& error) {
    refused = error.what();
  }
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  EXPECT_EQ(cudaStreamIsCapturing(gpu.stream, &status), cudaSuccess);
  EXPECT_EQ(status, cudaStreamCaptureStatusActive) << "the call invalidated the capture";
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamEndCapture(gpu.stream, &graph), cudaSuccess);
  EXPECT_EQ(refused, "") << "a call on this GPU's capturing stream was refused";
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  EXPECT_EQ(cudaGraphLaunch(exec, gpu.stream), cudaSuccess);
  EXPECT_NO_THROW(gpu.buffer->synchronize(gpu.stream));
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}

// A capturing stream cannot be asked its device or id through the runtime (the refusal would invalidate the
// capture), so its GPU is read from its context: another GPU's capturing stream is refused with the same
// named error, and the caller's capture stays valid (nothing was captured, nothing was invalidated).
TEST(CudaMisuse, AStreamOfAnotherGpuIsRefusedNamingBothWhileItIsBeingCaptured) {
  SWITCHYARD_REQUIRE_GPU();
  if (!two_gpus()) GTEST_SKIP() << "needs two GPUs";
  OneRankOnGpuZero rank(6);
  ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
  cudaStream_t other = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaStreamBeginCapture(other, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  const std::string message = refusal([&] { rank.gpu.buffer->low_latency_dispatch(rank.args(other)); });
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  EXPECT_EQ(cudaStreamIsCapturing(other, &status), cudaSuccess);
  EXPECT_EQ(status, cudaStreamCaptureStatusActive) << "the refused call invalidated the caller's capture";
  cudaGraph_t graph = nullptr;
  EXPECT_EQ(cudaStreamEndCapture(other, &graph), cudaSuccess);
  if (graph) cudaGraphDestroy(graph);
  EXPECT_NE(message.find(kGpuOneRefused), std::string::npos) << message;
  cudaStreamDestroy(other);
}

class CudaMismatchedCalls : public ::testing::TestWithParam<Engine> {};

TEST_P(CudaMismatchedCalls, RankZeroWithHalfTheExpertsIsRefusedOnEveryRankAndTheNextCallGoesThrough) {
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
  std::vector<char> untouched(ranks, 0);    // not vector<bool>: its bits share words across rank threads
  std::vector<std::string> retried(ranks);  // what the call made alike after the refusal threw, if anything
  Failures after;                           // the next call's outputs against the reference's
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
        // The refusal left the protocol whole (symmetric: its kernels pass their barriers and release their
        // done words; low_latency: the call's waits stopped for that call alone, low_latency::ShapeRefusal),
        // so the Buffer goes on: the same call made alike on every rank then goes through, bit for bit the
        // reference's, as on the CPU backend.
        std::string retry_error;
        try {
          const DeviceInputs in_full = upload_inputs(expected_full.data[rank], device, stream);
          const LowLatencyDispatchResult redone =
              dispatch_with(engine, buffer, dispatch_args(full, in_full.x, in_full.topk_idx, stream));
          buffer.synchronize(stream);
          check_dispatch(download(redone, stream), reference_outputs(expected_full, rank), "reference", rank,
                         after);
        } catch (const std::exception& error) {
          retry_error = error.what();
        }
        std::lock_guard<std::mutex> lock(mutex);
        messages[rank] = message;
        untouched[rank] = clean;
        retried[rank] = retry_error;
      },
      kTimeoutSeconds);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, kDeadlineSeconds) << "the refusal waited for a timeout";
  for (int rank = 0; rank < ranks; ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank) + ": " + messages[rank]);
    EXPECT_NE(messages[rank].find("expected every rank to call with the same shape"), std::string::npos);
    EXPECT_TRUE(untouched[rank]) << "recv_x or recv_count was written";
    EXPECT_EQ(retried[rank], "") << "the next call, alike on every rank, was refused";
  }
  expect_none(after, seed);
}

INSTANTIATE_TEST_SUITE_P(Engines, CudaMismatchedCalls,
                         ::testing::Values(Engine::low_latency, Engine::symmetric),
                         [](const ::testing::TestParamInfo<Engine>& info) {
                           return std::string(engine_name(info.param));
                         });

}  // namespace
}  // namespace switchyard
