// The `symmetric` engine's heap-resident tensors (BufferSizing::symmetric_heap_input,
// symmetric_heap_output_rows_per_expert, symmetric_heap_receive_rows_per_expert; Buffer::symmetric_input,
// Buffer::symmetric_expert_output, Buffer::symmetric_receive): a dispatch whose x lives there is read in
// place by every peer, a pull combine reads y there, and an fp8 dispatch writes its outputs into the receive
// area, also with ranks in separate processes (HeapSharing::processes: every rank maps its peers' heaps at
// addresses of its own, so a plain pointer reaches no peer, as between processes). Bitwise against the
// reference, with the source record checked to announce the heap offset; the inputs may be refilled as soon
// as a call returns; bad sizings, views and tensors are refused by name.
#include <gtest/gtest.h>

#include <algorithm>
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

// ---- the heap receive area (Buffer::symmetric_receive) ----------------------------------------------

BufferOptions receive_options(const Case& c, int rank, HeapSharing sharing, int64_t receive_rows) {
  BufferOptions options = heap_options(c, rank, sharing, true, rows_per_expert(c));
  options.sizing.symmetric_heap_receive_rows_per_expert = receive_rows;
  return options;
}

// The views are the receive area, right after the expert outputs in the symmetric region: e4m3 rows, then
// f32 scales, of every local expert of the sizing; a smaller capacity or hidden gives a leading part of
// each (same addresses, smaller shapes), and writes through a view land in the heap.
TEST(SymmetricHeapReceive, ViewsAreTheReceiveAreaAfterTheExpertOutputs) {
  Case c = make("heap_receive_views", 2, {4, 4}, 4, 2, 8, 256);  // L = 4 local experts, R * max = 8 rows
  Failures failures;
  run_ranks(c.ranks, [&](Group& group) {
    const int rank = group.rank();
    const BufferOptions options = receive_options(c, rank, HeapSharing::threads, 8);
    Buffer buffer(options);
    buffer.connect(group.allgather(buffer.local_handle()));
    const common::SymmetricLayout layout = detail::symmetric_layout(options.topology, options.sizing, 0);
    // The heap input's view starts at its area: the region's address follows from it.
    const uint8_t* region =
        static_cast<const uint8_t*>(buffer.symmetric_input(0, c.hidden).data) - layout.heap_input_offset();
    const auto expect = [&](bool ok, const std::string& what) {
      if (!ok) failures.add(rank, what);
    };
    const SymmetricReceiveViews whole = buffer.symmetric_receive(0);  // C = R * max, hidden = sizing's
    expect(whole.recv_x.dtype == DType::fp8_e4m3 && whole.recv_x.ndim == 3 && whole.recv_x.shape[0] == 4 &&
               whole.recv_x.shape[1] == 8 && whole.recv_x.shape[2] == 256 &&
               whole.recv_x.device == Device::cpu,
           "recv_x: " + whole.recv_x.describe());
    expect(whole.recv_x_scales.dtype == DType::f32 && whole.recv_x_scales.ndim == 3 &&
               whole.recv_x_scales.shape[0] == 4 && whole.recv_x_scales.shape[1] == 8 &&
               whole.recv_x_scales.shape[2] == 2 && whole.recv_x_scales.device == Device::cpu,
           "recv_x_scales: " + whole.recv_x_scales.describe());
    const uint8_t* recv_x = static_cast<const uint8_t*>(whole.recv_x.data);
    const uint8_t* scales = static_cast<const uint8_t*>(whole.recv_x_scales.data);
    expect(layout.heap_receive_offset() == layout.heap_output_offset() + layout.heap_output_bytes() &&
               layout.heap_output_bytes() >= size_t{4 * 8 * 256 * 2},
           "the receive area does not follow the expert outputs");
    expect(recv_x == region + layout.heap_receive_offset(), "recv_x is not at the receive area");
    expect(scales == region + layout.heap_receive_scales_offset(), "recv_x_scales is not at their area");
    expect(recv_x + whole.recv_x.nbytes() <= scales, "recv_x runs into the scales");
    expect(scales + whole.recv_x_scales.nbytes() <= region + layout.region_bytes(),
           "recv_x_scales run past the symmetric region");

    const SymmetricReceiveViews part = buffer.symmetric_receive(3, 128);
    expect(part.recv_x.data == whole.recv_x.data && part.recv_x_scales.data == whole.recv_x_scales.data,
           "a smaller view does not start where the whole one does");
    expect(part.recv_x.shape[0] == 4 && part.recv_x.shape[1] == 3 && part.recv_x.shape[2] == 128 &&
               part.recv_x_scales.shape[1] == 3 && part.recv_x_scales.shape[2] == 1,
           "part: " + part.recv_x.describe() + ", " + part.recv_x_scales.describe());
    expect(buffer.symmetric_receive(8, 0).recv_x.shape[2] == 256, "hidden 0 is not sizing.hidden");

    std::memset(whole.recv_x.data, 0x3C, whole.recv_x.nbytes());
    std::memset(whole.recv_x_scales.data, 0x5A, whole.recv_x_scales.nbytes());
    const SymmetricReceiveViews again = buffer.symmetric_receive(0);
    expect(again.recv_x.as<const uint8_t>()[whole.recv_x.nbytes() - 1] == 0x3C &&
               again.recv_x_scales.as<const uint8_t>()[0] == 0x5A,
           "writes through the views do not stay in the heap");
    group.barrier();
  });
  expect_none(failures, 0);
}

