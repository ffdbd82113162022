// A rank process killed with SIGKILL in the middle of a call, on the CPU backend with one process per
// rank (HeapSharing::processes): the survivor's call ends within its timeout with a TimeoutError
// naming the missing rank, no shared-memory segment of either rank is left in /dev/shm, and a new
// Buffer over the survivor works. Rank 1 is a forked child; the handles cross pipes.
#include <dirent.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "support/expert_major_cases.hpp"
#include "support/normal_round_trip.hpp"
#include "support/pipe_bytes.hpp"
#include "support/rank_names.hpp"
#include "support/test_seed.hpp"
#include "switchyard/buffer.hpp"
#include "switchyard/errors.hpp"
#include "workload/workload.hpp"

namespace switchyard {
namespace {

namespace em = testing::expert_major;
using testing::read_all;
using testing::receive_bytes;
using testing::send_bytes;
using testing::write_all;

// NOTES: far above a handle (a few hundred bytes); a longer length means the pipe carries garbage.
constexpr uint64_t kMaxHandleBytes = 1u << 20;

// NOTES: the survivor's timeout; short, so the test is quick, and far below the child's, so the
// child is still waiting inside its call when it is killed.
constexpr double kSurvivorTimeoutSeconds = 1.0;
constexpr double kChildTimeoutSeconds = 60.0;
// A 1 s timeout must surface well within this, even on a loaded 2-core CI machine.
constexpr double kDeadlineSeconds = 20.0;

// The /dev/shm entries this library made for process `pid`.
std::vector<std::string> segments_of(pid_t pid) {
  const std::string prefix = "switchyard-" + std::to_string(pid) + "-";
  std::vector<std::string> found;
  if (DIR* dir = opendir("/dev/shm")) {
    while (dirent* entry = readdir(dir)) {
      if (std::strncmp(entry->d_name, prefix.c_str(), prefix.size()) == 0) found.push_back(entry->d_name);
    }
    closedir(dir);
  }
  return found;
}

// The normal engine's region is sized by sizing.max_tokens_per_rank; it needs no expert-major region.
em::Regions regions_for(Engine engine) {
  return engine == Engine::normal ? em::Regions::low_latency : em::regions_of(engine);
}

em::Case two_rank_case() {
  return em::make("killed", 2, {6, 6}, 6, 2, 8);
}

// The engines under test: the three, and normal across two nodes of one rank each (the hierarchical
// engine over the loopback transport).
struct Variant {
  Engine engine;
  bool across_nodes;
};

BufferOptions rank_options(Engine engine, int rank, double timeout_seconds, bool across_nodes = false) {
  BufferOptions options = em::buffer_options(two_rank_case(), rank, regions_for(engine), timeout_seconds);
  options.sharing = HeapSharing::processes;
  if (engine == Engine::normal) {
    workload::Shape shape = em::shape_of(two_rank_case());
    options.sizing.max_tokens_per_rank = shape.tokens_of(0);
  }
  if (across_nodes) options.topology = Topology{2, 1};
  return options;
}

// One call of `engine` on `rank`'s share of the case's inputs.
void call(Engine engine, Buffer& buffer, const em::Expected& expected, int rank) {
  const workload::RankData& data = expected.data[rank];
  if (engine == Engine::normal) {
    DispatchArgs args;
    args.x = data.x;
    args.topk_idx = data.topk_idx;
    args.topk_weights = data.topk_weights;
    args.num_experts = two_rank_case().num_experts;
    buffer.dispatch(args);
  } else {
    em::dispatch_with(engine, buffer, em::dispatch_args(two_rank_case(), data));
  }
}

// Rank 1: connects, says so, then waits inside a call for rank 0, which never comes. Never returns.
[[noreturn]] void run_child(Variant variant, const em::Expected& expected, int to_parent, int from_parent) {
  const Engine engine = variant.engine;
  int status = 1;
  try {
    Buffer buffer(rank_options(engine, 1, kChildTimeoutSeconds, variant.across_nodes));
    Bytes parent_handle;
    if (send_bytes(to_parent, buffer.local_handle()) &&
        receive_bytes(from_parent, &parent_handle, kMaxHandleBytes)) {
      Bytes child_handle = buffer.local_handle();
      buffer.connect({parent_handle, child_handle});
      const char connected = 'c';
      if (write_all(to_parent, &connected, 1)) call(engine, buffer, expected, 1);
    }
  } catch (...) {
    status = 2;
  }
  _exit(status);
}

class KilledRank : public ::testing::TestWithParam<Variant> {};

TEST_P(KilledRank, SurvivorTimesOutNamingItAndNoSegmentIsLeftBehind) {
  const Variant variant = GetParam();
  const Engine engine = variant.engine;
  const uint64_t seed = testing::seed_for(::testing::UnitTest::GetInstance()->current_test_info()->name());
  SCOPED_TRACE("seed " + std::to_string(seed));
  const em::Expected expected = em::expected_for(two_rank_case(), seed);

  int to_parent[2], to_child[2];
  ASSERT_EQ(pipe(to_parent), 0);
  ASSERT_EQ(pipe(to_child), 0);
  // Fork before this process makes any Buffer: the child starts from a clean library state.
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(to_parent[0]);
    close(to_child[1]);
    run_child(variant, expected, to_parent[1], to_child[0]);
  }
  close(to_parent[1]);
  close(to_child[0]);
  struct Reaper {
    pid_t pid;
    ~Reaper() {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
  } reaper{child};

