// What the libFuzzer targets (tests/fuzz) found, one test per finding: each was a crash, a sanitizer
// report or a leak on input that must get an InvalidArgument naming the argument. The crashing inputs
// themselves are in tests/fuzz/corpus/<target>/, which scripts/run-fuzz.sh replays first.
#include <gtest/gtest.h>
#include <unistd.h>

#include <climits>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "core/handle_format.hpp"
#include "support/refusal.hpp"
#include "switchyard/buffer.hpp"
#include "switchyard/errors.hpp"

namespace switchyard {
namespace {

using testing::contains;
using testing::invalid_argument_message;

BufferSizing small_sizing() {
  BufferSizing sizing;
  sizing.max_tokens_per_rank = 8;
  sizing.hidden = 128;
  sizing.topk = 2;
  sizing.num_experts = 4;
  return sizing;
}

std::unique_ptr<Buffer> connected_single_rank() {
  BufferOptions options;
  options.sizing = small_sizing();
  auto buffer = std::make_unique<Buffer>(options);
  buffer->connect({buffer->local_handle()});
  return buffer;
}

// ---- sizes ------------------------------------------------------------------------------------------

TEST(FuzzedSizes, TheNormalHeapOfTwoBillionRanksIsSizedWithoutIntOverflow) {
  // Found by switchyard_fuzz_calls (corpus/calls/crash-9bcfee69...): the barrier area's three words per rank
  // were counted in int, and 3 * 1995896566 ranks overflowed (UBSan: signed integer overflow) while the
  // fuzzer sized a Buffer before making it. Counted in size_t, the size is simply very large.
  const Topology topology = Topology::single_node(1995896566);
  size_t bytes = 0;
  try {
    bytes = normal_heap_bytes(topology, Config{}, small_sizing());
  } catch (const Error&) {
    return;  // refusing such a topology by name is as good
  }
  EXPECT_GT(bytes, size_t{3} * 1995896566 * sizeof(uint64_t));
}

// ---- tensor views -----------------------------------------------------------------------------------

TEST(FuzzedViews, AShapeWhoseByteCountOverflowsInt64IsRefusedNotMultipliedOut) {
  // Found by switchyard_fuzz_calls: a null view of [2^62, 2^20] reached numel(), whose product
  // overflowed (UBSan: signed integer overflow).
  auto buffer = connected_single_rank();
  DispatchArgs args;
  args.x = TensorView(nullptr, DType::bf16, {int64_t{1} << 62, int64_t{1} << 10});
  args.num_experts = 4;
  const std::string message = invalid_argument_message([&] { buffer->dispatch(args); });
  EXPECT_TRUE(contains(message, "x: expected a shape of fewer than 2^63 bytes")) << message;

  const TensorView topk_idx(nullptr, DType::i64, {INT64_MAX / 2, 4});
  EXPECT_TRUE(contains(invalid_argument_message([&] { buffer->get_dispatch_layout(topk_idx, 4); }),
                       "topk_idx: expected a shape of fewer than 2^63 bytes"));
}

TEST(FuzzedViews, AnNdimBeyondTheShapeArrayIsNamedNotIndexed) {
  // Found by switchyard_fuzz_calls: the message for a wrong ndim described the view by reading
  // shape[0..ndim), past the std::array (UBSan: index out of bounds).
  auto buffer = connected_single_rank();
  int64_t ids[4] = {0, 1, 2, 3};
  TensorView topk_idx(ids, DType::i64, {2, 2});
  for (int ndim : {kMaxTensorDims + 1, 1000, -1, INT_MIN}) {
    topk_idx.ndim = ndim;
    const std::string message = invalid_argument_message([&] { buffer->get_dispatch_layout(topk_idx, 4); });
    EXPECT_TRUE(contains(message, "with ndim " + std::to_string(ndim))) << message;
  }
}

TEST(FuzzedViews, AWorstCaseCountWhoseOutputBytesOverflowIsRefusedNotAllocatedWrapped) {
  // Found while triaging the Python harness's out-of-memory: num_worst_tokens has no upper bound, and
  // Tensor::empty multiplied 2^61 rows of 128 bf16 channels into a byte count that wrapped to a few
  // bytes, which the engine would then have filled row by row.
  auto buffer = connected_single_rank();
  uint16_t x[128] = {};
  int64_t ids[2] = {0, 1};
  DispatchArgs args;
  args.x = TensorView(x, DType::bf16, {1, 128});
  args.topk_idx = TensorView(ids, DType::i64, {1, 2});
  args.num_experts = 4;
  args.num_worst_tokens = int64_t{1} << 61;
  const std::string message = invalid_argument_message([&] { buffer->dispatch(args); });
  EXPECT_TRUE(contains(message, "Tensor::empty: expected fewer than 2^64 bytes")) << message;
  EXPECT_TRUE(contains(invalid_argument_message([] {
                         Tensor::empty(DType::i64, {int64_t{1} << 62, 4});
                       }),
                       "Tensor::empty"));
}

TEST(FuzzedViews, APartWhoseBytesWrapToFitItsOwnerIsRefused) {
  // Found while writing the calls target's Tensor::part_of step: 2^62 x 4 bf16 elements are 2^65
  // bytes, which wrapped to 0 and passed the bounds check, giving a view of 2^64 elements over 16 bytes.
  const Tensor owner = Tensor::empty(DType::boolean, {16});
  const std::string message = invalid_argument_message([&] {
    Tensor::part_of(owner, 0, DType::bf16, {int64_t{1} << 62, 4});
  });
  EXPECT_TRUE(contains(message, "Tensor::part_of: dims: expected fewer than 2^64 bytes")) << message;
}

// ---- sizing ---------------------------------------------------------------------------------------------

TEST(FuzzedSizing, AHiddenOutsideWhatCallsTakeIsRefusedByEverySizingFunction) {
  // Found by switchyard_fuzz_calls: normal_heap_bytes multiplied an unchecked sizing.hidden of
  // INT_MIN by 2 (UBSan: signed integer overflow).
  const Topology topology = Topology::single_node(1);
  for (int hidden : {INT_MIN, -1, 0, (1 << 20) + 1, INT_MAX}) {
    BufferSizing sizing = small_sizing();
    sizing.hidden = hidden;
    sizing.low_latency_max_tokens_per_rank = 4;
    sizing.symmetric_max_tokens_per_rank = 4;
    for (const std::string& message :
         {invalid_argument_message([&] { normal_heap_bytes(topology, Config{}, sizing); }),
          invalid_argument_message([&] { low_latency_heap_bytes(topology, sizing); }),
          invalid_argument_message([&] { symmetric_heap_bytes(topology, sizing); })}) {
      EXPECT_TRUE(contains(message, "hidden")) << message;
    }
  }
}

TEST(FuzzedSizing, MoreExpertsThanTheBoundAreRefusedBySizingAndByCalls) {
  // Found by switchyard_fuzz_calls: normal_heap_bytes added channels to an unchecked local expert
  // count of INT_MAX (UBSan: signed integer overflow); and by the Python harness: get_dispatch_layout
  // with num_experts 805306417 allocated its 3 GiB of per-expert counts.
  BufferSizing sizing = small_sizing();
  sizing.num_experts = INT_MAX;
  EXPECT_TRUE(contains(
      invalid_argument_message([&] { normal_heap_bytes(Topology::single_node(1), Config{}, sizing); }),
      "sizing.num_experts"));
  BufferOptions options;
  options.sizing = sizing;
  EXPECT_TRUE(contains(invalid_argument_message([&] { Buffer buffer(options); }), "sizing.num_experts"));

  auto buffer = connected_single_rank();
  int64_t ids[2] = {0, -1};
  const TensorView topk_idx(ids, DType::i64, {1, 2});
  const std::string message =
      invalid_argument_message([&] { buffer->get_dispatch_layout(topk_idx, 805306417); });
  EXPECT_TRUE(contains(message, "num_experts")) << message;
}

// ---- connect ----------------------------------------------------------------------------------------------

// Mappings of this process's heap segments in /proc/self/maps.
int mapped_heap_segments() {
  const std::string segment = "/switchyard-" + std::to_string(getpid()) + "-";
  int mapped = 0;
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);) mapped += contains(line, segment);
  return mapped;
}

