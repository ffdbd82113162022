// The CUDA `normal` engine against the reference, bit for bit: R ranks as threads of this process,
// each with its own stream, on the devices SWITCHYARD_TEST_DEVICES picks (cuda/rank_device.hpp;
// default: all on GPU 0). Skipped (reported as skipped) where no GPU is present.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <future>
#include <sstream>

#include "common/posted_counts.hpp"
#include "cuda/backend/environment_tuning.hpp"
#include "cuda/cuda_round_trip.hpp"
#include "cuda/device_tensors.hpp"
#include "cuda/expert_major_round_trip.hpp"
#include "cuda/failed_dispatch.hpp"
#include "cuda/normal/dispatch_counts.hpp"
#include "cuda/normal/dispatch_phases.hpp"
#include "cuda/rank_device.hpp"
#include "cuda/released_layout_round_trip.hpp"
#include "support/normal_round_trip.hpp"
#include "support/refusal.hpp"
#include "support/refused_environment.hpp"
#include "support/scoped_environment.hpp"
#include "support/test_seed.hpp"
#include "switchyard/errors.hpp"
#include "switchyard/group.hpp"
#include "switchyard/reference.hpp"

namespace switchyard::testing {
namespace {

struct CudaCase {
  std::string name;
  workload::Shape shape;
  Config config;
  int expert_alignment = 1;
  // fp8: every dispatch takes its scales column-major (DispatchArgs::x_scales_column_major).
  bool scales_column_major = false;
  // x and the expert outputs in the Buffer's heap-resident inputs, read in place (docs/normal-in-place.md).
  bool heap_inputs = false;
  // With heap_inputs: the calls take the rank's own tensors, which the Buffer copies into its heap inputs.
  bool staged_inputs = false;
};

workload::Shape make_shape(int ranks, int64_t tokens, int hidden, int topk, int experts, DType dtype,
                           workload::Routing routing = workload::Routing::random, bool weights = true) {
  workload::Shape shape;
  shape.topology = Topology::single_node(ranks);
  shape.tokens_per_rank = tokens;
  shape.hidden = hidden;
  shape.topk = topk;
  shape.num_experts = experts;
  shape.dtype = dtype;
  shape.routing = routing;
  shape.with_weights = weights;
  return shape;
}

// NOTES: 10 s names a stuck rank and role quickly; compute-sanitizer slows the kernels by orders of magnitude
// (session 34: racecheck on the one-rank ring cases ran past 10 s in the combine, where session 28's run of
// the same cases took 9.3 s in all), so its runs raise it with SWITCHYARD_NORMAL_TEST_TIMEOUT (seconds > 0;
// scripts/gpu-check.sh does) and a real hang still ends, at the longer bound.
double case_timeout_seconds() {
  static const double seconds = [] {
    const char* text = std::getenv("SWITCHYARD_NORMAL_TEST_TIMEOUT");
    if (text == nullptr || *text == '\0') return 10.0;
    char* end = nullptr;
    const double value = std::strtod(text, &end);
    if (*end != '\0' || !(value > 0)) {
      std::fprintf(stderr, "SWITCHYARD_NORMAL_TEST_TIMEOUT: expected seconds > 0, got '%s'\n", text);
      std::abort();
    }
    return value;
  }();
  return seconds;
}

Config config_with(int channels, int ring_slots, int chunk_tokens) {
  Config config;
  config.num_channels = channels;
  config.ring_slots = ring_slots;
  config.chunk_tokens = chunk_tokens;
  config.timeout_seconds = case_timeout_seconds();
  return config;
}

std::vector<CudaCase> cases() {
  using workload::Routing;
  std::vector<CudaCase> list;
  const Config standard = config_with(Config::kAutoChannels, 128, 16);
  for (int ranks : {1, 2, 3, 4, 8}) {
    list.push_back({"R" + std::to_string(ranks) + "_bf16_h7168",
                    make_shape(ranks, 192, 7168, 8, 8 * ranks * 2, DType::bf16), standard});
  }
  list.push_back({"R4_fp8_h7168", make_shape(4, 160, 7168, 8, 64, DType::fp8_e4m3), standard});
  list.push_back({"R8_fp8_h2048_aligned", make_shape(8, 96, 2048, 8, 64, DType::fp8_e4m3), standard, 16});
  // DeepEP's column-major scales, read in place: the reference's bits (the row-major cases' oracle).
  list.push_back({"R4_fp8_h7168_column_major_scales", make_shape(4, 160, 7168, 8, 64, DType::fp8_e4m3),
                  standard, 1, true});
  list.push_back({"R8_fp8_h2048_column_major_scales_aligned", make_shape(8, 96, 2048, 8, 64, DType::fp8_e4m3),
                  standard, 16, true});
  // The heap-resident inputs, read in place by the peers: bf16 and fp8, rings that wrap, a rank without
  // tokens.
  list.push_back(
      {"R8_bf16_h7168_heap_inputs", make_shape(8, 192, 7168, 8, 64, DType::bf16), standard, 1, false, true});
  list.push_back({"R4_fp8_h7168_heap_inputs", make_shape(4, 160, 7168, 8, 64, DType::fp8_e4m3), standard, 1,
                  false, true});
  list.push_back({"R4_bf16_heap_inputs_wrap", make_shape(4, 128, 1024, 4, 16, DType::bf16),
                  config_with(2, 4, 2), 1, false, true});
  // The rank's own x and expert outputs, staged into the heap inputs by the Buffer (fp8: the scales too,
  // column-major as DeepEP's callers pass them, transposed into the row-major view).
  list.push_back({"R4_fp8_h7168_heap_inputs_staged_column_major_scales",
                  make_shape(4, 160, 7168, 8, 64, DType::fp8_e4m3), standard, 1, true, true, true});
  list.push_back({"R4_k1", make_shape(4, 128, 1024, 1, 16, DType::bf16), standard});
  list.push_back({"R4_k9", make_shape(4, 128, 1024, 9, 32, DType::bf16), standard});
  list.push_back({"R2_h128", make_shape(2, 300, 128, 4, 8, DType::bf16), standard});
  list.push_back({"R2_h8192", make_shape(2, 64, 8192, 4, 8, DType::bf16), standard});
  list.push_back(
      {"R4_all_invalid", make_shape(4, 64, 512, 4, 16, DType::bf16, Routing::all_invalid), standard});
  list.push_back(
      {"R4_one_expert", make_shape(4, 100, 512, 4, 16, DType::bf16, Routing::one_expert), standard});
  list.push_back({"R4_skewed_no_weights", make_shape(4, 200, 512, 4, 16, DType::bf16, Routing::skewed, false),
                  standard});
  list.push_back({"R8_tiny_rings_wrap", make_shape(8, 100, 256, 4, 32, DType::bf16), config_with(2, 2, 1)});
  list.push_back(
      {"R3_small_rings_wrap", make_shape(3, 150, 512, 6, 12, DType::fp8_e4m3), config_with(3, 5, 2)});
  // More ranks than the combine block's 24 warps: a sender warp serves several home ranks, and the
  // receiver's coordinator a lane per rank (32, every lane). One channel each: 64 blocks on one GPU.
  list.push_back(
      {"R32_more_ranks_than_warps", make_shape(32, 48, 256, 4, 64, DType::bf16), config_with(1, 4, 2)});
  CudaCase zero{"R2_zero_tokens_on_rank1", make_shape(2, 0, 512, 4, 8, DType::bf16), standard};
  zero.shape.tokens_per_rank_list = {40, 0};
  list.push_back(zero);
  list.push_back({"R2_zero_tokens", make_shape(2, 0, 512, 4, 8, DType::bf16), standard});
  // Small enough for compute-sanitizer (scripts/gpu-check.sh runs the Small_ cases under it).
  list.push_back({"Small_R1_fp8", make_shape(1, 40, 256, 4, 8, DType::fp8_e4m3), config_with(2, 4, 2)});
  // compute-sanitizer's case of the in-place paths (one rank: its peer reads are of its own heap).
  list.push_back({"Small_R1_fp8_heap_inputs", make_shape(1, 40, 256, 4, 8, DType::fp8_e4m3),
                  config_with(2, 4, 2), 1, false, true});
  list.push_back({"Small_R1_fp8_heap_inputs_staged", make_shape(1, 40, 256, 4, 8, DType::fp8_e4m3),
                  config_with(2, 4, 2), 1, false, true, true});
  list.push_back({"Small_R2_bf16", make_shape(2, 40, 256, 4, 8, DType::bf16), config_with(2, 4, 2)});
  // The ring paths with rings that hold a channel's every token (20 a channel here), so that no sender waits
  // for its receiver to free slots: compute-sanitizer's racecheck case of the rings. Under racecheck the
  // small-ring cases above stop at random (a receiver waits for rows its sender never sends) and this one
  // does not (bench/NOTES.md, sessions 42-46): the tool does not keep a channel's sender and receiver blocks
  // running together, which a ring that fills needs. scripts/gpu-check.sh runs racecheck on this one instead.
  list.push_back(
      {"Small_R1_fp8_wide_rings", make_shape(1, 40, 256, 4, 8, DType::fp8_e4m3), config_with(2, 64, 2)});
  return list;
}

std::string case_name(const ::testing::TestParamInfo<CudaCase>& info) {
  return info.param.name;
}
void PrintTo(const CudaCase& c, std::ostream* out) {
  *out << c.name;
}

// Inside rank threads: an exception (not an ASSERT, which would only leave this rank's lambda) makes
// run_ranks abort the group, so the other ranks stop instead of waiting at a barrier forever.
void check_cuda(cudaError_t status, const char* what) {
  if (status != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(status));
}

// A macro, since GTEST_SKIP returns from the function it is written in.
#define SWITCHYARD_REQUIRE_GPU() \
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device: GPU tests are skipped, not passed"

BufferOptions options_for(const CudaCase& c, int rank) {
  BufferOptions options;
  options.topology = c.shape.topology;
  options.rank = rank;
  options.backend = Backend::cuda;
  options.device = device_for_rank(rank, c.shape.topology.num_ranks);
  options.config = c.config;
  options.sizing = sizing_for(c.shape);
  if (c.heap_inputs) {
    options.sizing.normal_heap_input_tokens = options.sizing.max_tokens_per_rank;
    options.sizing.normal_heap_combine_rows = c.shape.topology.num_ranks * options.sizing.max_tokens_per_rank;
  }
  return options;
}

class CudaNormalEngineTest : public ::testing::TestWithParam<CudaCase> {};

// Fresh, repeated and cached dispatches with combines: every output against the reference, bit for bit.
void expect_round_trips_match_reference(const CudaCase& c) {
  const uint64_t seed = seed_for(c.name);
  SCOPED_TRACE("case " + c.name + " seed=" + std::to_string(seed) + " " + c.shape.describe());
  auto data = workload::generate(c.shape, seed);
  Expected expected = compute_expected(c.shape, data, c.expert_alignment);
  const int ranks = c.shape.topology.num_ranks;
  std::vector<std::vector<std::string>> failures(ranks);
  run_ranks(ranks, [&](Group& group) {
    const int rank = group.rank();
    const int device = device_for_rank(rank, c.shape.topology.num_ranks);
    cudaSetDevice(device);
    cudaStream_t stream;
    cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    {
      Buffer buffer(options_for(c, rank));
      buffer.connect(group.allgather(buffer.local_handle()));
      DispatchHandle handle;
      // NOTES: the ranks start each round trip together. With ranks as threads on one GPU, a rank
      // that was still in host code between two calls while its peers' next kernels already spun was
      // seen to stall until the wait's timeout (R = 8, hidden 7168). The cause found since (bench/
      // NOTES.md, session 10) was pageable host copies waiting inside the driver, which the helpers
      // now avoid (device/pageable_copy.hpp); the barrier stays as a guard. Real deployments (a
      // process per GPU, or MPS) have no shared context.
      group.barrier();
      DeviceRun first =
          run_on_device(buffer, c.shape, data[rank], expected, c.expert_alignment, stream, nullptr, &handle,
                        {}, {}, c.scales_column_major, c.heap_inputs, true, c.staged_inputs);
      compare_with_reference(first, c.shape, expected, rank, &failures[rank]);
      // Determinism: the same inputs again give the same bits; and a cached dispatch replays the routing.
      group.barrier();
      DeviceRun second =
          run_on_device(buffer, c.shape, data[rank], expected, c.expert_alignment, stream, nullptr, nullptr,
                        {}, {}, c.scales_column_major, c.heap_inputs, true, c.staged_inputs);
      compare_with_reference(second, c.shape, expected, rank, &failures[rank]);
      group.barrier();
      DeviceRun cached =
          run_on_device(buffer, c.shape, data[rank], expected, c.expert_alignment, stream, &handle, nullptr,
                        {}, {}, c.scales_column_major, c.heap_inputs, true, c.staged_inputs);
      compare_with_reference(cached, c.shape, expected, rank, &failures[rank]);
      // DeepEP's cached dispatch, without topk_idx: in place, pulled by the handle (gather_by_handle).
      group.barrier();
      DeviceRun rows_only = run_on_device(buffer, c.shape, data[rank], expected, c.expert_alignment, stream,
                                          &handle, nullptr, {}, {}, c.scales_column_major, c.heap_inputs,
                                          /*with_topk=*/false, c.staged_inputs);
      compare_with_reference(rows_only, c.shape, expected, rank, &failures[rank], /*with_topk=*/false);
    }
    cudaStreamDestroy(stream);
  });
  for (int rank = 0; rank < ranks; ++rank) {
    for (const auto& failure : failures[rank]) ADD_FAILURE() << failure;
  }
}

TEST_P(CudaNormalEngineTest, DispatchAndCombineMatchReferenceBitwiseAndRepeat) {
  SWITCHYARD_REQUIRE_GPU();
  expect_round_trips_match_reference(GetParam());
}

INSTANTIATE_TEST_SUITE_P(EdgeCases, CudaNormalEngineTest, ::testing::ValuesIn(cases()), case_name);

// The round trips of the cases named in `chosen` (each must be among cases(), so that a renamed case fails
// the test rather than dropping out of it) with the environment variable `name` set to `value`.
void expect_chosen_cases_match_reference_with(const char* name, const char* value,
                                              const std::vector<std::string>& chosen) {
  const ScopedEnvironment variable(name);
  variable.set(value);
  size_t ran = 0;
  for (const CudaCase& c : cases()) {
    if (std::find(chosen.begin(), chosen.end(), c.name) == chosen.end()) continue;
    SCOPED_TRACE(std::string(name) + "=" + value + ", case " + c.name);
    expect_round_trips_match_reference(c);
    ++ran;
  }
  EXPECT_EQ(ran, chosen.size()) << "a chosen case is no longer among cases()";
}

// The fresh dispatch's counts copied back (SWITCHYARD_NORMAL_COUNTS=copy; polling the notify's post is the
// default, cuda/normal/dispatch_counts.hpp) give the same bits: one rank and many, ring and in-place paths,
// a rank without tokens, every route dropped, more ranks than warps. (scripts/gpu-check.sh also runs the
// whole suite with copy.)
TEST(CudaNormalCountReadback, CopiedCountsGiveTheReferenceBits) {
  SWITCHYARD_REQUIRE_GPU();
  expect_chosen_cases_match_reference_with(
      "SWITCHYARD_NORMAL_COUNTS", "copy",
      {"R1_bf16_h7168", "R8_bf16_h7168_heap_inputs", "R4_fp8_h7168", "R8_fp8_h2048_aligned",
       "R2_zero_tokens_on_rank1", "R4_all_invalid", "R32_more_ranks_than_warps"});
}

// The overrides' parsing: no GPU needed.
TEST(CudaNormalCountReadback, OverridesAreReadFromTheEnvironmentAndBadValuesAreNamed) {
  const ScopedEnvironment counts("SWITCHYARD_NORMAL_COUNTS");
  EXPECT_EQ(cuda::count_readback_from_environment(), cuda::CountReadback::poll);
  counts.set("");
  EXPECT_EQ(cuda::count_readback_from_environment(), cuda::CountReadback::poll);
  counts.set("poll");
  EXPECT_EQ(cuda::count_readback_from_environment(), cuda::CountReadback::poll);
  counts.set("copy");
  EXPECT_EQ(cuda::count_readback_from_environment(), cuda::CountReadback::copy);
  expect_refused_by_name(counts, {"Poll", "1", "mapped"}, "SWITCHYARD_NORMAL_COUNTS: expected copy or poll",
                         [] { cuda::count_readback_from_environment(); });
  const ScopedEnvironment phases("SWITCHYARD_NORMAL_PHASES");
  expect_refused_by_name(phases, {"yes", "2", "Stamps"}, "SWITCHYARD_NORMAL_PHASES: expected 0, 1",
                         [] { cuda::DispatchPhases refused(0); });
}

// The CUDA backend's numeric tuning overrides share one parser (cuda/backend/environment_tuning.hpp; the
// symmetric engine's SWITCHYARD_SYMMETRIC_STORE_READ_LAG and _PIECE_BYTES): decimal digits alone, in range,
// a multiple where asked; anything else (a sign or space that strtol would take, a suffix, an exponent, a
// value too large to hold) refused naming the variable, its range and what it sets. No GPU needed.
TEST(CudaEnvironmentTuning, DigitsInRangeAreReadAndEverythingElseIsRefusedByName) {
  const char* name = "SWITCHYARD_TEST_TUNING";
  const ScopedEnvironment variable(name);
  const auto read = [name] { return cuda::tuning_from_environment(name, 16, 4096, 16, "a test's tuning"); };
  EXPECT_EQ(read(), 0u);  // unset: the caller's default
  variable.set("");
  EXPECT_EQ(read(), 0u);
  variable.set("16");
  EXPECT_EQ(read(), 16u);
  variable.set("4096");
  EXPECT_EQ(read(), 4096u);
  expect_refused_by_name(
      variable,
      {"0", "4112", "24", "-16", "+16", " 16", "16 ", "16ns", "1e3", "0x10", "99999999999999999999999"},
      "SWITCHYARD_TEST_TUNING: expected an integer 16..4096 and a multiple of 16 (a test's tuning)",
      [&read] { read(); });
}

// The named choices share one parser too (SWITCHYARD_SYMMETRIC_PULL, _ROUTING, SWITCHYARD_NORMAL_COUNTS):
// exact spellings only, the unset value when unset or empty, and every spelling listed when refused.
TEST(CudaEnvironmentTuning, NamedChoicesAreReadExactlyAndEverythingElseIsRefusedByName) {
  enum class Pick { none, first, second, third };
  const char* name = "SWITCHYARD_TEST_CHOICE";
  const ScopedEnvironment variable(name);
  const auto read = [name] {
    return cuda::choice_from_environment(
        name, Pick::none, {{"first", Pick::first}, {"second", Pick::second}, {"third", Pick::third}},
        "a test's choice");
  };
  EXPECT_EQ(read(), Pick::none);
  variable.set("");
  EXPECT_EQ(read(), Pick::none);
  variable.set("second");
  EXPECT_EQ(read(), Pick::second);
  variable.set("third");
  EXPECT_EQ(read(), Pick::third);
  expect_refused_by_name(variable, {"First", "firs", "first ", "1", "none"},
                         "SWITCHYARD_TEST_CHOICE: expected first, second or third (a test's choice), got '",
                         [&read] { read(); });
  const auto pair = [name] {
    return cuda::choice_from_environment(name, 0, {{"on", 1}, {"off", 2}}, "two of them");
  };
  variable.set("off");
  EXPECT_EQ(pair(), 2);
  expect_refused_by_name(variable, {"no"}, "SWITCHYARD_TEST_CHOICE: expected on or off (two of them)",
                         [&pair] { pair(); });
}

// The mailbox's tags: never 0 (what new memory holds), so no post is taken for a call that made none.
TEST(CudaNormalCountReadback, PostedCountsTagsSkipZeroAndWrap) {
  EXPECT_EQ(common::next_posted_counts_tag(0), 1);
  EXPECT_EQ(common::next_posted_counts_tag(1), 2);
  EXPECT_EQ(common::next_posted_counts_tag(0x7fffffff), 1);
  EXPECT_EQ(common::next_posted_counts_tag(-5), 1);
  int32_t words[common::PostedCounts::words_for(4)] = {};
  const common::PostedCounts posted{words};
  EXPECT_EQ(posted.expert_counts() - posted.recv_tokens(), 1)
      << "copy_dispatch_counts wants them consecutive";
  EXPECT_EQ(posted.expert_counts() + 4, words + common::PostedCounts::words_for(4));
}

// Per-call tuning (CallTuning, DeepEP's per-call Config): fewer channels than the Buffer's, smaller rings
// and chunks, and a combine and a cached dispatch with their own rings, all give the reference's bits;
// and the Buffer's own tuning right after them.
struct TuningCase {
  CudaCase engine;
  CallTuning dispatch;
  CallTuning combine;
};

class CudaNormalTuningTest : public ::testing::TestWithParam<TuningCase> {};

TEST_P(CudaNormalTuningTest, TunedCallsMatchReferenceBitwise) {
  SWITCHYARD_REQUIRE_GPU();
  const TuningCase& t = GetParam();
  const CudaCase& c = t.engine;
  const uint64_t seed = seed_for(c.name);
  SCOPED_TRACE("case " + c.name + " seed=" + std::to_string(seed) + " " + c.shape.describe() + " dispatch " +
               t.dispatch.to_string() + " combine " + t.combine.to_string());
  auto data = workload::generate(c.shape, seed);
  Expected expected = compute_expected(c.shape, data, c.expert_alignment);
  const int ranks = c.shape.topology.num_ranks;
  std::vector<std::vector<std::string>> failures(ranks);
  run_ranks(ranks, [&](Group& group) {
    const int rank = group.rank();
    cudaSetDevice(device_for_rank(rank, ranks));
    cudaStream_t stream;
    cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    {
      Buffer buffer(options_for(c, rank));
      buffer.connect(group.allgather(buffer.local_handle()));
      DispatchHandle handle;
      group.barrier();
      DeviceRun tuned = run_on_device(buffer, c.shape, data[rank], expected, c.expert_alignment, stream,
                                      nullptr, &handle, t.dispatch, t.combine);
      compare_with_reference(tuned, c.shape, expected, rank, &failures[rank]);
      const int want_channels =
          t.dispatch.num_channels != 0 ? t.dispatch.num_channels : buffer.num_channels();
      if (handle.num_channels() != want_channels) {
        failures[rank].push_back("the dispatch ran with " + std::to_string(handle.num_channels()) +
                                 " channels, expected " + std::to_string(want_channels));
      }
      group.barrier();
      DeviceRun cached = run_on_device(buffer, c.shape, data[rank], expected, c.expert_alignment, stream,
                                       &handle, nullptr, t.dispatch, t.combine);
      compare_with_reference(cached, c.shape, expected, rank, &failures[rank]);
      group.barrier();
      DeviceRun untuned = run_on_device(buffer, c.shape, data[rank], expected, c.expert_alignment, stream);
      compare_with_reference(untuned, c.shape, expected, rank, &failures[rank]);
    }
    cudaStreamDestroy(stream);
  });
  for (int rank = 0; rank < ranks; ++rank) {
    for (const auto& failure : failures[rank]) ADD_FAILURE() << failure;
  }
}

// get_dispatch_layout on the device against the reference, and into the caller's device tensors
// (DispatchLayoutOutputs, switchyard.deep_ep's torch path) with the counts consecutive in one allocation or
// apart: the same bits, and the result borrows the caller's memory. 64 experts take the one-block kernel;
// 16384 (counts past one block's shared memory) the grid with its memsets.
void check_layout_paths(int ranks, int64_t tokens, int experts) {
  const CudaCase c{"R" + std::to_string(ranks) + "_layout_E" + std::to_string(experts),
                   make_shape(ranks, tokens, 512, 8, experts, DType::bf16), config_with(0, 16, 4)};
  SCOPED_TRACE(c.name);
  auto data = workload::generate(c.shape, seed_for(c.name));
  std::vector<std::vector<std::string>> failures(ranks);
  run_ranks(ranks, [&](Group& group) {
    const int rank = group.rank();
    const int device = device_for_rank(rank, ranks);
    cudaSetDevice(device);
    cudaStream_t stream;
    cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    {
      Buffer buffer(options_for(c, rank));
      buffer.connect(group.allgather(buffer.local_handle()));
      Tensor topk_idx = to_device(data[rank].topk_idx.view(), device, stream);
      const DispatchLayout own = buffer.get_dispatch_layout(topk_idx, experts, stream);
      const reference::Layout want = reference::layout(data[rank].topk_idx.view(), experts, c.shape.topology);
      const Tensor per_rank = to_host(own.num_tokens_per_rank.view(), stream);
      const Tensor per_expert = to_host(own.num_tokens_per_expert.view(), stream);
      const Tensor in_rank_host = to_host(own.is_token_in_rank.view(), stream);
      if (std::memcmp(per_rank.data(), want.num_tokens_per_rank.data(), per_rank.nbytes()) != 0 ||
          std::memcmp(per_expert.data(), want.num_tokens_per_expert.data(), per_expert.nbytes()) != 0 ||
          std::memcmp(in_rank_host.data(), want.is_token_in_rank.data(), in_rank_host.nbytes()) != 0) {
        failures[rank].push_back("the device layout differs from the reference");
      }
      const int64_t num_tokens = topk_idx.size(0);
      Tensor counts = poisoned_device(DType::i32, {ranks + 1 + experts}, device, stream);
      Tensor apart = poisoned_device(DType::i32, {ranks + 1 + experts + 80}, device, stream);
      Tensor in_rank = poisoned_device(DType::boolean, {num_tokens, ranks}, device, stream);
      for (const bool consecutive : {true, false}) {
        int32_t* words = consecutive ? counts.as<int32_t>() : apart.as<int32_t>();
        const int64_t gap = consecutive ? 0 : 40;
        DispatchLayoutOutputs out;
        out.num_tokens_per_rank = TensorView(words, DType::i32, {ranks}, Device::cuda, device);
        out.num_tokens_per_node = TensorView(words + ranks + gap, DType::i32, {1}, Device::cuda, device);
        out.num_tokens_per_expert =
            TensorView(words + ranks + 1 + 2 * gap, DType::i32, {experts}, Device::cuda, device);
        out.is_token_in_rank = in_rank.view();
        const DispatchLayout into = buffer.get_dispatch_layout(topk_idx, experts, out, stream);
        if (into.num_tokens_per_expert.data() != out.num_tokens_per_expert.data)
          failures[rank].push_back("the result does not borrow the caller's num_tokens_per_expert");
        const Tensor* pairs[][2] = {{&own.num_tokens_per_rank, &into.num_tokens_per_rank},
                                    {&own.num_tokens_per_node, &into.num_tokens_per_node},
                                    {&own.num_tokens_per_expert, &into.num_tokens_per_expert},
                                    {&own.is_token_in_rank, &into.is_token_in_rank}};
        for (const auto& pair : pairs) {
          const Tensor a = to_host(pair[0]->view(), stream);
          const Tensor b = to_host(pair[1]->view(), stream);
          if (a.nbytes() != b.nbytes() || std::memcmp(a.data(), b.data(), a.nbytes()) != 0) {
            failures[rank].push_back(std::string(consecutive ? "consecutive" : "apart") +
                                     " outputs differ from the call's own layout (" + a.view().describe() +
                                     ")");
          }
        }
      }
      buffer.synchronize(stream);
    }
    cudaStreamDestroy(stream);
  });
  for (int rank = 0; rank < ranks; ++rank) {
    for (const auto& failure : failures[rank]) ADD_FAILURE() << "rank " << rank << ": " << failure;
  }
}

TEST(CudaNormalLayout, OneBlockAndIntoCallerOutputsMatchReference) {
  SWITCHYARD_REQUIRE_GPU();
  check_layout_paths(8, 300, 64);
  check_layout_paths(2, 4096, 256);
}

TEST(CudaNormalLayout, GridPathAndIntoCallerOutputsMatchReference) {
  SWITCHYARD_REQUIRE_GPU();
  check_layout_paths(2, 300, 16384);
}

std::vector<TuningCase> tuning_cases() {
  const Config standard = config_with(Config::kAutoChannels, 128, 16);
  return {
      {{"R4_bf16_h7168_two_channels", make_shape(4, 192, 7168, 8, 64, DType::bf16), standard},
       {2, 8, 3},
       {0, 5, 2}},
      {{"R8_fp8_one_channel_ring1", make_shape(8, 64, 2048, 8, 64, DType::fp8_e4m3), standard},
       {1, 1, 1},
       {0, 2, 1}},
      {{"R2_chunk_only", make_shape(2, 300, 512, 4, 8, DType::bf16), standard}, {0, 0, 4}, {0, 0, 7}},
      {{"Small_R1_tuned", make_shape(1, 40, 256, 4, 8, DType::bf16), config_with(2, 4, 2)},
       {1, 3, 2},
       {0, 2, 1}},
  };
}

INSTANTIATE_TEST_SUITE_P(Tunings, CudaNormalTuningTest, ::testing::ValuesIn(tuning_cases()),
                         [](const ::testing::TestParamInfo<TuningCase>& info) {
                           return info.param.engine.name;
                         });

// Combine biases (DeepEP's `bias`): the sum starts at bias0 + bias1 in fp32 (an absent one is +0.0),
// then the rows in rank order, rounded once; one bias, the other alone, and both.
class CudaNormalBiasTest : public ::testing::TestWithParam<CudaCase> {};

TEST_P(CudaNormalBiasTest, CombineWithBiasesMatchesReferenceBitwise) {
  SWITCHYARD_REQUIRE_GPU();
  const CudaCase& c = GetParam();
  const uint64_t seed = seed_for(c.name);
  SCOPED_TRACE("case " + c.name + " seed=" + std::to_string(seed) + " " + c.shape.describe());
  auto data = workload::generate(c.shape, seed);
  std::vector<Expected> expected;
  for (Biases biases : {Biases::first, Biases::second, Biases::both}) {
    expected.push_back(
        compute_expected(c.shape, data, c.expert_alignment, make_biases(c.shape, seed, biases)));
  }
  const int ranks = c.shape.topology.num_ranks;
  std::vector<std::vector<std::string>> failures(ranks);
  run_ranks(ranks, [&](Group& group) {
    const int rank = group.rank();
    const int device = device_for_rank(rank, c.shape.topology.num_ranks);
    cudaSetDevice(device);
    cudaStream_t stream;
    cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    {
      Buffer buffer(options_for(c, rank));
      buffer.connect(group.allgather(buffer.local_handle()));
      for (const Expected& want : expected) {
        group.barrier();  // as in the test above: the ranks start each round trip together
        DeviceRun run = run_on_device(buffer, c.shape, data[rank], want, c.expert_alignment, stream);
        compare_with_reference(run, c.shape, want, rank, &failures[rank]);
      }
    }
    cudaStreamDestroy(stream);
  });
  for (int rank = 0; rank < ranks; ++rank) {
    for (const auto& failure : failures[rank]) ADD_FAILURE() << failure;
  }
}

// Dispatch without top-k (DeepEP's topk_idx=None): routed by the layout alone, the per-expert counts
// are what the sources' layouts claim, no ids or weights travel; combine is the plain sum.
class CudaNormalWithoutTopkTest : public ::testing::TestWithParam<CudaCase> {};

TEST_P(CudaNormalWithoutTopkTest, DispatchByLayoutAndPlainCombineMatchReferenceBitwise) {
  SWITCHYARD_REQUIRE_GPU();
  const CudaCase& c = GetParam();
  const uint64_t seed = seed_for(c.name + "/without_topk");
  SCOPED_TRACE("case " + c.name + " seed=" + std::to_string(seed) + " " + c.shape.describe());
  auto data = workload::generate(c.shape, seed);
  const Expected expected = compute_expected_without_topk(c.shape, data, c.expert_alignment);
  const int ranks = c.shape.topology.num_ranks;
  std::vector<std::vector<std::string>> failures(ranks);
  run_ranks(ranks, [&](Group& group) {
    const int rank = group.rank();
    cudaSetDevice(device_for_rank(rank, c.shape.topology.num_ranks));
    cudaStream_t stream;
    cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    {
      Buffer buffer(options_for(c, rank));
      buffer.connect(group.allgather(buffer.local_handle()));
      for (int round = 0; round < 2; ++round) {  // twice: the same bits, and the buffer left reusable
        group.barrier();
        DeviceRun run =
            run_on_device_without_topk(buffer, c.shape, data[rank], expected, c.expert_alignment, stream);
        compare_with_reference(run, c.shape, expected, rank, &failures[rank], false);
      }
    }
    cudaStreamDestroy(stream);
  });
  for (int rank = 0; rank < ranks; ++rank) {
    for (const auto& failure : failures[rank]) ADD_FAILURE() << failure;
  }
}

std::vector<CudaCase> bias_cases() {
  using workload::Routing;
  const Config standard = config_with(Config::kAutoChannels, 128, 16);
  std::vector<CudaCase> list;
  list.push_back({"R1_bf16_h7168", make_shape(1, 64, 7168, 8, 16, DType::bf16), standard});
  list.push_back({"R4_bf16_h7168", make_shape(4, 96, 7168, 8, 64, DType::bf16), standard});
  list.push_back({"R8_fp8_h2048", make_shape(8, 64, 2048, 8, 64, DType::fp8_e4m3), standard});
  list.push_back(
      {"R4_all_invalid", make_shape(4, 64, 512, 4, 16, DType::bf16, Routing::all_invalid), standard});
  list.push_back({"R3_wrap_no_weights", make_shape(3, 100, 256, 4, 12, DType::bf16, Routing::random, false),
                  config_with(2, 3, 1)});
  CudaCase zero{"R2_zero_tokens_on_rank1", make_shape(2, 0, 512, 4, 8, DType::bf16), standard};
  zero.shape.tokens_per_rank_list = {40, 0};
  list.push_back(zero);
  // Small enough for compute-sanitizer (scripts/gpu-check.sh runs the Small_ cases under it).
  list.push_back({"Small_R2_bf16", make_shape(2, 40, 256, 4, 8, DType::bf16), config_with(2, 4, 2)});
  // The ring paths with rings that hold a channel's every token (20 a channel here), so that no sender waits
  // for its receiver to free slots: compute-sanitizer's racecheck case of the rings. Under racecheck the
  // small-ring cases above stop at random (a receiver waits for rows its sender never sends) and this one
  // does not (bench/NOTES.md, sessions 42-46): the tool does not keep a channel's sender and receiver blocks
  // running together, which a ring that fills needs. scripts/gpu-check.sh runs racecheck on this one instead.
  list.push_back(
      {"Small_R1_fp8_wide_rings", make_shape(1, 40, 256, 4, 8, DType::fp8_e4m3), config_with(2, 64, 2)});
  return list;
}

// DispatchArgs::layout is borrowed for the dispatch only: the caller may overwrite and free it once
// dispatch has returned, and the combine and a cached dispatch with the handle still route as the
// dispatch did (the handle owns a stream-ordered copy of is_token_in_rank).
class CudaNormalReleasedLayoutTest : public ::testing::TestWithParam<CudaCase> {};

TEST_P(CudaNormalReleasedLayoutTest, CombineAndCachedDispatchAfterTheLayoutWasFreedMatchReferenceBitwise) {
  SWITCHYARD_REQUIRE_GPU();
  const CudaCase& c = GetParam();
  const uint64_t seed = seed_for(c.name + "/released_layout");
  SCOPED_TRACE("case " + c.name + " seed=" + std::to_string(seed) + " " + c.shape.describe());
  auto data = workload::generate(c.shape, seed);
  const Expected with_topk = compute_expected(c.shape, data, c.expert_alignment);
  const Expected without_topk = compute_expected_without_topk(c.shape, data, c.expert_alignment);
  const int ranks = c.shape.topology.num_ranks;
  std::vector<std::vector<std::string>> failures(ranks);
  run_ranks(ranks, [&](Group& group) {
    const int rank = group.rank();
    cudaSetDevice(device_for_rank(rank, c.shape.topology.num_ranks));
    cudaStream_t stream;
    cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    {
      Buffer buffer(options_for(c, rank));
      buffer.connect(group.allgather(buffer.local_handle()));
      for (const bool topk : {true, false}) {
        const Expected& expected = topk ? with_topk : without_topk;
        group.barrier();  // as in the tests above: the ranks start each round trip together
        const ReleasedLayoutDeviceRuns runs = run_on_device_releasing_layout(
            buffer, c.shape, data[rank], expected, c.expert_alignment, stream, topk);
        compare_with_reference(runs.first, c.shape, expected, rank, &failures[rank], topk);
        compare_with_reference(runs.cached, c.shape, expected, rank, &failures[rank], topk);
      }
    }
    cudaStreamDestroy(stream);
  });
  for (int rank = 0; rank < ranks; ++rank) {
    for (const auto& failure : failures[rank]) ADD_FAILURE() << failure;
  }
}

INSTANTIATE_TEST_SUITE_P(Biases, CudaNormalBiasTest, ::testing::ValuesIn(bias_cases()), case_name);
// The bias cases' shapes serve here too: one to eight ranks, fp8, wrap, a rank without tokens.
INSTANTIATE_TEST_SUITE_P(WithoutTopk, CudaNormalWithoutTopkTest, ::testing::ValuesIn(bias_cases()),
                         case_name);
INSTANTIATE_TEST_SUITE_P(ReleasedLayout, CudaNormalReleasedLayoutTest, ::testing::ValuesIn(bias_cases()),
                         case_name);

// Worst-case mode has no host synchronisation, so dispatch and combine can be captured in CUDA
// graphs; replays with new inputs (new routing too) must match the reference.
TEST(CudaNormalEngineGraph, WorstCaseDispatchAndCombineReplayFromCudaGraphs) {
  SWITCHYARD_REQUIRE_GPU();
  CudaCase c{"graph", make_shape(4, 96, 1024, 8, 32, DType::bf16), config_with(Config::kAutoChannels, 64, 8)};
  const int ranks = c.shape.topology.num_ranks;
  const int64_t worst = c.shape.tokens_per_rank * ranks;
  std::vector<std::vector<std::string>> failures(ranks);
  std::vector<std::vector<workload::RankData>> rounds;
  std::vector<Expected> expected;
  for (int round = 0; round < 3; ++round) {
    rounds.push_back(workload::generate(c.shape, seed_for("graph") + round));
    expected.push_back(compute_expected(c.shape, rounds.back(), 1));
  }
  run_ranks(ranks, [&](Group& group) {
    const int rank = group.rank();
    const int device = device_for_rank(rank, c.shape.topology.num_ranks);
    cudaSetDevice(device);
    cudaStream_t stream;
    cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    {
      Buffer buffer(options_for(c, rank));
      buffer.connect(group.allgather(buffer.local_handle()));
      const workload::RankData& first = rounds[0][rank];
      Tensor x = to_device(first.x, device, stream), topk_idx = to_device(first.topk_idx, device, stream);
      Tensor topk_weights = to_device(first.topk_weights, device, stream);
      Tensor recv_x = poisoned_device(DType::bf16, {worst, c.shape.hidden}, device, stream);
      Tensor recv_idx = poisoned_device(DType::i64, {worst, c.shape.topk}, device, stream);
      Tensor recv_weights = poisoned_device(DType::f32, {worst, c.shape.topk}, device, stream);
      Tensor y = poisoned_device(DType::bf16, {worst, c.shape.hidden}, device, stream);
      Tensor combined = poisoned_device(DType::bf16, {x.size(0), c.shape.hidden}, device, stream);
      Tensor combined_weights = poisoned_device(DType::f32, {x.size(0), c.shape.topk}, device, stream);

      DispatchArgs args;
      args.x = x;
      args.topk_idx = topk_idx;
      args.topk_weights = topk_weights;
      args.num_experts = c.shape.num_experts;
      args.num_worst_tokens = worst;
      args.out_recv_x = recv_x;
      args.out_recv_topk_idx = recv_idx;
      args.out_recv_topk_weights = recv_weights;
      args.stream = stream;
      cudaGraph_t dispatch_graph, combine_graph;
      cudaGraphExec_t dispatch_exec, combine_exec;
      // No rank does other CUDA work while any rank captures (a device-wide sync elsewhere would
      // invalidate a capture).
      check_cuda(cudaStreamSynchronize(stream), "sync before capture");
      group.barrier();
      check_cuda(cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed), "begin dispatch capture");
      DispatchResult result = buffer.dispatch(args);
      check_cuda(cudaStreamEndCapture(stream, &dispatch_graph), "end dispatch capture");
      check_cuda(cudaGraphInstantiate(&dispatch_exec, dispatch_graph, 0), "instantiate dispatch graph");
      CombineArgs combine_args;
      combine_args.x = y;
      combine_args.topk_weights = recv_weights;
      combine_args.handle = &result.handle;
      combine_args.out_combined_x = combined;
      combine_args.out_combined_topk_weights = combined_weights;
      combine_args.stream = stream;
      check_cuda(cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed), "begin combine capture");
      CombineResult combine_result = buffer.combine(combine_args);
      check_cuda(cudaStreamEndCapture(stream, &combine_graph), "end combine capture");
      check_cuda(cudaGraphInstantiate(&combine_exec, combine_graph, 0), "instantiate combine graph");
      group.barrier();

      for (int round = 0; round < 3; ++round) {
        const workload::RankData& data = rounds[round][rank];
        upload(x, data.x, stream);
        upload(topk_idx, data.topk_idx, stream);
        upload(topk_weights, data.topk_weights, stream);
        group.barrier();
        check_cuda(cudaGraphLaunch(dispatch_exec, stream), "launch dispatch graph");
        buffer.synchronize(stream);
        const auto& want = expected[round].dispatched[rank];
        const int64_t received = static_cast<int64_t>(want.recv_src_rank.size());
        Tensor host_x = to_host(recv_x, stream), host_idx = to_host(recv_idx, stream),
               host_weights = to_host(recv_weights, stream);
        std::string why;
        if (!workload::bitwise_equal(host_x, want.recv_x, &why, received))
          failures[rank].push_back("recv_x: " + why);
        if (!workload::bitwise_equal(host_idx, want.recv_topk_idx, &why, received))
          failures[rank].push_back("recv_topk_idx: " + why);
        for (int64_t row = received; row < worst; ++row) {
          for (int k = 0; k < c.shape.topk; ++k) {
            if (host_idx.as<int64_t>()[row * c.shape.topk + k] != -1 ||
                host_weights.as<float>()[row * c.shape.topk + k] != 0.0f) {
              failures[rank].push_back("padding row " + std::to_string(row) + " is not (-1, 0)");
              row = worst;
              break;
            }
          }
        }
        Tensor host_y = workload::synthetic_expert(host_x, TensorView(), rank);
        upload(y, host_y, stream);
        group.barrier();
        check_cuda(cudaGraphLaunch(combine_exec, stream), "launch combine graph");
        buffer.synchronize(stream);
        if (!workload::bitwise_equal(to_host(combined, stream), expected[round].combined[rank].combined_x,
                                     &why)) {
          failures[rank].push_back("round " + std::to_string(round) + " combined_x: " + why);
        }
        if (!workload::bitwise_equal(to_host(combined_weights, stream),
                                     expected[round].combined[rank].combined_topk_weights, &why)) {
          failures[rank].push_back("round " + std::to_string(round) + " combined_topk_weights: " + why);
        }
      }
      cudaGraphExecDestroy(dispatch_exec);
      cudaGraphExecDestroy(combine_exec);
      cudaGraphDestroy(dispatch_graph);
      cudaGraphDestroy(combine_graph);
    }
    cudaStreamDestroy(stream);
  });
  for (int rank = 0; rank < ranks; ++rank) {
    for (const auto& failure : failures[rank]) ADD_FAILURE() << "rank " << rank << ": " << failure;
  }
}