class SymmetricHeapReceive : public ::testing::TestWithParam<HeapSharing> {};

INSTANTIATE_TEST_SUITE_P(Sharings, SymmetricHeapReceive,
                         ::testing::Values(HeapSharing::threads, HeapSharing::processes),
                         [](const auto& info) {
                           return std::string(info.param == HeapSharing::threads ? "threads" : "processes");
                         });

// fp8 dispatches (f32 scales, with and without round_scale; the full capacity and the smallest that fits)
// whose out_recv_x and out_recv_x_scales are every rank's receive views, poisoned before each call: three
// rounds on one buffer (each dispatch rewrites the area), every output bitwise the reference's, and the
// round trip's combine too. Rank 2 sends nothing.
TEST_P(SymmetricHeapReceive, Fp8DispatchesIntoTheReceiveViewsMatchTheReferenceBitwise) {
  const HeapSharing sharing = GetParam();
  const std::string sharing_name = sharing == HeapSharing::threads ? "threads" : "processes";
  const Case base = make("heap_receive_" + sharing_name, 4, {7, 5, 0, 7}, 7, 3, 8, 256);
  const uint64_t seed = testing::seed_for("symmetric_heap/receive/" + sharing_name);
  const std::vector<workload::RankData> drawn = workload::generate(shape_of(base), seed);
  const int64_t fitting = std::max<int64_t>(1, max_expert_rows(drawn, base.num_experts));
  for (const Case& c : {with_fp8(base, false, false), with_capacity(with_fp8(base, true, false), fitting)}) {
    SCOPED_TRACE("round_scale " + std::to_string(c.fp8.round_scale) + ", expert_capacity " +
                 std::to_string(c.capacity));
    const Expected expected = expected_from(c, drawn);
    Failures failures;
    run_ranks(c.ranks, [&](Group& group) {
      const int rank = group.rank();
      // The area holds every row that could arrive: R * max.
      Buffer buffer(receive_options(c, rank, sharing, c.ranks * c.max_tokens));
      buffer.connect(group.allgather(buffer.local_handle()));
      const workload::RankData& data = expected.data[rank];
      for (int round = 0; round < 3; ++round) {
        const SymmetricReceiveViews views = buffer.symmetric_receive(c.capacity);
        workload::poison(views.recv_x);
        workload::poison(views.recv_x_scales);
        PoisonedOutputs out = poisoned_outputs(c, data.x.size(0));
        LowLatencyDispatchArgs args = dispatch_args(c, data);
        out.attach(args);
        args.out_recv_x = views.recv_x;
        args.out_recv_x_scales = views.recv_x_scales;
        LowLatencyDispatchResult dispatched = buffer.symmetric_dispatch(args);
        const std::string label = "the reference (round " + std::to_string(round) + ")";
        if (dispatched.recv_x.data() != views.recv_x.data ||
            dispatched.recv_x_scales.data() != views.recv_x_scales.data)
          failures.add(rank, "the dispatch's recv_x / recv_x_scales are not the receive views");
        check_dispatch(dispatched, expected.dispatched[rank], label, rank, failures);
        LowLatencyCombineResult combined =
            buffer.symmetric_combine(combine_args(data, dispatched.handle, expected.ys[rank]));
        compare(combined.combined_x, expected.combined[rank], "combined_x vs " + label, rank, failures);
      }
      group.barrier();
    });
    expect_none(failures, seed);
  }
}