// NOTES: the nonce's place in a cpu handle: core's header, then the payload's pid and address
// (src/cpu host heap).
constexpr size_t kNonceAt = sizeof(detail::HandleHeader) + 16;

TEST(FuzzedOptions, AHugeRankCountIsRefusedBeforeAnythingIsSizedByIt) {
  // The rank mask's host mirror was once sized from topology.num_ranks before the topology was
  // checked: 2^61 ranks asked for an exabyte (ASan: allocator out of memory).
  BufferOptions options;
  options.sizing = small_sizing();
  options.topology = Topology{INT_MAX, INT_MAX};
  EXPECT_TRUE(contains(invalid_argument_message([&] { Buffer buffer(options); }), "topology.num_ranks"));
  options.topology = Topology{-5, 1};
  EXPECT_TRUE(contains(invalid_argument_message([&] { Buffer buffer(options); }), "topology.num_ranks"));
}

TEST(FuzzedConnect, ARefusedConnectRetriedWithTheRealHandlesLeavesNoMappingBehind) {
  // Found by switchyard_fuzz_connect: a connect of ranks as processes mapped its peers' segments,
  // was then refused (here: its own handle's nonce differs), and the retry with the real handles
  // mapped them again over the first mappings, which were never unmapped; every retry keeps the
  // peers' segments (RAM in /dev/shm) alive for the life of the process. The host heap now unmaps a
  // mapping left by a refused connect before it replaces it.
  {
    std::vector<std::unique_ptr<Buffer>> buffers;
    std::vector<Bytes> handles;
    for (int rank = 0; rank < 3; ++rank) {
      BufferOptions options;
      options.topology = Topology::single_node(3);
      options.rank = rank;
      options.sharing = HeapSharing::processes;
      options.sizing = small_sizing();
      options.sizing.num_experts = 6;
      buffers.push_back(std::make_unique<Buffer>(options));
      handles.push_back(buffers.back()->local_handle());
    }
    std::vector<Bytes> edited = handles;
    edited[2][kNonceAt] ^= 1;
    const std::string message = invalid_argument_message([&] { buffers[2]->connect(edited); });
    EXPECT_TRUE(contains(message, "all_handles[2]")) << message;
    buffers[2]->connect(handles);
  }
  EXPECT_EQ(mapped_heap_segments(), 0) << "segments stay mapped after every Buffer was destroyed";
}

}  // namespace
}  // namespace switchyard