// One rank never calls dispatch: the other gets a TimeoutError naming itself and the barrier, within
// about the configured timeout, and nothing hangs. With the counts copied back and with them polled (a
// notify that gives up posts so; the poll never waits for a post that cannot come).
TEST(CudaNormalEngineErrors, MissingRankTimesOutWithRankAndRole) {
  SWITCHYARD_REQUIRE_GPU();
  CudaCase c{"timeout", make_shape(2, 32, 512, 4, 8, DType::bf16), config_with(2, 16, 4)};
  c.config.timeout_seconds = 1.0;
  auto data = workload::generate(c.shape, seed_for("timeout"));
  const ScopedEnvironment readback_variable("SWITCHYARD_NORMAL_COUNTS");
  for (const char* readback : {"copy", "poll"}) {
    SCOPED_TRACE(std::string("SWITCHYARD_NORMAL_COUNTS=") + readback);
    readback_variable.set(readback);
    std::promise<void> rank0_done;
    std::shared_future<void> released = rank0_done.get_future().share();
    std::string message, later;
    double seconds = 0;
    run_ranks(2, [&](Group& group) {
      const int rank = group.rank();
      const int device = device_for_rank(rank, c.shape.topology.num_ranks);
      cudaSetDevice(device);
      Buffer buffer(options_for(c, rank));
      buffer.connect(group.allgather(buffer.local_handle()));
      if (rank == 1) {
        released.wait();
        return;
      }
      // Plain (not stream-ordered) tensors: this test has no stream of its own.
      Tensor x = to_device(data[0].x, device, nullptr),
             topk_idx = to_device(data[0].topk_idx, device, nullptr);
      DispatchArgs args;
      args.x = x;
      args.topk_idx = topk_idx;
      args.num_experts = c.shape.num_experts;
      auto start = std::chrono::steady_clock::now();
      try {
        buffer.dispatch(args);
      } catch (const TimeoutError& error) {
        message = error.what();
      } catch (const std::exception& error) {
        message = std::string("not a TimeoutError: ") + error.what();
      }
      seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      // The rank's kernels gave up for good: a later call is refused at once, saying why, instead of
      // returning having done nothing. (Any exception is caught: one leaving this thread would leave rank 1
      // waiting for ever.)
      try {
        buffer.dispatch(args);
        later = "returned";
      } catch (const Error& error) {
        later = error.what();
      } catch (const std::exception& error) {
        later = std::string("not a switchyard::Error: ") + error.what();
      }
      rank0_done.set_value();
    });
    EXPECT_NE(message.find("rank 0"), std::string::npos) << message;
    EXPECT_NE(message.find("barrier"), std::string::npos) << message;
    EXPECT_NE(message.find("rank 1"), std::string::npos) << message;
    EXPECT_LT(seconds, 10.0);
    EXPECT_NE(later.find("dispatch: this buffer timed out earlier"), std::string::npos) << later;
  }
}