// The same with a bf16 receive area (BufferSizing::symmetric_heap_receive_dtype = bf16) and bf16
// dispatches, the full capacity and the smallest that fits: the views are bf16 rows alone (no scales), and
// each dispatch's outputs are them, bitwise the reference's; hidden 200 (a multiple of 8, not of 128) is a
// bf16 area's to take.
TEST_P(SymmetricHeapReceive, Bf16DispatchesIntoABf16ReceiveAreaMatchTheReferenceBitwise) {
  const HeapSharing sharing = GetParam();
  const std::string sharing_name = sharing == HeapSharing::threads ? "threads" : "processes";
  const Case base = make("heap_receive_bf16_" + sharing_name, 4, {7, 5, 0, 7}, 7, 3, 8, 200);
  const uint64_t seed = testing::seed_for("symmetric_heap/receive_bf16/" + sharing_name);
  const std::vector<workload::RankData> drawn = workload::generate(shape_of(base), seed);
  const int64_t fitting = std::max<int64_t>(1, max_expert_rows(drawn, base.num_experts));
  for (const Case& c : {base, with_capacity(base, fitting)}) {
    SCOPED_TRACE("expert_capacity " + std::to_string(c.capacity));
    const Expected expected = expected_from(c, drawn);
    Failures failures;
    run_ranks(c.ranks, [&](Group& group) {
      const int rank = group.rank();
      BufferOptions options = receive_options(c, rank, sharing, c.ranks * c.max_tokens);
      options.sizing.symmetric_heap_receive_dtype = DType::bf16;
      Buffer buffer(options);
      buffer.connect(group.allgather(buffer.local_handle()));
      const workload::RankData& data = expected.data[rank];
      for (int round = 0; round < 2; ++round) {
        const SymmetricReceiveViews views = buffer.symmetric_receive(c.capacity);
        if (views.recv_x.dtype != DType::bf16 || views.recv_x.shape[2] != 200 ||
            views.recv_x_scales.defined())
          failures.add(rank,
                       "views: " + views.recv_x.describe() + ", scales " + views.recv_x_scales.describe());
        workload::poison(views.recv_x);
        PoisonedOutputs out = poisoned_outputs(c, data.x.size(0));
        LowLatencyDispatchArgs args = dispatch_args(c, data);
        out.attach(args);
        args.out_recv_x = views.recv_x;
        LowLatencyDispatchResult dispatched = buffer.symmetric_dispatch(args);
        const std::string label = "the reference (round " + std::to_string(round) + ")";
        if (dispatched.recv_x.data() != views.recv_x.data)
          failures.add(rank, "the dispatch's recv_x is not the receive view");
        check_dispatch(dispatched, expected.dispatched[rank], label, rank, failures);
        LowLatencyCombineResult combined =
            buffer.symmetric_combine(combine_args(data, dispatched.handle, expected.ys[rank]));
        compare(combined.combined_x, expected.combined[rank], "combined_x vs " + label, rank, failures);
      }
      group.barrier();
    });
    expect_none(failures, seed);
  }
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
  // A bf16 area: bf16 rows, no scales.
  receiving.sizing.symmetric_heap_receive_dtype = DType::bf16;
  EXPECT_EQ(symmetric_heap_bytes(receiving.topology, receiving.sizing),
            symmetric_heap_bytes(plain.topology, plain.sizing) + rows * 256 * 2);
  for (DType dtype : {DType::f32, DType::i32}) {
    receiving.sizing.symmetric_heap_receive_dtype = dtype;
    const std::string refusal = refused<InvalidArgument>([&] { Buffer buffer(receiving); });
    EXPECT_EQ(
        refusal.rfind("sizing.symmetric_heap_receive_dtype: expected fp8_e4m3 (fp8 dispatches, with f32 "
                      "scales) or bf16 (bf16 dispatches), got " +
                          std::string(dtype_name(dtype)),
                      0),
        0u)
        << refusal;
  }
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

// Buffer::symmetric_receive refuses, naming the argument, what it expected and what it got: a buffer sized
// without the receive area (or not connected), a capacity outside 0..R * max or above the area's rows (0
// resolving to R * max included), and a hidden outside 1..sizing.hidden or not a multiple of 128 (0
// resolving to a sizing.hidden that is not).
TEST(SymmetricHeapTensorErrors, ReceiveViewsAreCheckedNamingTheArgument) {
  Case c = make("heap_receive_errors", 2, {4, 4}, 4, 2, 8, 256);  // R * max = 8 rows per local expert
  {
    Buffer buffer(receive_options(c, 0, HeapSharing::threads, 6));
    std::string message = refused<InvalidArgument>([&] { buffer.symmetric_receive(0); });
    EXPECT_EQ(message.rfind("symmetric_receive: expected a connected buffer", 0), 0u) << message;
  }
  Case one = make("heap_receive_errors", 1, {4}, 4, 2, 4, 256);  // one rank: R * max = 4
  {
    Buffer buffer(receive_options(one, 0, HeapSharing::threads, 0));
    buffer.connect({buffer.local_handle()});
    const std::string message = refused<InvalidArgument>([&] { buffer.symmetric_receive(0); });
    EXPECT_EQ(
        message.rfind("symmetric_receive: expected a buffer sized with "
                      "BufferSizing::symmetric_heap_receive_rows_per_expert > 0, got one sized without it",
                      0),
        0u)
        << message;
  }
  Buffer buffer(receive_options(one, 0, HeapSharing::threads, 3));
  buffer.connect({buffer.local_handle()});
  for (int64_t capacity : {int64_t{-1}, int64_t{5}}) {
    const std::string message = refused<InvalidArgument>([&] { buffer.symmetric_receive(capacity); });
    EXPECT_EQ(message.rfind("expert_capacity: expected 0 (num_ranks * sizing.symmetric_max_tokens_per_rank = "
                            "4 rows per local expert) or 1..4, got " +
                                std::to_string(capacity),
                            0),
              0u)
        << message;
  }
  std::string message = refused<InvalidArgument>([&] { buffer.symmetric_receive(4); });
  EXPECT_EQ(message.rfind("expert_capacity: expected at most 3 rows per local expert "
                          "(sizing.symmetric_heap_receive_rows_per_expert), got 4",
                          0),
            0u)
      << message;
  message = refused<InvalidArgument>([&] { buffer.symmetric_receive(0); });
  EXPECT_EQ(message.rfind("expert_capacity: expected at most 3 rows per local expert "
                          "(sizing.symmetric_heap_receive_rows_per_expert), got 0 (4 rows)",
                          0),
            0u)
      << message;
  EXPECT_EQ(buffer.symmetric_receive(3).recv_x.shape[1], 3);
  for (int hidden : {-1, 64, 200, 384}) {
    message = refused<InvalidArgument>([&] { buffer.symmetric_receive(3, hidden); });
    EXPECT_EQ(message.rfind("hidden: expected a multiple of 128 (one f32 scale per 128 channels) in 1..256 "
                            "(sizing.hidden), or 0 for sizing.hidden, got " +
                                std::to_string(hidden),
                            0),
              0u)
        << message;
  }
  EXPECT_EQ(buffer.symmetric_receive(3, 128).recv_x.shape[2], 128);

  // out_recv_x starting inside the receive area but running past its end (into the scales) is refused
  // naming it and the view, before anything is written.
  const Case fp8 = with_capacity(with_fp8(one, false, false), 3);
  const Expected expected = expected_for(fp8, testing::seed_for("symmetric_heap/receive_errors"));
  const SymmetricReceiveViews views = buffer.symmetric_receive(3);
  LowLatencyDispatchArgs args = dispatch_args(fp8, expected.data[0]);
  TensorView shifted = views.recv_x;
  shifted.data = static_cast<uint8_t*>(views.recv_x_scales.data) - 256;
  args.out_recv_x = shifted;
  args.out_recv_x_scales = views.recv_x_scales;
  message = refused<InvalidArgument>([&] { buffer.symmetric_dispatch(args); });
  EXPECT_EQ(message.rfind("out_recv_x: expected a tensor inside the heap-resident area that "
                          "Buffer::symmetric_receive (its recv_x) returns",
                          0),
            0u)
      << message;

  // 0 resolves to sizing.hidden, which must then be a multiple of 128 too.
  Buffer odd(receive_options(make("heap_receive_odd", 1, {4}, 4, 2, 4, 200), 0, HeapSharing::threads, 4));
  odd.connect({odd.local_handle()});
  message = refused<InvalidArgument>([&] { odd.symmetric_receive(0); });
  EXPECT_EQ(message.rfind("hidden: expected a multiple of 128", 0), 0u) << message;
  EXPECT_NE(message.find("in 1..200 (sizing.hidden), or 0 for sizing.hidden, got 0 (sizing.hidden 200)"),
            std::string::npos)
      << message;
  EXPECT_EQ(odd.symmetric_receive(0, 128).recv_x_scales.shape[2], 1);

  // A bf16 area takes any multiple of 8 (16-byte rows), and names that rule.
  BufferOptions bf16_options =
      receive_options(make("heap_receive_bf16", 1, {4}, 4, 2, 4, 200), 0, HeapSharing::threads, 4);
  bf16_options.sizing.symmetric_heap_receive_dtype = DType::bf16;
  Buffer bf16(bf16_options);
  bf16.connect({bf16.local_handle()});
  EXPECT_EQ(bf16.symmetric_receive(0).recv_x.shape[2], 200);
  EXPECT_EQ(bf16.symmetric_receive(0, 8).recv_x.nbytes(), size_t{4 * 4 * 8 * 2});  // [L 4, C 4, 8] bf16
  for (int hidden : {-1, 100, 208}) {
    message = refused<InvalidArgument>([&] { bf16.symmetric_receive(0, hidden); });
    EXPECT_EQ(
        message.rfind("hidden: expected a multiple of 8 (16-byte bf16 rows) in 1..200 (sizing.hidden), or "
                      "0 for sizing.hidden, got " +
                          std::to_string(hidden),
                      0),
        0u)
        << message;
  }

  // A buffer without the symmetric region refuses it as the other views do.
  BufferOptions without_region = buffer_options(one, 0, Regions::low_latency);
  Buffer low_latency_only(without_region);
  low_latency_only.connect({low_latency_only.local_handle()});
  message = refused<InvalidArgument>([&] { low_latency_only.symmetric_receive(0); });
  EXPECT_EQ(message.rfind("symmetric_receive:", 0), 0u) << message;
}

}  // namespace
}  // namespace switchyard::testing::expert_major
