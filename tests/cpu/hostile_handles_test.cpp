// Handles as a hostile or careless user makes them: stale ones from a destroyed Buffer, heap handles
// whose bytes were edited, swapped between ranks, or pointed at memory that is no switchyard heap.
// Each is refused with an InvalidArgument naming the handle and what differs, before anything is
// mapped or written; nothing crashes.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/handle_format.hpp"
#include "core/heap_identity.hpp"
#include "support/expert_major_cases.hpp"
#include "support/normal_round_trip.hpp"
#include "support/refusal.hpp"
#include "support/test_seed.hpp"
#include "switchyard/buffer.hpp"
#include "switchyard/errors.hpp"
#include "workload/workload.hpp"

namespace switchyard {
namespace {

using testing::contains;
using testing::invalid_argument_message;

namespace em = testing::expert_major;

// ---- stale dispatch handles ---------------------------------------------------------------------

// Destroys `first` and makes a second Buffer the way `make_second` says. The allocator commonly puts
// the second where the first was, which is the case an address check cannot tell apart.
template <typename MakeSecond>
std::unique_ptr<Buffer> replace(std::unique_ptr<Buffer>& first, MakeSecond&& make_second) {
  first.reset();
  return make_second();
}

class StaleExpertMajorHandle : public ::testing::TestWithParam<Engine> {};

TEST_P(StaleExpertMajorHandle, FromADestroyedBufferIsRefusedBySmallerOneInItsPlace) {
  const Engine engine = GetParam();
  const em::Case large = em::make("large", 1, {8}, 8, 2, 8);
  const em::Case small = em::make("small", 1, {2}, 2, 2, 8);
  const em::Regions regions = em::regions_of(engine);
  const em::Expected expected = em::expected_for(
      large, testing::seed_for(::testing::UnitTest::GetInstance()->current_test_info()->name()));

  auto buffer = std::make_unique<Buffer>(em::buffer_options(large, 0, regions));
  buffer->connect({buffer->local_handle()});
  LowLatencyDispatchResult dispatched =
      em::dispatch_with(engine, *buffer, em::dispatch_args(large, expected.data[0]));
  Tensor y = em::expert_outputs(dispatched.recv_x, dispatched.recv_x_scales, 0);

  std::unique_ptr<Buffer> second = replace(buffer, [&] {
    auto made = std::make_unique<Buffer>(em::buffer_options(small, 0, regions));
    made->connect({made->local_handle()});
    return made;
  });
  Tensor out = em::poisoned(DType::bf16, {8, large.hidden});
  LowLatencyCombineArgs args = em::combine_args(expected.data[0], dispatched.handle, y);
  args.out_combined_x = out;
  const std::string message = invalid_argument_message([&] { em::combine_with(engine, *second, args); });
  EXPECT_TRUE(contains(message, "handle: expected a handle made by this Buffer")) << message;
  EXPECT_TRUE(em::all_poison(out)) << "out_combined_x was written";
}

INSTANTIATE_TEST_SUITE_P(Engines, StaleExpertMajorHandle,
                         ::testing::Values(Engine::low_latency, Engine::symmetric),
                         [](const ::testing::TestParamInfo<Engine>& info) {
                           return std::string(engine_name(info.param));
                         });

TEST(StaleNormalHandle, FromADestroyedBufferIsRefusedAsCombineHandleAndAsCachedHandle) {
  workload::Shape shape;
  shape.tokens_per_rank = 16;
  shape.hidden = 256;
  shape.num_experts = 8;
  shape.topk = 2;
  BufferOptions options;
  options.topology = Topology::single_node(1);
  options.backend = Backend::cpu;
  options.sizing = testing::sizing_for(shape);
  const std::vector<workload::RankData> data = workload::generate(
      shape, testing::seed_for(::testing::UnitTest::GetInstance()->current_test_info()->name()));

  auto buffer = std::make_unique<Buffer>(options);
  buffer->connect({buffer->local_handle()});
  DispatchArgs dispatch;
  dispatch.x = data[0].x;
  dispatch.topk_idx = data[0].topk_idx;
  dispatch.topk_weights = data[0].topk_weights;
  dispatch.num_experts = shape.num_experts;
  DispatchResult dispatched = buffer->dispatch(dispatch);

  std::unique_ptr<Buffer> second = replace(buffer, [&] {
    auto made = std::make_unique<Buffer>(options);
    made->connect({made->local_handle()});
    return made;
  });
  CombineArgs combine;
  combine.x = dispatched.recv_x;
  combine.handle = &dispatched.handle;
  EXPECT_TRUE(contains(invalid_argument_message([&] { second->combine(combine); }),
                       "handle: expected a handle made by this Buffer"));
  DispatchArgs cached;
  cached.x = data[0].x;
  cached.cached_handle = &dispatched.handle;
  EXPECT_TRUE(contains(invalid_argument_message([&] { second->dispatch(cached); }),
                       "cached_handle: expected a handle made by this Buffer"));
}

// ---- heap handles ---------------------------------------------------------------------------------

em::Case heap_case(int ranks) {
  return em::make("heap", ranks, std::vector<int64_t>(ranks, 4), 4, 2, 4 * ranks);
}

BufferOptions heap_options(int ranks, int rank, HeapSharing sharing) {
  BufferOptions options = em::buffer_options(heap_case(ranks), rank, em::Regions::symmetric);
  options.sharing = sharing;
  return options;
}

struct Ranks {
  std::vector<std::unique_ptr<Buffer>> buffers;
  std::vector<Bytes> handles;
};

Ranks make_ranks(int ranks, HeapSharing sharing) {
  Ranks made;
  for (int rank = 0; rank < ranks; ++rank) {
    made.buffers.push_back(std::make_unique<Buffer>(heap_options(ranks, rank, sharing)));
    made.handles.push_back(made.buffers.back()->local_handle());
  }
  return made;
}

// Where the shared-memory name sits in a cpu processes handle (its payload is the backend's own).
size_t shm_name_offset(const Bytes& handle) {
  const std::string bytes(handle.begin(), handle.end());
  const size_t at = bytes.find("/switchyard-");
  EXPECT_NE(at, std::string::npos) << "no shared-memory name in the handle";
  return at;
}

void set_shm_name(Bytes& handle, const std::string& name) {
  const size_t at = shm_name_offset(handle);
  ASSERT_LT(name.size(), 64u);
  std::memset(handle.data() + at, 0, 64);
  std::memcpy(handle.data() + at, name.data(), name.size());
}

// A shared-memory segment of `bytes` that is no switchyard heap; unlinked when the test ends.
class ForeignSegment {
 public:
  ForeignSegment(const std::string& name, size_t bytes) : name_(name) {
    int fd = shm_open(name_.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    EXPECT_GE(fd, 0) << "shm_open(" << name_ << ")";
    if (fd >= 0) {
      EXPECT_EQ(ftruncate(fd, static_cast<off_t>(bytes)), 0);
      close(fd);
    }
  }
  ~ForeignSegment() { shm_unlink(name_.c_str()); }
  const std::string& name() const { return name_; }

 private:
  std::string name_;
};

std::string foreign_name(const char* what) {
  return "/switchyard-foreign-" + std::to_string(getpid()) + "-" + what;
}

// The allocation a processes heap of this test's sizing has: the identity page, then the heap.
size_t heap_allocation_bytes() {
  Ranks probe = make_ranks(2, HeapSharing::processes);
  return detail::kHeapIdentityBytes + probe.buffers[0]->heap_bytes();
}

TEST(HeapHandles, AnEmptySegmentIsRefusedBeforeItIsMappedInsteadOfRaisingSigbus) {
  ForeignSegment empty(foreign_name("empty"), 0);
  Ranks ranks = make_ranks(2, HeapSharing::processes);
  set_shm_name(ranks.handles[1], empty.name());
  const std::string message = invalid_argument_message([&] { ranks.buffers[0]->connect(ranks.handles); });
  EXPECT_TRUE(contains(message, "all_handles[1]")) << message;
  EXPECT_TRUE(contains(message, "got 0")) << message;
  EXPECT_FALSE(ranks.buffers[0]->is_connected());
}

TEST(HeapHandles, ASegmentOfOnePageIsRefusedNamingBothSizes) {
  ForeignSegment page(foreign_name("page"), 4096);
  Ranks ranks = make_ranks(2, HeapSharing::processes);
  set_shm_name(ranks.handles[1], page.name());
  const std::string message = invalid_argument_message([&] { ranks.buffers[0]->connect(ranks.handles); });
  EXPECT_TRUE(contains(message, "all_handles[1]")) << message;
  EXPECT_TRUE(contains(message, std::to_string(heap_allocation_bytes()))) << message;
  EXPECT_TRUE(contains(message, "got 4096")) << message;
}

TEST(HeapHandles, AForeignSegmentOfTheRightSizeIsRefusedByItsIdentityPage) {
  ForeignSegment foreign(foreign_name("sized"), heap_allocation_bytes());
  Ranks ranks = make_ranks(2, HeapSharing::processes);
  set_shm_name(ranks.handles[1], foreign.name());
  const std::string message = invalid_argument_message([&] { ranks.buffers[0]->connect(ranks.handles); });
  EXPECT_TRUE(contains(message, "all_handles[1]")) << message;
  EXPECT_TRUE(contains(message, "is not a switchyard heap")) << message;
}

TEST(HeapHandles, ANameOutsideSwitchyardsIsRefusedWithoutOpeningIt) {
  Ranks ranks = make_ranks(2, HeapSharing::processes);
  set_shm_name(ranks.handles[1], "/switchyard-");  // keeps the offset findable, then overwrite it
  const size_t at = shm_name_offset(ranks.handles[1]);
  std::memset(ranks.handles[1].data() + at, 0, 64);
  std::memcpy(ranks.handles[1].data() + at, "/etc-passwd", 11);
  const std::string message = invalid_argument_message([&] { ranks.buffers[0]->connect(ranks.handles); });
  EXPECT_TRUE(contains(message, "all_handles[1]")) << message;
  EXPECT_TRUE(contains(message, "/etc-passwd")) << message;
}

// Rank 2's backend payload behind rank 1's header: the header passes core's checks, the heap does not.
Bytes with_payload_of(const Bytes& header_from, const Bytes& payload_from) {
  Bytes spliced = header_from;
  std::copy(payload_from.begin() + sizeof(detail::HandleHeader), payload_from.end(),
            spliced.begin() + sizeof(detail::HandleHeader));
  return spliced;
}

class SwappedPayload : public ::testing::TestWithParam<HeapSharing> {};

TEST_P(SwappedPayload, RankTwosHeapUnderRankOnesHeaderIsRefusedNamingBothRanks) {
  Ranks ranks = make_ranks(3, GetParam());
  ranks.handles[1] = with_payload_of(ranks.handles[1], ranks.handles[2]);
  const std::string message = invalid_argument_message([&] { ranks.buffers[0]->connect(ranks.handles); });
  EXPECT_TRUE(contains(message, "all_handles[1]")) << message;
  EXPECT_TRUE(contains(message, "belongs to rank 2, expected rank 1")) << message;
}

TEST_P(SwappedPayload, AHandleOfAnEarlierBufferOfTheSameRankIsRefusedAsStale) {
  Bytes stale;
  {
    Ranks earlier = make_ranks(2, GetParam());
    for (auto& buffer : earlier.buffers) buffer->connect(earlier.handles);
    stale = earlier.handles[1];
  }
  Ranks ranks = make_ranks(2, GetParam());
  // The earlier heaps are gone (every peer had connected, so nothing held them): with threads a new
  // heap may sit at the old address, with processes the old segment is unlinked. Either way the
  // handle is refused, never taken for the new heap.
  const std::string message = invalid_argument_message([&] {
    std::vector<Bytes> handles = ranks.handles;
    handles[1] = stale;
    ranks.buffers[0]->connect(handles);
  });
  EXPECT_TRUE(contains(message, "all_handles[1]")) << message;
}

INSTANTIATE_TEST_SUITE_P(Sharing, SwappedPayload,
                         ::testing::Values(HeapSharing::threads, HeapSharing::processes),
                         [](const ::testing::TestParamInfo<HeapSharing>& info) {
                           return std::string(info.param == HeapSharing::threads ? "threads" : "processes");
                         });

TEST(HeapHandles, ABackendValueThatNamesNoBackendIsReportedAsSuch) {
  Ranks ranks = make_ranks(2, HeapSharing::threads);
  detail::HandleHeader header{};
  std::memcpy(&header, ranks.handles[1].data(), sizeof(header));
  header.backend = 0x100;  // truncated to uint8_t this would read as cpu
  std::memcpy(ranks.handles[1].data(), &header, sizeof(header));
  const std::string message = invalid_argument_message([&] { ranks.buffers[0]->connect(ranks.handles); });
  EXPECT_TRUE(contains(message, "all_handles[1]: expected a cpu handle, got backend value 256")) << message;
  EXPECT_FALSE(contains(message, "got a cpu one")) << message;
}

TEST(HeapHandles, ASegmentNameIsUnlinkedOnceEveryPeerHasMappedIt) {
  Ranks ranks = make_ranks(3, HeapSharing::processes);
  std::vector<std::string> paths;
  for (const Bytes& handle : ranks.handles) {
    paths.push_back("/dev/shm" +
                    std::string(reinterpret_cast<const char*>(handle.data() + shm_name_offset(handle))));
  }
  auto linked = [](const std::string& path) { return access(path.c_str(), F_OK) == 0; };
  for (const std::string& path : paths) EXPECT_TRUE(linked(path)) << path;
  ranks.buffers[0]->connect(ranks.handles);
  ranks.buffers[1]->connect(ranks.handles);
  // Rank 2's segment is mapped by both its peers; ranks 0 and 1 still wait for rank 2 to map theirs.
  EXPECT_TRUE(linked(paths[0])) << "rank 2 has not mapped it yet";
  EXPECT_TRUE(linked(paths[1])) << "rank 2 has not mapped it yet";
  EXPECT_FALSE(linked(paths[2])) << "every peer of rank 2 has mapped it";
  ranks.buffers[2]->connect(ranks.handles);
  for (const std::string& path : paths)
    EXPECT_FALSE(linked(path)) << path << " outlives the last peer's connect";
}

class TwoBuffersOfARank : public ::testing::TestWithParam<HeapSharing> {};

TEST_P(TwoBuffersOfARank, TheSecondOnAPeersHeapIsRefusedUntilTheFirstIsGone) {
  const HeapSharing sharing = GetParam();
  auto first = std::make_unique<Buffer>(heap_options(2, 0, sharing));
  auto second = std::make_unique<Buffer>(heap_options(2, 0, sharing));
  Buffer peer(heap_options(2, 1, sharing));
  const Bytes peer_handle = peer.local_handle();
  first->connect({first->local_handle(), peer_handle});
  const std::string message = invalid_argument_message([&] {
    second->connect({second->local_handle(), peer_handle});
  });
  EXPECT_TRUE(contains(message, "all_handles[1]")) << message;
  EXPECT_FALSE(second->is_connected());
  if (sharing == HeapSharing::processes) {
    // The first Buffer was the peer's last mapper: the segment's name is gone, so the second cannot
    // even open it.
    EXPECT_TRUE(contains(message, "expected a live shared-memory heap")) << message;
    return;
  }
  EXPECT_TRUE(contains(message, "another live Buffer of rank 0")) << message;
  first.reset();  // gives its slot in the peer's heap back
  auto third = std::make_unique<Buffer>(heap_options(2, 0, sharing));
  EXPECT_NO_THROW(third->connect({third->local_handle(), peer_handle}));
}

TEST(TwoBuffersOfARankAcrossProcesses, TheSecondIsRefusedByTheClaimWhileThePeersNameIsStillNeeded) {
  // Three ranks: rank 2 has not mapped rank 1's segment yet, so its name is still there.
  auto first = std::make_unique<Buffer>(heap_options(3, 0, HeapSharing::processes));
  auto second = std::make_unique<Buffer>(heap_options(3, 0, HeapSharing::processes));
  Buffer rank1(heap_options(3, 1, HeapSharing::processes));
  Buffer rank2(heap_options(3, 2, HeapSharing::processes));
  first->connect({first->local_handle(), rank1.local_handle(), rank2.local_handle()});
  const std::string message = invalid_argument_message([&] {
    second->connect({second->local_handle(), rank1.local_handle(), rank2.local_handle()});
  });
  EXPECT_TRUE(contains(message, "all_handles[1]")) << message;
  EXPECT_TRUE(contains(message, "another live Buffer of rank 0")) << message;
}

INSTANTIATE_TEST_SUITE_P(Sharing, TwoBuffersOfARank,
                         ::testing::Values(HeapSharing::threads, HeapSharing::processes),
                         [](const ::testing::TestParamInfo<HeapSharing>& info) {
                           return std::string(info.param == HeapSharing::threads ? "threads" : "processes");
                         });

TEST(Hooks, AHookCalledAfterItsBufferWasDestroyedIsRefused) {
  const em::Case c = em::make("hook", 1, {4}, 4, 2, 4);
  const em::Expected expected = em::expected_for(c, 1);
  auto buffer = std::make_unique<Buffer>(em::buffer_options(c, 0, em::Regions::low_latency));
  buffer->connect({buffer->local_handle()});
  LowLatencyDispatchArgs args = em::dispatch_args(c, expected.data[0]);
  args.return_recv_hook = true;
  LowLatencyDispatchResult dispatched = buffer->low_latency_dispatch(args);
  ASSERT_TRUE(static_cast<bool>(dispatched.hook));
  buffer.reset();
  const std::string message = invalid_argument_message([&] { dispatched.hook(); });
  EXPECT_TRUE(contains(message, "hook: expected the Buffer")) << message;
}

}  // namespace
}  // namespace switchyard