// A fresh dispatch without num_worst_tokens waits for its sizes on the host: under capture it is refused
// clearly, naming the argument, before anything is captured, and the buffer keeps working. (Before session
// 32 the copy readback failed inside cudaStreamSynchronize instead; a poll would have waited for ever.)
TEST(CudaNormalEngineGraph, HostSynchronisingDispatchCaptureIsRefusedClearly) {
  SWITCHYARD_REQUIRE_GPU();
  CudaCase c{"capture_refusal", make_shape(2, 32, 256, 2, 8, DType::bf16), config_with(2, 16, 4)};
  const uint64_t seed = seed_for("cuda/normal/capture_refusal");
  auto data = workload::generate(c.shape, seed);
  Expected expected = compute_expected(c.shape, data, 1);
  const ScopedEnvironment readback_variable("SWITCHYARD_NORMAL_COUNTS");
  for (const char* readback : {"copy", "poll"}) {
    SCOPED_TRACE(std::string("SWITCHYARD_NORMAL_COUNTS=") + readback);
    readback_variable.set(readback);
    std::vector<std::vector<std::string>> failures(2);
    run_ranks(2, [&](Group& group) {
      const int rank = group.rank();
      const int device = device_for_rank(rank, c.shape.topology.num_ranks);
      cudaSetDevice(device);
      cudaStream_t stream;
      cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
      {
        Buffer buffer(options_for(c, rank));
        buffer.connect(group.allgather(buffer.local_handle()));
        Tensor x = to_device(data[rank].x, device, stream);
        Tensor topk_idx = to_device(data[rank].topk_idx, device, stream);
        DispatchArgs args;
        args.x = x;
        args.topk_idx = topk_idx;
        args.num_experts = c.shape.num_experts;
        args.stream = stream;
        check_cuda(cudaStreamSynchronize(stream), "sync before capture");
        group.barrier();
        check_cuda(cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed), "begin dispatch capture");
        std::string refusal;
        try {
          buffer.dispatch(args);
          refusal = "returned";
        } catch (const Unsupported& error) {
          refusal = error.what();
        } catch (const std::exception& error) {
          refusal = std::string("not Unsupported: ") + error.what();
        }
        cudaGraph_t graph = nullptr;
        check_cuda(cudaStreamEndCapture(stream, &graph), "end dispatch capture");
        if (graph) cudaGraphDestroy(graph);
        if (refusal.find("num_worst_tokens") == std::string::npos) {
          failures[rank].push_back(
              "expected a host-synchronising dispatch under capture to be refused naming "
              "num_worst_tokens, got '" +
              refusal + "'");
        }
        group.barrier();
        DeviceRun after = run_on_device(buffer, c.shape, data[rank], expected, 1, stream);
        compare_with_reference(after, c.shape, expected, rank, &failures[rank]);
      }
      cudaStreamDestroy(stream);
    });
    for (int rank = 0; rank < 2; ++rank) {
      for (const auto& failure : failures[rank]) ADD_FAILURE() << "rank " << rank << ": " << failure;
    }
  }
}

