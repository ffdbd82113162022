// The `symmetric` engine's heap-resident tensors (BufferSizing::symmetric_heap_input,
// symmetric_heap_output_rows_per_expert; Buffer::symmetric_input, Buffer::symmetric_expert_output): a
// dispatch whose x lives there is read in place by every peer, and a pull combine reads y there, also with
// ranks in separate processes (HeapSharing::processes: every rank maps its peers' heaps at addresses of its
// own, so a plain pointer reaches no peer, as between processes). Bitwise against the reference, with the
// source record checked to announce the heap offset; the inputs may be refilled as soon as a call returns;
// bad sizings, views and tensors are refused by name.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <ostream>
#include <string>
#include <vector>

#include "common/symmetric_protocol.hpp"
#include "core/symmetric_sizing.hpp"
#include "support/expert_major_gtest.hpp"
#include "switchyard/buffer.hpp"
#include "switchyard/errors.hpp"
#include "switchyard/group.hpp"
#include "workload/workload.hpp"

namespace switchyard::testing::expert_major {
namespace {

struct HeapCase {
  HeapSharing sharing;
  SymmetricCombine combine;
};

std::string name_of(const HeapCase& c) {
  return std::string(c.sharing == HeapSharing::threads ? "threads" : "processes") + "_" +
         symmetric_combine_name(c.combine);
}

void PrintTo(const HeapCase& c, std::ostream* out) {
  *out << name_of(c);
}

BufferOptions heap_options(const Case& c, int rank, HeapSharing sharing, bool input, int64_t output_rows) {
  BufferOptions options = buffer_options(c, rank, Regions::symmetric);
  options.sharing = sharing;
  options.sizing.symmetric_heap_input = input;
  options.sizing.symmetric_heap_output_rows_per_expert = output_rows;
  return options;
}

// Every rank of `c` with a connected buffer that has both heap-resident tensors (output rows: the
// case's rows per expert), shared as `sharing`.
void with_heap_buffers(const Case& c, HeapSharing sharing, const std::function<void(Group&, Buffer&)>& body) {
  run_ranks(c.ranks, [&](Group& group) {
    Buffer buffer(heap_options(c, group.rank(), sharing, true, rows_per_expert(c)));
    buffer.connect(group.allgather(buffer.local_handle()));
    body(group, buffer);
    group.barrier();
  });
}

// Copies a host tensor into a view of the heap (the CPU backend's heap is host memory).
void fill(const TensorView& view, const TensorView& from) {
  ASSERT_EQ(view.nbytes(), from.nbytes());
  std::memcpy(view.data, from.data, from.nbytes());
}

// What this rank's source record of its last dispatch (call `sequence`) announced.
common::SymmetricSourceRecord announced_x(Buffer& buffer, const Case& c, uint64_t sequence) {
  BufferOptions options = heap_options(c, 0, HeapSharing::threads, true, rows_per_expert(c));
  const common::SymmetricLayout layout = detail::symmetric_layout(options.topology, options.sizing, 0);
  // The heap input's view starts at its area: the region's offset in the heap follows from it.
  const uint8_t* input = static_cast<const uint8_t*>(buffer.symmetric_input(0, c.hidden).data);
  const uint8_t* region = input - layout.heap_input_offset();
  common::SymmetricSourceRecord record;
  std::memcpy(&record,
              region + layout.source_offset() +
                  common::symmetric_half(static_cast<uint32_t>(sequence)) * layout.source_half_bytes(),
              sizeof(record));
  return record;
}

// This rank's dispatch from the heap input (its tokens copied there first).
LowLatencyDispatchResult dispatch_from_heap(Buffer& buffer, const Case& c, const workload::RankData& data,
                                            TensorView* x_out = nullptr) {
  const TensorView x = buffer.symmetric_input(data.x.size(0), c.hidden);
  fill(x, data.x);
  LowLatencyDispatchArgs args = dispatch_args(c, data);
  args.x = x;
  if (x_out != nullptr) *x_out = x;
  return buffer.symmetric_dispatch(args);
}

// This rank's combine from the heap output (the synthetic experts' outputs copied there first).
LowLatencyCombineResult combine_from_heap(Buffer& buffer, const workload::RankData& data,
                                          const LowLatencyDispatchResult& dispatched, int rank,
                                          TensorView* y_out = nullptr) {
  const TensorView y = buffer.symmetric_expert_output(dispatched.handle);
  fill(y, expert_outputs(dispatched.recv_x, {}, rank));
  if (y_out != nullptr) *y_out = y;
  return buffer.symmetric_combine(combine_args(data, dispatched.handle, y));
}

class SymmetricHeapTensors : public ::testing::TestWithParam<HeapCase> {};

INSTANTIATE_TEST_SUITE_P(Sharings, SymmetricHeapTensors,
                         ::testing::Values(HeapCase{HeapSharing::threads, SymmetricCombine::automatic},
                                           HeapCase{HeapSharing::threads, SymmetricCombine::push},
                                           HeapCase{HeapSharing::processes, SymmetricCombine::automatic},
                                           HeapCase{HeapSharing::processes, SymmetricCombine::pull}),
                         [](const auto& info) { return name_of(info.param); });

// Three rounds on one buffer (both halves, and a half reused): dispatch from the heap input, experts write
// into the heap output, combine from there; every output bitwise the reference's. Rank 2 sends nothing.
TEST_P(SymmetricHeapTensors, RoundTripsFromTheHeapMatchTheReferenceBitwise) {
  const HeapCase& heap = GetParam();
  Case c = with_symmetric_combine(make("heap_" + name_of(heap), 4, {7, 5, 0, 7}, 7, 3, 8, 256), heap.combine);
  const uint64_t seed = testing::seed_for("symmetric_heap/" + name_of(heap));
  const Expected expected = expected_for(c, seed);
  Failures failures;
  with_heap_buffers(c, heap.sharing, [&](Group& group, Buffer& buffer) {
    const int rank = group.rank();
    const workload::RankData& data = expected.data[rank];
    const SymmetricCombine path = buffer.symmetric_combine_path();
    const SymmetricCombine want =
        heap.combine == SymmetricCombine::automatic
            ? (heap.sharing == HeapSharing::threads ? SymmetricCombine::pull : SymmetricCombine::push)
            : heap.combine;
    if (path != want)
      failures.add(rank, std::string("symmetric_combine_path: ") + symmetric_combine_name(path));
    uint64_t sequence = 0;
    for (int round = 0; round < 3; ++round) {
      LowLatencyDispatchResult dispatched = dispatch_from_heap(buffer, c, data);
      ++sequence;
      check_dispatch(dispatched, expected.dispatched[rank], "reference", rank, failures);
      const common::SymmetricSourceRecord record = announced_x(buffer, c, sequence);
      if (record.x_at != common::SymmetricRowsAt::heap) {
        failures.add(rank, "the source record does not announce x as heap-resident (x_at " +
                               std::to_string(static_cast<uint32_t>(record.x_at)) + ")");
      }

      LowLatencyCombineResult combined = combine_from_heap(buffer, data, dispatched, rank);
      ++sequence;
      compare(combined.combined_x, expected.combined[rank], "combined_x", rank, failures);
    }
  });
  expect_none(failures, seed);
}

// The heap input may be refilled as soon as the dispatch returns, and the heap output as soon as the
// combine returns: each rank poisons them right away, and every rank's outputs are still the reference's.
// Skewed routing: rank 0 receives most rows, so the others return (and poison) while it still pulls.
TEST_P(SymmetricHeapTensors, TheTensorsMayBeRefilledAsSoonAsTheCallReturns) {
  const HeapCase& heap = GetParam();
  Case c = with_routing(
      with_symmetric_combine(make("heap_refill_" + name_of(heap), 4, {32, 32, 32, 32}, 32, 4, 8, 512),
                             heap.combine),
      workload::Routing::skewed);
  const uint64_t seed = testing::seed_for("symmetric_heap/refill");
  const Expected expected = expected_for(c, seed);
  Failures failures;
  with_heap_buffers(c, heap.sharing, [&](Group& group, Buffer& buffer) {
    const int rank = group.rank();
    const workload::RankData& data = expected.data[rank];
    for (int round = 0; round < 3; ++round) {
      TensorView x, y;
      LowLatencyDispatchResult dispatched = dispatch_from_heap(buffer, c, data, &x);
      workload::poison(x);
      check_dispatch(dispatched, expected.dispatched[rank], "reference", rank, failures);
      LowLatencyCombineResult combined = combine_from_heap(buffer, data, dispatched, rank, &y);
      workload::poison(y);
      compare(combined.combined_x, expected.combined[rank], "combined_x", rank, failures);
    }
  });
  expect_none(failures, seed);
}

// A caller's own x still works next to the heap input: published across processes, in place as threads.
TEST(SymmetricHeapTensorsMixed, RanksWithAndWithoutTheHeapInputMatchTheReference) {
  Case c = make("heap_mixed", 4, {6, 6, 6, 6}, 6, 2, 8, 256);
  const uint64_t seed = testing::seed_for("symmetric_heap/mixed");
  const Expected expected = expected_for(c, seed);
  Failures failures;
  with_heap_buffers(c, HeapSharing::processes, [&](Group& group, Buffer& buffer) {
    const int rank = group.rank();
    const workload::RankData& data = expected.data[rank];
    LowLatencyDispatchArgs args = dispatch_args(c, data);
    if (rank % 2 == 0) {
      args.x = buffer.symmetric_input(data.x.size(0), c.hidden);
      fill(args.x, data.x);
    }
    LowLatencyDispatchResult dispatched = buffer.symmetric_dispatch(args);
    check_dispatch(dispatched, expected.dispatched[rank], "reference", rank, failures);
    const common::SymmetricRowsAt at = announced_x(buffer, c, 1).x_at;
    const common::SymmetricRowsAt want =
        rank % 2 == 0 ? common::SymmetricRowsAt::heap : common::SymmetricRowsAt::input_buffer;
    if (at != want) failures.add(rank, "x_at " + std::to_string(static_cast<uint32_t>(at)));
    // Push (auto across processes): y may be anywhere.
    Tensor y = expert_outputs(dispatched.recv_x, {}, rank);
    LowLatencyCombineResult combined = buffer.symmetric_combine(combine_args(data, dispatched.handle, y));
    compare(combined.combined_x, expected.combined[rank], "combined_x", rank, failures);
  });
  expect_none(failures, seed);
}

// A reader follows a peer's heap offset only when the announced rows lie inside the peer's heap (the
// CPU and CUDA readers alike): edges, and spans that would wrap around.
TEST(SymmetricHeapSpan, FitsOnlyInsideTheHeap) {
  constexpr uint64_t kHeap = 4096;
  EXPECT_TRUE(common::symmetric_heap_span_fits(0, kHeap, kHeap));
  EXPECT_TRUE(common::symmetric_heap_span_fits(kHeap, 0, kHeap));
  EXPECT_TRUE(common::symmetric_heap_span_fits(1024, 3072, kHeap));
  EXPECT_FALSE(common::symmetric_heap_span_fits(1024, 3073, kHeap));
  EXPECT_FALSE(common::symmetric_heap_span_fits(kHeap + 1, 0, kHeap));
  EXPECT_FALSE(common::symmetric_heap_span_fits(kHeap - 1, UINT64_MAX, kHeap));
  EXPECT_FALSE(common::symmetric_heap_span_fits(UINT64_MAX, 2, kHeap));
}

// ---- refusals ----------------------------------------------------------------------------------------

// Forced pull across processes with heap outputs: a combine whose y is elsewhere is refused on every rank,
// naming x, before anything is written (no rank waits for another: all refuse).
TEST(SymmetricHeapTensorErrors, PullAcrossProcessesRefusesExpertOutputsOutsideTheHeap) {
  Case c =
      with_symmetric_combine(make("heap_pull_elsewhere", 2, {4, 4}, 4, 2, 4, 128), SymmetricCombine::pull);
  const uint64_t seed = testing::seed_for("symmetric_heap/pull_elsewhere");
  const Expected expected = expected_for(c, seed);
  Failures failures;
  with_heap_buffers(c, HeapSharing::processes, [&](Group& group, Buffer& buffer) {
    const int rank = group.rank();
    const workload::RankData& data = expected.data[rank];
    LowLatencyDispatchResult dispatched = buffer.symmetric_dispatch(dispatch_args(c, data));
    Tensor y = expert_outputs(dispatched.recv_x, {}, rank);
    LowLatencyCombineArgs args = combine_args(data, dispatched.handle, y);
    Tensor out = poisoned(DType::bf16, {data.x.size(0), c.hidden});
    args.out_combined_x = out;
    const std::string message = refused<InvalidArgument>([&] { buffer.symmetric_combine(args); });
    if (message.rfind("x:", 0) != 0 || message.find("symmetric_expert_output") == std::string::npos)
      failures.add(rank, "message: " + message);
    if (!all_poison(out)) failures.add(rank, "out_combined_x was written");
    // The buffer goes on: the same combine from the heap output.
    const TensorView heap_y = buffer.symmetric_expert_output(dispatched.handle);
    fill(heap_y, y);
    LowLatencyCombineResult combined =
        buffer.symmetric_combine(combine_args(data, dispatched.handle, heap_y));
    compare(combined.combined_x, expected.combined[rank], "combined_x", rank, failures);
  });
  expect_none(failures, seed);
}

TEST(SymmetricHeapTensorErrors, ForcedPullAcrossProcessesWithoutHeapOutputsIsRefusedNamingBoth) {
  Case c = with_symmetric_combine(make("heap_pull_without", 1, {4}, 4, 2, 4), SymmetricCombine::pull);
  Buffer buffer(heap_options(c, 0, HeapSharing::processes, true, 0));
  const std::string message = refused<Unsupported>([&] { buffer.connect({buffer.local_handle()}); });
  EXPECT_EQ(message.rfind("config.symmetric_combine: pull needs", 0), 0u) << message;
  EXPECT_NE(message.find("sizing.symmetric_heap_output_rows_per_expert"), std::string::npos) << message;
}

TEST(SymmetricHeapTensorErrors, SizingsAreCheckedNamingTheField) {
  Case c = make("heap_sizing", 2, {4, 4}, 4, 2, 4);
  BufferOptions without_region = heap_options(c, 0, HeapSharing::threads, true, 0);
  without_region.sizing.symmetric_max_tokens_per_rank = 0;
  std::string message = refused<InvalidArgument>([&] { Buffer buffer(without_region); });
  EXPECT_EQ(message.rfind("sizing:", 0), 0u) << message;
  EXPECT_NE(message.find("symmetric_max_tokens_per_rank > 0"), std::string::npos) << message;

  for (int64_t rows : {int64_t{-1}, int64_t{9}}) {  // 2 ranks x 4 tokens: at most 8 rows reach an expert
    BufferOptions options = heap_options(c, 0, HeapSharing::threads, false, rows);
    message = refused<InvalidArgument>([&] { Buffer buffer(options); });
    EXPECT_EQ(message.rfind("sizing.symmetric_heap_output_rows_per_expert: expected 0..8", 0), 0u) << message;
    EXPECT_NE(message.find("got " + std::to_string(rows)), std::string::npos) << message;
    message = refused<InvalidArgument>([&] { symmetric_heap_bytes(options.topology, options.sizing); });
    EXPECT_EQ(message.rfind("sizing.symmetric_heap_output_rows_per_expert", 0), 0u) << message;
  }
}

TEST(SymmetricHeapTensorErrors, TheHeapTensorsGrowTheRegionByTheirBytesOnly) {
  Case c = make("heap_bytes", 2, {4, 4}, 4, 2, 8, 256);
  const BufferOptions plain = heap_options(c, 0, HeapSharing::threads, false, 0);
  const BufferOptions both = heap_options(c, 0, HeapSharing::threads, true, 8);
  const size_t input = 4 * 256 * 2;       // [max tokens, hidden] bf16
  const size_t output = 4 * 8 * 256 * 2;  // [8 experts / 2 ranks, 8 rows, hidden] bf16
  EXPECT_EQ(symmetric_heap_bytes(both.topology, both.sizing),
            symmetric_heap_bytes(plain.topology, plain.sizing) + input + output);
}

// The heap receive area (BufferSizing::symmetric_heap_receive_rows_per_expert: the fp8 push's outputs across
// processes) is checked like the other heap tensors, and reserves e4m3 rows and their f32 scales only.
TEST(SymmetricHeapTensorErrors, TheHeapReceiveAreaIsCheckedNamingTheFieldAndGrowsTheRegionByItsBytes) {
  Case c = make("heap_receive", 2, {4, 4}, 4, 2, 8, 256);
  for (int64_t rows : {int64_t{-1}, int64_t{9}}) {  // 2 ranks x 4 tokens: at most 8 rows reach an expert
    BufferOptions options = heap_options(c, 0, HeapSharing::threads, false, 0);
    options.sizing.symmetric_heap_receive_rows_per_expert = rows;
    std::string message = refused<InvalidArgument>([&] { Buffer buffer(options); });
    EXPECT_EQ(message.rfind("sizing.symmetric_heap_receive_rows_per_expert: expected 0..8", 0), 0u)
        << message;
    EXPECT_NE(message.find("got " + std::to_string(rows)), std::string::npos) << message;
  }
  BufferOptions without_region = heap_options(c, 0, HeapSharing::threads, false, 0);
  without_region.sizing.symmetric_heap_receive_rows_per_expert = 4;
  without_region.sizing.symmetric_max_tokens_per_rank = 0;
  const std::string message = refused<InvalidArgument>([&] { Buffer buffer(without_region); });
  EXPECT_EQ(message.rfind("sizing:", 0), 0u) << message;
  EXPECT_NE(message.find("symmetric_heap_receive_rows_per_expert=4"), std::string::npos) << message;

  const BufferOptions plain = heap_options(c, 0, HeapSharing::threads, false, 0);
  BufferOptions receiving = plain;
  receiving.sizing.symmetric_heap_receive_rows_per_expert = 8;
  const size_t rows = 4 * 8;                                             // [8 experts / 2 ranks, 8 rows]
  const size_t bytes = rows * 256 + rows * (256 / 128) * sizeof(float);  // e4m3 rows, then f32 scales
  EXPECT_EQ(symmetric_heap_bytes(receiving.topology, receiving.sizing),
            symmetric_heap_bytes(plain.topology, plain.sizing) + bytes);
}

TEST(SymmetricHeapTensorErrors, ViewsAndTensorsOutsideThemAreRefusedNamingTheArgument) {
  Case c = make("heap_views", 1, {1}, 4, 2, 4, 128);  // one token: no expert gets more than one row
  const uint64_t seed = testing::seed_for("symmetric_heap/views");
  const Expected expected = expected_for(c, seed);
  {
    Buffer buffer(heap_options(c, 0, HeapSharing::threads, false, 0));
    buffer.connect({buffer.local_handle()});
    std::string message = refused<InvalidArgument>([&] { buffer.symmetric_input(1, 128); });
    EXPECT_EQ(
        message.rfind("symmetric_input: expected a buffer sized with BufferSizing::symmetric_heap_input", 0),
        0u)
        << message;
    LowLatencyDispatchResult dispatched = buffer.symmetric_dispatch(dispatch_args(c, expected.data[0]));
    message = refused<InvalidArgument>([&] { buffer.symmetric_expert_output(dispatched.handle); });
    EXPECT_NE(message.find("symmetric_heap_output_rows_per_expert"), std::string::npos) << message;
  }
  Buffer buffer(heap_options(c, 0, HeapSharing::threads, true, 2));
  std::string message = refused<InvalidArgument>([&] { buffer.symmetric_input(1, 128); });
  EXPECT_EQ(message.rfind("symmetric_input: expected a connected buffer", 0), 0u) << message;
  buffer.connect({buffer.local_handle()});
  message = refused<InvalidArgument>([&] { buffer.symmetric_input(5, 128); });
  EXPECT_EQ(message.rfind("num_tokens: expected 0..4", 0), 0u) << message;
  message = refused<InvalidArgument>([&] { buffer.symmetric_input(4, 129); });
  EXPECT_EQ(message.rfind("hidden: expected 1..128", 0), 0u) << message;
  EXPECT_EQ(buffer.symmetric_input(4, 128).nbytes(), size_t{4 * 128 * 2});

  // x (one row) starting inside the heap input but running past its end.
  const TensorView whole = buffer.symmetric_input(4, 128);
  LowLatencyDispatchArgs args = dispatch_args(c, expected.data[0]);
  TensorView shifted = args.x;
  shifted.data = static_cast<uint8_t*>(whole.data) + whole.nbytes() - 128;
  args.x = shifted;
  message = refused<InvalidArgument>([&] { buffer.symmetric_dispatch(args); });
  EXPECT_EQ(
      message.rfind("x: expected a tensor inside the heap-resident area that Buffer::symmetric_input", 0), 0u)
      << message;

  // A dispatch of more rows per expert than the heap output holds (capacity 4 > 2 rows).
  LowLatencyDispatchResult dispatched = buffer.symmetric_dispatch(dispatch_args(c, expected.data[0]));
  message = refused<InvalidArgument>([&] { buffer.symmetric_expert_output(dispatched.handle); });
  EXPECT_EQ(message.rfind("handle: expected a dispatch of at most 2 rows per expert", 0), 0u) << message;
  const Case two_rows = with_capacity(c, 2);
  dispatched = buffer.symmetric_dispatch(dispatch_args(two_rows, expected.data[0]));
  EXPECT_EQ(buffer.symmetric_expert_output(dispatched.handle).shape[1], 2);
  message = refused<InvalidArgument>([&] { buffer.symmetric_expert_output(dispatched.handle, 129); });
  EXPECT_EQ(message.rfind("hidden: expected 1..128", 0), 0u) << message;
}

}  // namespace
}  // namespace switchyard::testing::expert_major