  auto buffer =
      std::make_unique<Buffer>(rank_options(engine, 0, kSurvivorTimeoutSeconds, variant.across_nodes));
  Bytes child_handle;
  ASSERT_TRUE(receive_bytes(to_parent[0], &child_handle, kMaxHandleBytes)) << "the child sent no handle";
  ASSERT_TRUE(send_bytes(to_child[1], buffer->local_handle()));
  buffer->connect({buffer->local_handle(), child_handle});
  char connected = 0;
  ASSERT_TRUE(read_all(to_parent[0], &connected, 1)) << "the child did not connect";
  // Let the child get into its call, then kill it there.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  ASSERT_EQ(kill(child, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "the child ended before it was killed";
  close(to_parent[0]);
  close(to_child[1]);

  EXPECT_TRUE(segments_of(child).empty()) << "the killed rank left " << segments_of(child).front();
  EXPECT_TRUE(segments_of(getpid()).empty())
      << "the survivor's segment is still named: " << segments_of(getpid()).front();

  // The dead rank's part of the call it was in may have arrived before it died; then the survivor's
  // first call completes (correctly) and the next one waits for the rank in vain.
  std::string message;
  const auto start = std::chrono::steady_clock::now();
  for (int attempt = 0; attempt < 2 && message.empty(); ++attempt) {
    try {
      call(engine, *buffer, expected, 0);
    } catch (const TimeoutError& error) {
      message = error.what();
    }
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_FALSE(message.empty()) << "the survivor's call did not time out";
  EXPECT_TRUE(testing::message_names_rank(message, 1))
      << "the message does not name the dead rank: " << message;
  EXPECT_LT(seconds, kDeadlineSeconds);

  // The survivor destroys its Buffer and goes on alone.
  buffer.reset();
  em::Case alone = em::make("alone", 1, {6}, 6, 2, 8);
  BufferOptions options = em::buffer_options(alone, 0, regions_for(engine));
  options.sharing = HeapSharing::processes;
  if (engine == Engine::normal) options.sizing.max_tokens_per_rank = 6;
  Buffer survivor(options);
  survivor.connect({survivor.local_handle()});
  const em::Expected expected_alone = em::expected_for(alone, seed);
  if (engine == Engine::normal) {
    DispatchArgs args;
    args.x = expected_alone.data[0].x;
    args.topk_idx = expected_alone.data[0].topk_idx;
    args.topk_weights = expected_alone.data[0].topk_weights;
    args.num_experts = alone.num_experts;
    EXPECT_NO_THROW(survivor.dispatch(args));
  } else {
    LowLatencyDispatchResult result;
    EXPECT_NO_THROW(
        result = em::dispatch_with(engine, survivor, em::dispatch_args(alone, expected_alone.data[0])));
    std::string why;
    EXPECT_TRUE(workload::bitwise_equal(result.recv_count, expected_alone.dispatched[0].recv_count, &why))
        << why;
  }
  EXPECT_TRUE(segments_of(getpid()).empty()) << "a one-rank heap keeps no name";
}

INSTANTIATE_TEST_SUITE_P(Engines, KilledRank,
                         ::testing::Values(Variant{Engine::normal, false}, Variant{Engine::normal, true},
                                           Variant{Engine::low_latency, false},
                                           Variant{Engine::symmetric, false}),
                         [](const ::testing::TestParamInfo<Variant>& info) {
                           return info.param.across_nodes ? std::string("internode")
                                                          : std::string(engine_name(info.param.engine));
                         });

}  // namespace
}  // namespace switchyard