// Found by the notify while counting: the call raises InvalidArgument naming topk_idx and writes nothing,
// with the counts copied back and with them polled.
TEST(CudaNormalEngineErrors, ExpertIdOutOfRangeOnDeviceIsInvalidArgumentAndWritesNothing) {
  SWITCHYARD_REQUIRE_GPU();
  CudaCase c{"bad_expert", make_shape(1, 16, 256, 2, 4, DType::bf16), config_with(2, 16, 4)};
  auto data = workload::generate(c.shape, seed_for("bad_expert"));
  data[0].topk_idx.as<int64_t>()[5] = 4;     // == num_experts
  const int device = device_for_rank(0, 1);  // device 0 in every mode, this thread's current device
  const ScopedEnvironment readback_variable("SWITCHYARD_NORMAL_COUNTS");
  for (const char* readback : {"copy", "poll"}) {
    SCOPED_TRACE(std::string("SWITCHYARD_NORMAL_COUNTS=") + readback);
    readback_variable.set(readback);
    Buffer buffer(options_for(c, 0));
    buffer.connect({buffer.local_handle()});
    cudaStream_t stream = nullptr;  // legacy stream, plain allocations: one rank, nothing to deadlock with
    Tensor x = to_device(data[0].x, device, stream), topk_idx = to_device(data[0].topk_idx, device, stream);
    Tensor out = poisoned_device(DType::bf16, {64, 256}, device, stream);
    DispatchArgs args;
    args.x = x;
    args.topk_idx = topk_idx;
    args.num_experts = 4;
    args.out_recv_x = out;
    try {
      buffer.dispatch(args);
      ADD_FAILURE() << "expected InvalidArgument";
    } catch (const InvalidArgument& error) {
      EXPECT_NE(std::string(error.what()).find("topk_idx"), std::string::npos) << error.what();
    }
    Tensor host = to_host(out, stream);
    for (size_t i = 0; i < host.nbytes(); ++i) {
      ASSERT_EQ(host.as<uint8_t>()[i], 0xA5) << "output byte " << i << " was written";
    }
  }
}

// Runs an in-place dispatch on three ranks in which rank 0's call is made to fail after the count exchange
// (`spoil` changes its arguments, given the rows it should receive, its device and stream, and returns any
// tensor it made for them, which lives through the call), then a clean round trip on every rank. Returns
// rank 0's InvalidArgument message; the other ranks' calls must complete without an error, the whole
// within 20 s (a stranded peer waits for the 30 s timeout), and the round trip after must be bitwise right
// everywhere.
// How the failing dispatch runs: in place or through the rings, its counts polled (the default) or copied.
struct FailedDispatchPath {
  bool heap_inputs;
  bool copy_readback;
};

template <typename Spoil>
std::string fail_rank0_after_the_counts(const std::string& name, FailedDispatchPath path, Spoil&& spoil) {
  const bool heap_inputs = path.heap_inputs;
  const ScopedEnvironment readback("SWITCHYARD_NORMAL_COUNTS");
  if (path.copy_readback) readback.set("copy");
  CudaCase c{name, make_shape(3, 24, 256, 4, 12, DType::bf16), config_with(2, 16, 4)};
  c.config.timeout_seconds = 30;
  c.heap_inputs = heap_inputs;
  auto data = workload::generate(c.shape, seed_for(name));
  Expected expected = compute_expected(c.shape, data, 1);
  const int ranks = c.shape.topology.num_ranks;
  std::vector<std::string> messages(ranks);
  std::vector<std::vector<std::string>> failures(ranks);
  const auto start = std::chrono::steady_clock::now();
  run_ranks(ranks, [&](Group& group) {
    const int rank = group.rank();
    const int device = device_for_rank(rank, ranks);
    check_cuda(cudaSetDevice(device), "cudaSetDevice");
    cudaStream_t stream;
    check_cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
    {
      Buffer buffer(options_for(c, rank));
      buffer.connect(group.allgather(buffer.local_handle()));
      const int64_t rows = static_cast<int64_t>(expected.dispatched[rank].recv_src_rank.size());
      Tensor x = to_device(data[rank].x, device, stream);
      Tensor topk_idx = to_device(data[rank].topk_idx, device, stream);
      Tensor topk_weights = to_device(data[rank].topk_weights, device, stream);
      DispatchArgs args;
      args.x = x;
      if (heap_inputs) {
        const NormalInputViews views = buffer.normal_input(data[rank].x.size(0), c.shape.hidden, DType::bf16);
        check_cuda(cudaMemcpyAsync(views.x.data, x.data(), x.nbytes(), cudaMemcpyDeviceToDevice, stream),
                   "cudaMemcpyAsync (x into the heap input)");
        args.x = views.x;
      }
      args.topk_idx = topk_idx;
      args.topk_weights = topk_weights;
      args.num_experts = c.shape.num_experts;
      args.stream = stream;
      // The peers' outputs are the library's: with a bad id on rank 0 they receive other rows than `rows`.
      const Tensor spoilt = rank == 0 ? spoil(args, rows, device, stream) : Tensor();
      group.barrier();
      expect_refused_on_one_rank(
          rank, 0,
          [&] {
            buffer.dispatch(args);
            buffer.synchronize(stream);
          },
          &messages[rank], &failures[rank]);
      group.barrier();
      expect_round_trip_after_the_failure(
          [&] {
            DeviceRun after = run_on_device(buffer, c.shape, data[rank], expected, 1, stream, nullptr,
                                            nullptr, {}, {}, false, heap_inputs);
            compare_with_reference(after, c.shape, expected, rank, &failures[rank]);
          },
          &failures[rank]);
    }
    cudaStreamDestroy(stream);
  });
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 20.0) << "a peer waited for the timeout";
  for (int rank = 0; rank < ranks; ++rank) {
    for (const auto& failure : failures[rank]) ADD_FAILURE() << "rank " << rank << ": " << failure;
  }
  return messages[0];
}

// A dispatch whose host fails after the count exchange (here rank 0's out_recv_x has a row too many) still
// plays its part (NormalEngine::stand_in_after_the_counts): in place, a gather that pulls nothing but holds
// the closing barrier (GatherLaunch::withdrawn); through the rings, the whole dispatch into outputs of its
// own. Rank 0 raises the InvalidArgument naming out_recv_x, every other rank's call completes without
// waiting for the timeout, and the next round trip is bitwise right on every rank. With the counts polled
// or copied back (SWITCHYARD_NORMAL_COUNTS; copied, the notify's -1 rows tell whether its exchange passed).
class CudaNormalFailedDispatch : public ::testing::TestWithParam<FailedDispatchPath> {};

TEST_P(CudaNormalFailedDispatch, WhoseOutputsFailAfterTheCountsLetsItsPeersFinish) {
  SWITCHYARD_REQUIRE_GPU();
  const std::string message = fail_rank0_after_the_counts(
      "withdrawn_gather", GetParam(), [](DispatchArgs& args, int64_t rows, int device, cudaStream_t stream) {
        Tensor recv_x = poisoned_device(DType::bf16, {rows + 1, args.x.shape[1]}, device, stream);
        args.out_recv_x = recv_x;
        return recv_x;
      });
  EXPECT_NE(message.find("out_recv_x: expected"), std::string::npos) << message;
}

// The same when the bad input is found on the device: rank 0's topk_idx (device memory, which the host does
// not read) names an expert past the last. Its notify counts the slot as -1 and records the id; its host
// raises it after the exchange, and rank 0 stands in as above. Before session 36 the peers waited for the
// timeout.
TEST_P(CudaNormalFailedDispatch, WithAnExpertIdFoundBadOnTheDeviceLetsItsPeersFinish) {
  SWITCHYARD_REQUIRE_GPU();
  const std::string message = fail_rank0_after_the_counts(
      "bad_id_on_device", GetParam(), [](DispatchArgs& args, int64_t, int, cudaStream_t stream) {
        const int64_t bad = args.num_experts + 5;
        check_cuda(cudaMemcpyAsync(args.topk_idx.data, &bad, sizeof(bad), cudaMemcpyHostToDevice, stream),
                   "cudaMemcpyAsync (a bad expert id)");
        check_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
        return Tensor();
      });
  EXPECT_NE(message.find("topk_idx: expected expert ids in [-1, 12), got 17"), std::string::npos) << message;
}

INSTANTIATE_TEST_SUITE_P(InPlaceAndRings, CudaNormalFailedDispatch,
                         ::testing::Values(FailedDispatchPath{true, false}, FailedDispatchPath{false, false},
                                           FailedDispatchPath{true, true}, FailedDispatchPath{false, true}),
                         [](const ::testing::TestParamInfo<FailedDispatchPath>& info) {
                           return std::string(info.param.heap_inputs ? "in_place" : "rings") +
                                  (info.param.copy_readback ? "_counts_copied" : "_counts_polled");
                         });

// A worst-case dispatch whose num_worst_tokens is below the rows the rank receives is refused (found on the
// device; nothing written). Peers would wait for such a rank, so it stops the rank's kernels for good: the
// next call is refused at once with the same type of error, quoting the first, instead of returning having
// done nothing (as it did before session 31).
TEST(CudaNormalEngineErrors, ACallAfterAFailureThatStoppedTheKernelsIsRefusedQuotingIt) {
  SWITCHYARD_REQUIRE_GPU();
  CudaCase c{"worst_too_small", make_shape(1, 16, 256, 2, 4, DType::bf16), config_with(2, 16, 4)};
  auto data = workload::generate(c.shape, seed_for("worst_too_small"));
  const int device = device_for_rank(0, 1);  // device 0 in every mode, this thread's current device
  Buffer buffer(options_for(c, 0));
  buffer.connect({buffer.local_handle()});
  cudaStream_t stream = nullptr;  // legacy stream, plain allocations: one rank, nothing to deadlock with
  Tensor x = to_device(data[0].x, device, stream), topk_idx = to_device(data[0].topk_idx, device, stream);
  DispatchArgs args;
  args.x = x;
  args.topk_idx = topk_idx;
  args.num_experts = 4;
  args.num_worst_tokens = 1;
  const std::string first = testing::invalid_argument_message([&] {
    buffer.dispatch(args);
    buffer.synchronize();
  });
  const std::string later = testing::invalid_argument_message([&] { buffer.dispatch(args); });
  EXPECT_NE(first.find("num_worst_tokens: expected at least"), std::string::npos) << first;
  EXPECT_NE(later.find("refused: this Buffer's kernels stopped for good"), std::string::npos) << later;
  EXPECT_NE(later.find(first), std::string::npos) << later;
}

// Rank 0 makes a cached dispatch while the others combine, with the same handle; or every rank combines,
// rank 0 on the handle of an earlier dispatch of the same routing (alike in every shape). The opening
// barrier compares the calls' stamps (NormalHeapLayout::call_stamp_word, with the handle's routing epoch), so
// every rank refuses with an InvalidArgument at synchronize, before the timeout, writing neither recv_x nor
// combined_x. Ordinary inputs and heap-resident ones (whose ring-free paths would otherwise return rows
// nobody asked for). The refusal ends with the refused call: the next round trip, alike on every rank, is
// bitwise right (the abort is this call's only: record_call_mismatch).
TEST(CudaNormalEngineErrors, CallsThatDifferAcrossRanksAreRefusedOnEveryRank) {
  SWITCHYARD_REQUIRE_GPU();
  for (const bool heap_inputs : {false, true})
    for (const bool other_handle : {false, true}) {
      SCOPED_TRACE(
          std::string(heap_inputs ? "heap inputs" : "ordinary inputs") +
          (other_handle ? ", combines on different handles" : ", a cached dispatch beside combines"));
      CudaCase c{"mismatch", make_shape(3, 24, 256, 4, 12, DType::bf16), config_with(2, 16, 4)};
      c.config.timeout_seconds = 30;
      c.heap_inputs = heap_inputs;
      const uint64_t seed = seed_for("normal_mismatch");
      auto data = workload::generate(c.shape, seed);
      Expected expected = compute_expected(c.shape, data, 1);
      const int ranks = c.shape.topology.num_ranks;
      std::vector<std::string> messages(ranks);
      std::vector<char> untouched(ranks, 0);
      std::vector<std::vector<std::string>> failures(ranks);
      const auto start = std::chrono::steady_clock::now();
      run_ranks(ranks, [&](Group& group) {
        const int rank = group.rank();
        const int device = device_for_rank(rank, ranks);
        check_cuda(cudaSetDevice(device), "cudaSetDevice");
        cudaStream_t stream;
        check_cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
        {
          Buffer buffer(options_for(c, rank));
          buffer.connect(group.allgather(buffer.local_handle()));
          DispatchHandle earlier, handle;
          run_on_device(buffer, c.shape, data[rank], expected, 1, stream, nullptr, &earlier, {}, {}, false,
                        heap_inputs);
          run_on_device(buffer, c.shape, data[rank], expected, 1, stream, nullptr, &handle, {}, {}, false,
                        heap_inputs);
          if (other_handle && rank == 0) handle = earlier;
          const int64_t rows = static_cast<int64_t>(expected.dispatched[rank].recv_src_rank.size());
          Tensor x = to_device(data[rank].x, device, stream);
          Tensor y = poisoned_device(DType::bf16, {rows, c.shape.hidden}, device, stream);
          DispatchArgs cached;
          cached.x = x;
          CombineArgs combine;
          combine.x = y;
          if (heap_inputs) {
            cached.x = buffer.normal_input(data[rank].x.size(0), c.shape.hidden, DType::bf16).x;
            combine.x = buffer.normal_combine_input(handle, c.shape.hidden).x;
          }
          cached.cached_handle = &handle;
          cached.stream = stream;
          Tensor recv_x = poisoned_device(DType::bf16, {rows, c.shape.hidden}, device, stream);
          cached.out_recv_x = recv_x;
          combine.handle = &handle;
          combine.stream = stream;
          Tensor combined_x =
              poisoned_device(DType::bf16, {data[rank].x.size(0), c.shape.hidden}, device, stream);
          combine.out_combined_x = combined_x;
          group.barrier();
          messages[rank] = invalid_argument_message([&] {
            if (rank == 0 && !other_handle) {
              buffer.dispatch(cached);
            } else {
              buffer.combine(combine);
            }
            buffer.synchronize(stream);
          });
          untouched[rank] = expert_major::all_poison_on_device(recv_x, stream) &&
                            expert_major::all_poison_on_device(combined_x, stream);
          group.barrier();
          try {
            DeviceRun after = run_on_device(buffer, c.shape, data[rank], expected, 1, stream, nullptr,
                                            nullptr, {}, {}, false, heap_inputs);
            compare_with_reference(after, c.shape, expected, rank, &failures[rank]);
          } catch (const std::exception& error) {
            failures[rank].push_back(std::string("the round trip after the refusal threw: ") + error.what());
          }
        }
        cudaStreamDestroy(stream);
      });
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      EXPECT_LT(seconds, 20.0) << "the refusal waited for a timeout";
      for (int rank = 0; rank < ranks; ++rank) {
        SCOPED_TRACE("rank " + std::to_string(rank) + ": " + messages[rank]);
        EXPECT_NE(messages[rank].find("expected every rank to call with the same shape"), std::string::npos);
        EXPECT_TRUE(untouched[rank]) << "recv_x or combined_x was written";
        for (const auto& failure : failures[rank]) ADD_FAILURE() << "after the refusal: " << failure;
      }
    }
}

}  // namespace
}  // namespace switchyard::testing
