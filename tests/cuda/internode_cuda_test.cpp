// The CUDA hierarchical `normal` engine (ranks_per_node < num_ranks) against the reference for the
// same topology, bit for bit: nodes x ranks as threads of this process on the GPUs
// SWITCHYARD_TEST_DEVICES picks (cuda/rank_device.hpp; default: all on GPU 0), each rank with its
// own stream, RDMA over the loopback device transport with its delays and reordering off and on.
// Skipped (reported as skipped) where no GPU is present.
//
// NOTES: no case here can run under compute-sanitizer: every case has at least two ranks that
// spin-wait on each other, and the sanitizer serialises kernels.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <exception>
#include <functional>
#include <future>
#include <ostream>
#include <sstream>

#include "cuda/cuda_round_trip.hpp"
#include "cuda/device_tensors.hpp"
#include "cuda/expert_major_round_trip.hpp"
#include "cuda/failed_dispatch.hpp"
#include "cuda/rank_device.hpp"
#include "cuda/released_layout_round_trip.hpp"
#include "support/loopback_delays.hpp"
#include "support/normal_round_trip.hpp"
#include "support/refusal.hpp"
#include "support/test_seed.hpp"
#include "switchyard/errors.hpp"
#include "switchyard/group.hpp"

namespace switchyard::testing {
namespace {

using workload::Routing;
using workload::Shape;

constexpr DType bf16 = DType::bf16;
constexpr DType fp8 = DType::fp8_e4m3;
constexpr double kTestTimeoutSeconds = 20.0;

struct InternodeCase {
  std::string name;
  Shape shape;
  Config config;
  int expert_alignment = 1;
  bool delays = false;
  // fp8: the round trips of the first test take their scales column-major
  // (DispatchArgs::x_scales_column_major).
  bool scales_column_major = false;
};

void PrintTo(const InternodeCase& c, std::ostream* out) {
  *out << c.name << " (" << c.shape.describe() << ")";
}
std::string case_name(const ::testing::TestParamInfo<InternodeCase>& info) {
  return info.param.name;
}

Shape make_shape(int nodes, int ranks_per_node, int64_t tokens, int hidden, int topk, int experts_per_rank,
                 DType dtype, bool with_weights = true, Routing routing = Routing::random) {
  Shape shape;
  shape.topology = Topology{nodes * ranks_per_node, ranks_per_node};
  shape.tokens_per_rank = tokens;
  shape.hidden = hidden;
  shape.topk = topk;
  shape.num_experts = experts_per_rank * nodes * ranks_per_node;
  shape.dtype = dtype;
  shape.with_weights = with_weights;
  shape.routing = routing;
  return shape;
}

Config ring_config(int num_channels, int ring_slots, int chunk_tokens) {
  Config config;
  config.num_channels = num_channels;
  config.ring_slots = ring_slots;
  config.chunk_tokens = chunk_tokens;
  config.timeout_seconds = kTestTimeoutSeconds;
  return config;
}

// Nodes x ranks of 2x1, 2x2, 2x4, 3x2 and 4x2; most with every ring (intranode and RDMA) smaller
// than the traffic through it, so every stage wraps under flow control. Each with delays off and on.
std::vector<InternodeCase> cases() {
  const Config defaults =
      ring_config(Config::kAutoChannels, Config::kDefaultRingSlots, Config::kDefaultChunkTokens);
  std::vector<InternodeCase> base = {
      // Small enough to read a failure by hand.
      {"Small_R2_n2x1_bf16", make_shape(2, 1, 40, 256, 2, 2, bf16), ring_config(2, 4, 2)},
      {"n2x1_bf16_wrap", make_shape(2, 1, 96, 256, 2, 2, bf16), ring_config(2, 3, 2)},
      {"n2x2_fp8_wrap", make_shape(2, 2, 80, 256, 4, 4, fp8), ring_config(2, 4, 2)},
      {"n2x4_bf16_ring1", make_shape(2, 4, 24, 128, 8, 4, bf16), ring_config(2, 1, 1)},
      // The soak's case 0x1dc2e0bdfaf608d0: 8 notify records of 9 local experts did not fit one channel's
      // one-slot send buffers, where notify used to stage them; now they have a region of their own.
      {"n2x4_bf16_one_slot_one_channel_9_experts",
       make_shape(2, 4, 8, 128, 4, 9, bf16, true, Routing::skewed), ring_config(1, 1, 1)},
      {"n2x4_fp8_alignment_4", make_shape(2, 4, 64, 256, 6, 2, fp8), ring_config(3, 5, 3), 4},
      {"n2x2_fp8_column_major_scales", make_shape(2, 2, 48, 384, 4, 4, fp8), ring_config(2, 4, 2), 1, false,
       true},
      {"n2x4_bf16_h7168_defaults", make_shape(2, 4, 256, 7168, 8, 4, bf16), defaults},
      {"n2x4_fp8_h7168_defaults", make_shape(2, 4, 192, 7168, 8, 4, fp8), defaults},
      {"n3x2_bf16_skewed", make_shape(3, 2, 72, 128, 4, 2, bf16, true, Routing::skewed),
       ring_config(2, 3, 2)},
      {"n3x2_fp8_k9_no_weights", make_shape(3, 2, 40, 128, 9, 3, fp8, false), ring_config(1, 2, 1)},
      {"n4x2_bf16_wrap", make_shape(4, 2, 48, 256, 8, 2, bf16), ring_config(2, 4, 3)},
      {"n4x2_one_expert", make_shape(4, 2, 40, 128, 3, 2, bf16, true, Routing::one_expert),
       ring_config(2, 2, 1)},
      {"n2x2_all_invalid", make_shape(2, 2, 32, 128, 4, 2, bf16, true, Routing::all_invalid),
       ring_config(2, 2, 1)},
      {"n2x2_zero_tokens", make_shape(2, 2, 0, 128, 4, 2, fp8), ring_config(2, 2, 1)},
      {"n2x2_more_channels_than_tokens", make_shape(2, 2, 3, 128, 2, 2, bf16), ring_config(6, 2, 1)},
      {"n2x2_k1_h8192", make_shape(2, 2, 48, 8192, 1, 2, bf16), ring_config(2, 8, 4)},
      // The combine forwarders pipeline rounds of 6 tokens here (half the ring's slack), wrapping.
      {"n2x2_bf16_pipelined_rounds", make_shape(2, 2, 300, 512, 6, 2, bf16), ring_config(2, 16, 4)},
      // Groups of two warps: the merging warp also puts, one reducer.
      {"n6x1_bf16_groups_of_two_warps", make_shape(6, 1, 40, 256, 4, 2, bf16), ring_config(2, 4, 2)},
      // More nodes than a block has warp pairs: a forwarder group of one warp (the serial schedule), and
      // more than 8 ranks as threads (CUDA_DEVICE_MAX_CONNECTIONS, set by cuda/thread_ranks_connections.cpp).
      {"n9x1_bf16_groups_of_one_warp", make_shape(9, 1, 40, 256, 4, 2, bf16), ring_config(2, 4, 2)},
      {"n2x5_bf16_ten_ranks", make_shape(2, 5, 40, 256, 4, 2, bf16), ring_config(2, 4, 2)},
  };
  InternodeCase uneven{"n2x2_uneven_tokens", make_shape(2, 2, 0, 256, 4, 2, bf16), ring_config(2, 4, 2)};
  uneven.shape.tokens_per_rank_list = {50, 0, 17, 33};
  base.push_back(uneven);
  std::vector<InternodeCase> list;
  for (const InternodeCase& c : base) {
    list.push_back(c);
    InternodeCase delayed = c;
    delayed.name += "_delays";
    delayed.delays = true;
    list.push_back(delayed);
  }
  return list;
}

// Inside rank threads: an exception (not an ASSERT, which would only leave this rank's lambda) makes
// run_ranks abort the group, so the other ranks stop instead of waiting at a barrier forever.
void check_cuda(cudaError_t status, const char* what) {
  if (status != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(status));
}

#define SWITCHYARD_REQUIRE_GPU() \
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device: GPU tests are skipped, not passed"

BufferOptions options_for(const InternodeCase& c, int rank) {
  BufferOptions options;
  options.topology = c.shape.topology;
  options.rank = rank;
  options.backend = Backend::cuda;
  options.device = device_for_rank(rank, c.shape.topology.num_ranks);
  options.config = c.config;
  options.sizing = sizing_for(c.shape);
  return options;
}

std::string describe(const InternodeCase& c, uint64_t seed) {
  std::ostringstream out;
  out << "case " << c.name << ": seed=0x" << std::hex << seed << std::dec << " (SWITCHYARD_TEST_SEED=0x"
      << std::hex << base_seed() << std::dec << ") " << c.shape.describe() << " config={"
      << c.config.to_string() << "} expert_alignment=" << c.expert_alignment << " loopback delays "
      << (c.delays ? std::string(kLoopbackDelayMicroseconds) + " us" : std::string("off"))
      << (c.scales_column_major ? " column-major scales" : "");
  return out.str();
}

// Every rank runs `body` with its own connected buffer and stream.
void run_case(const InternodeCase& c, uint64_t seed,
              const std::function<void(Buffer&, Group&, cudaStream_t)>& body) {
  LoopbackDelays delays(c.delays, seed);
  run_ranks(c.shape.topology.num_ranks, [&](Group& group) {
    check_cuda(cudaSetDevice(device_for_rank(group.rank(), c.shape.topology.num_ranks)), "cudaSetDevice");
    cudaStream_t stream;
    check_cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
    {
      Buffer buffer(options_for(c, group.rank()));
      buffer.connect(group.allgather(buffer.local_handle()));
      body(buffer, group, stream);
    }
    cudaStreamDestroy(stream);
  });
}

void report(const std::vector<std::vector<std::string>>& failures) {
  for (size_t rank = 0; rank < failures.size(); ++rank) {
    for (const std::string& failure : failures[rank]) ADD_FAILURE() << failure;
  }
}

class CudaInternodeTest : public ::testing::TestWithParam<InternodeCase> {};

// Dispatch in rank-major order and the node-grouped combine, equal to the reference; the same inputs
// again give the same bits (and prove the rings and RDMA counters were left ready); a cached dispatch
// replays the routing.
TEST_P(CudaInternodeTest, DispatchAndNodeGroupedCombineMatchReferenceBitwiseRepeatAndCache) {
  SWITCHYARD_REQUIRE_GPU();
  const InternodeCase& c = GetParam();
  const uint64_t seed = seed_for("cuda/internode/" + c.name);
  SCOPED_TRACE(describe(c, seed));
  const auto data = workload::generate(c.shape, seed);
  const Expected expected = compute_expected(c.shape, data, c.expert_alignment);
  std::vector<std::vector<std::string>> failures(c.shape.topology.num_ranks);
  run_case(c, seed, [&](Buffer& buffer, Group& group, cudaStream_t stream) {
    const int rank = group.rank();
    DispatchHandle handle;
    // NOTES: the ranks start each round trip together (see normal_engine_cuda_test.cpp).
    group.barrier();
    DeviceRun first = run_on_device(buffer, c.shape, data[rank], expected, c.expert_alignment, stream,
                                    nullptr, &handle, {}, {}, c.scales_column_major);
    compare_with_reference(first, c.shape, expected, rank, &failures[rank]);
    group.barrier();
    DeviceRun second = run_on_device(buffer, c.shape, data[rank], expected, c.expert_alignment, stream,
                                     nullptr, nullptr, {}, {}, c.scales_column_major);
    compare_with_reference(second, c.shape, expected, rank, &failures[rank]);
    group.barrier();
    DeviceRun cached = run_on_device(buffer, c.shape, data[rank], expected, c.expert_alignment, stream,
                                     &handle, nullptr, {}, {}, c.scales_column_major);
    compare_with_reference(cached, c.shape, expected, rank, &failures[rank]);
  });
  report(failures);
}

// Combine biases (DeepEP's `bias`): the home's sum over node partials starts at bias0 + bias1 in fp32,
// then rounds once; one bias, the other alone, and both.
TEST_P(CudaInternodeTest, CombineWithBiasesMatchesReferenceBitwise) {
  SWITCHYARD_REQUIRE_GPU();
  const InternodeCase& c = GetParam();
  const uint64_t seed = seed_for("cuda/internode/bias/" + c.name);
  SCOPED_TRACE(describe(c, seed));
  const auto data = workload::generate(c.shape, seed);
  std::vector<Expected> expected;
  for (Biases biases : {Biases::first, Biases::second, Biases::both}) {
    expected.push_back(
        compute_expected(c.shape, data, c.expert_alignment, make_biases(c.shape, seed, biases)));
  }
  std::vector<std::vector<std::string>> failures(c.shape.topology.num_ranks);
  run_case(c, seed, [&](Buffer& buffer, Group& group, cudaStream_t stream) {
    const int rank = group.rank();
    for (const Expected& want : expected) {
      group.barrier();  // the ranks start each round trip together (see normal_engine_cuda_test.cpp)
      DeviceRun run = run_on_device(buffer, c.shape, data[rank], want, c.expert_alignment, stream);
      compare_with_reference(run, c.shape, want, rank, &failures[rank]);
    }
  });
  report(failures);
}

// Dispatch without top-k (DeepEP's topk_idx=None): routed by the layout alone, then the plain
// node-grouped sum.
TEST_P(CudaInternodeTest, DispatchWithoutTopkByLayoutAndPlainCombineMatchReferenceBitwise) {
  SWITCHYARD_REQUIRE_GPU();
  const InternodeCase& c = GetParam();
  const uint64_t seed = seed_for("cuda/internode/without_topk/" + c.name);
  SCOPED_TRACE(describe(c, seed));
  const auto data = workload::generate(c.shape, seed);
  const Expected expected = compute_expected_without_topk(c.shape, data, c.expert_alignment);
  std::vector<std::vector<std::string>> failures(c.shape.topology.num_ranks);
  run_case(c, seed, [&](Buffer& buffer, Group& group, cudaStream_t stream) {
    const int rank = group.rank();
    group.barrier();
    DeviceRun run =
        run_on_device_without_topk(buffer, c.shape, data[rank], expected, c.expert_alignment, stream);
    compare_with_reference(run, c.shape, expected, rank, &failures[rank], false);
  });
  report(failures);
}

// Worst-case mode: fixed-size outputs (no host synchronisation); the received rows equal the
// reference, the padding routes nowhere, and combine equals the reference.
TEST_P(CudaInternodeTest, WorstCaseDispatchPadsRowsAndCombineMatchesReference) {
  SWITCHYARD_REQUIRE_GPU();
  const InternodeCase& c = GetParam();
  const uint64_t seed = seed_for("cuda/internode/worst/" + c.name);
  SCOPED_TRACE(describe(c, seed));
  const auto data = workload::generate(c.shape, seed);
  const Expected expected = compute_expected(c.shape, data, c.expert_alignment);
  int64_t most_tokens = c.shape.tokens_per_rank;
  for (int64_t tokens : c.shape.tokens_per_rank_list) most_tokens = std::max(most_tokens, tokens);
  const int64_t worst = std::max<int64_t>(1, most_tokens * c.shape.topology.num_ranks);
  std::vector<std::vector<std::string>> failures(c.shape.topology.num_ranks);
  run_case(c, seed, [&](Buffer& buffer, Group& group, cudaStream_t stream) {
    const int rank = group.rank();
    const int device = device_of(buffer);
    const workload::RankData& mine = data[rank];
    const auto& want = expected.dispatched[rank];
    const int64_t received = static_cast<int64_t>(want.recv_src_rank.size());
    Tensor x = to_device(mine.x, device, stream), scales = to_device(mine.x_scales, device, stream);
    Tensor topk_idx = to_device(mine.topk_idx, device, stream);
    Tensor topk_weights = to_device(mine.topk_weights, device, stream);
    DispatchArgs args;
    args.x = x;
    args.x_scales = scales;
    args.topk_idx = topk_idx;
    args.topk_weights = topk_weights;
    args.num_experts = c.shape.num_experts;
    args.expert_alignment = c.expert_alignment;
    args.num_worst_tokens = worst;
    args.stream = stream;
    group.barrier();
    DispatchResult dispatched = buffer.dispatch(args);
    buffer.synchronize(stream);
    std::vector<std::string>& mine_failures = failures[rank];
    std::string why;
    const auto prefix = "rank " + std::to_string(rank) + " ";
    Tensor host_x = to_host(dispatched.recv_x, stream);
    Tensor host_idx = to_host(dispatched.recv_topk_idx, stream);
    if (host_x.size(0) != worst)
      mine_failures.push_back(prefix + "recv_x: expected " + std::to_string(worst) + " rows");
    if (!workload::bitwise_equal(host_x, want.recv_x, &why, received))
      mine_failures.push_back(prefix + "recv_x: " + why);
    if (!workload::bitwise_equal(host_idx, want.recv_topk_idx, &why, received)) {
      mine_failures.push_back(prefix + "recv_topk_idx: " + why);
    }
    Tensor host_scales = to_host(dispatched.recv_x_scales, stream);
    if (c.shape.dtype == fp8 && !workload::bitwise_equal(host_scales, want.recv_x_scales, &why, received)) {
      mine_failures.push_back(prefix + "recv_x_scales: " + why);
    }
    Tensor host_weights = to_host(dispatched.recv_topk_weights, stream);
    if (c.shape.with_weights &&
        !workload::bitwise_equal(host_weights, want.recv_topk_weights, &why, received)) {
      mine_failures.push_back(prefix + "recv_topk_weights: " + why);
    }
    for (int64_t row = received; row < worst; ++row) {
      bool padded = true;
      for (int k = 0; k < c.shape.topk; ++k) {
        padded = padded && host_idx.as<int64_t>()[row * c.shape.topk + k] == -1;
        if (c.shape.with_weights) padded = padded && host_weights.as<float>()[row * c.shape.topk + k] == 0.0f;
      }
      if (!padded) {
        mine_failures.push_back(prefix + "padding row " + std::to_string(row) + " is not (-1, 0)");
        break;
      }
    }
    // The expert runs on the received rows only; the padding rows of y are zeros.
    Tensor host_y = workload::synthetic_expert(host_x, host_scales, rank);
    Tensor y = to_device(host_y, device, stream);
    CombineArgs combine_args;
    combine_args.x = y;
    if (c.shape.with_weights) combine_args.topk_weights = dispatched.recv_topk_weights;
    combine_args.handle = &dispatched.handle;
    combine_args.stream = stream;
    group.barrier();
    CombineResult combined = buffer.combine(combine_args);
    buffer.synchronize(stream);
    if (!workload::bitwise_equal(to_host(combined.combined_x, stream), expected.combined[rank].combined_x,
                                 &why)) {
      mine_failures.push_back(prefix + "combined_x: " + why);
    }
    if (c.shape.with_weights &&
        !workload::bitwise_equal(to_host(combined.combined_topk_weights, stream),
                                 expected.combined[rank].combined_topk_weights, &why)) {
      mine_failures.push_back(prefix + "combined_topk_weights: " + why);
    }
  });
  report(failures);
}

// DispatchArgs::layout is borrowed for the dispatch only: after the caller overwrote and freed it, the
// node-grouped combine and a cached dispatch with the handle still route as the dispatch did (the
// handle owns a stream-ordered copy of is_token_in_rank); with top-k and routed by the layout alone.
TEST_P(CudaInternodeTest, CombineAndCachedDispatchAfterTheLayoutWasFreedMatchReferenceBitwise) {
  SWITCHYARD_REQUIRE_GPU();
  const InternodeCase& c = GetParam();
  const uint64_t seed = seed_for("cuda/internode/released_layout/" + c.name);
  SCOPED_TRACE(describe(c, seed));
  const auto data = workload::generate(c.shape, seed);
  const Expected with_topk = compute_expected(c.shape, data, c.expert_alignment);
  const Expected without_topk = compute_expected_without_topk(c.shape, data, c.expert_alignment);
  std::vector<std::vector<std::string>> failures(c.shape.topology.num_ranks);
  run_case(c, seed, [&](Buffer& buffer, Group& group, cudaStream_t stream) {
    const int rank = group.rank();
    for (const bool topk : {true, false}) {
      const Expected& expected = topk ? with_topk : without_topk;
      group.barrier();  // the ranks start each round trip together (see normal_engine_cuda_test.cpp)
      const ReleasedLayoutDeviceRuns runs = run_on_device_releasing_layout(
          buffer, c.shape, data[rank], expected, c.expert_alignment, stream, topk);
      compare_with_reference(runs.first, c.shape, expected, rank, &failures[rank], topk);
      compare_with_reference(runs.cached, c.shape, expected, rank, &failures[rank], topk);
    }
  });
  report(failures);
}

INSTANTIATE_TEST_SUITE_P(Topologies, CudaInternodeTest, ::testing::ValuesIn(cases()), case_name);

// Worst-case mode has no host synchronisation, so dispatch and combine can be captured in CUDA
// graphs; replays with new inputs (new routing too) must match the reference, and plain calls before
// and after the replays too (barrier epochs, ring and RDMA counter resets all live on the device).
// `one_rank_at_a_time`: the ranks capture in turn, so that memory one rank's capture freed is what
// the next rank's capture allocates (ranks are threads of one process): a call temporary whose
// address a graph kept (the 2026-11-29 stall, bench/NOTES.md) is then shared by every rank's replay.
void replay_round_trips_from_graphs(bool one_rank_at_a_time) {
  InternodeCase c{"n2x2_graph", make_shape(2, 2, 64, 1024, 8, 8, bf16),
                  ring_config(Config::kAutoChannels, 16, 4)};
  const int ranks = c.shape.topology.num_ranks;
  const int64_t worst = c.shape.tokens_per_rank * ranks;
  constexpr int kRounds = 4;  // 0 and 3 plain calls, 1 and 2 graph replays
  std::vector<std::vector<std::string>> failures(ranks);
  std::vector<std::vector<workload::RankData>> rounds;
  std::vector<Expected> expected;
  for (int round = 0; round < kRounds; ++round) {
    rounds.push_back(workload::generate(c.shape, seed_for("cuda/internode/graph") + round));
    expected.push_back(compute_expected(c.shape, rounds.back(), 1));
  }
  run_case(c, seed_for("cuda/internode/graph"), [&](Buffer& buffer, Group& group, cudaStream_t stream) {
    const int rank = group.rank();
    const int device = device_of(buffer);
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
    CombineArgs combine_args;
    combine_args.x = y;
    combine_args.topk_weights = recv_weights;
    combine_args.out_combined_x = combined;
    combine_args.out_combined_topk_weights = combined_weights;
    combine_args.stream = stream;

    // One round: upload, dispatch (`dispatch()`), check, expert, combine (`combine()`), check.
    const auto round_trip = [&](int round, const std::function<void()>& dispatch,
                                const std::function<void()>& combine) {
      const workload::RankData& data = rounds[round][rank];
      upload(x, data.x, stream);
      upload(topk_idx, data.topk_idx, stream);
      upload(topk_weights, data.topk_weights, stream);
      group.barrier();
      dispatch();
      buffer.synchronize(stream);
      const auto& want = expected[round].dispatched[rank];
      const int64_t received = static_cast<int64_t>(want.recv_src_rank.size());
      Tensor host_x = to_host(recv_x, stream), host_idx = to_host(recv_idx, stream);
      std::string why;
      const std::string prefix = "rank " + std::to_string(rank) + " round " + std::to_string(round) + " ";
      if (!workload::bitwise_equal(host_x, want.recv_x, &why, received))
        failures[rank].push_back(prefix + "recv_x: " + why);
      if (!workload::bitwise_equal(host_idx, want.recv_topk_idx, &why, received)) {
        failures[rank].push_back(prefix + "recv_topk_idx: " + why);
      }
      upload(y, workload::synthetic_expert(host_x, TensorView(), rank), stream);
      group.barrier();
      combine();
      buffer.synchronize(stream);
      if (!workload::bitwise_equal(to_host(combined, stream), expected[round].combined[rank].combined_x,
                                   &why)) {
        failures[rank].push_back(prefix + "combined_x: " + why);
      }
      if (!workload::bitwise_equal(to_host(combined_weights, stream),
                                   expected[round].combined[rank].combined_topk_weights, &why)) {
        failures[rank].push_back(prefix + "combined_topk_weights: " + why);
      }
    };
    const auto plain_round = [&](int round) {
      DispatchResult plain;
      round_trip(
          round, [&] { plain = buffer.dispatch(args); },
          [&] {
            CombineArgs plain_args = combine_args;
            plain_args.handle = &plain.handle;
            buffer.combine(plain_args);
          });
    };

    plain_round(0);
    // Capture: no rank does other CUDA work while any rank captures.
    cudaGraph_t dispatch_graph = nullptr, combine_graph = nullptr;
    cudaGraphExec_t dispatch_exec = nullptr, combine_exec = nullptr;
    DispatchResult captured;
    check_cuda(cudaStreamSynchronize(stream), "sync before capture");
    group.barrier();
    for (int turn = 0; turn < ranks; ++turn) {
      if (!one_rank_at_a_time || turn == rank) {
        check_cuda(cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed), "begin dispatch capture");
        captured = buffer.dispatch(args);
        check_cuda(cudaStreamEndCapture(stream, &dispatch_graph), "end dispatch capture");
        check_cuda(cudaGraphInstantiate(&dispatch_exec, dispatch_graph, 0), "instantiate dispatch graph");
        CombineArgs captured_args = combine_args;
        captured_args.handle = &captured.handle;
        check_cuda(cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed), "begin combine capture");
        buffer.combine(captured_args);
        check_cuda(cudaStreamEndCapture(stream, &combine_graph), "end combine capture");
        check_cuda(cudaGraphInstantiate(&combine_exec, combine_graph, 0), "instantiate combine graph");
      }
      if (!one_rank_at_a_time) break;
      group.barrier();
    }
    group.barrier();
    for (int round = 1; round <= 2; ++round) {
      round_trip(
          round, [&] { check_cuda(cudaGraphLaunch(dispatch_exec, stream), "launch dispatch graph"); },
          [&] { check_cuda(cudaGraphLaunch(combine_exec, stream), "launch combine graph"); });
    }
    plain_round(3);
    cudaGraphExecDestroy(dispatch_exec);
    cudaGraphExecDestroy(combine_exec);
    cudaGraphDestroy(dispatch_graph);
    cudaGraphDestroy(combine_graph);
  });
  report(failures);
}

TEST(CudaInternodeGraph, WorstCaseDispatchAndCombineReplayFromCudaGraphs) {
  SWITCHYARD_REQUIRE_GPU();
  replay_round_trips_from_graphs(false);
}

TEST(CudaInternodeGraph, ReplaysMatchWhenRanksCaptureOneAtATime) {
  SWITCHYARD_REQUIRE_GPU();
  replay_round_trips_from_graphs(true);
}

// A fresh dispatch without num_worst_tokens waits for its sizes on the host: under capture it is
// refused clearly, naming the argument, and the buffer keeps working (the refusal comes before any
// work is captured).
TEST(CudaInternodeGraph, HostSynchronisingDispatchCaptureIsRefusedClearly) {
  SWITCHYARD_REQUIRE_GPU();
  InternodeCase c{"n2x1_refusal", make_shape(2, 1, 32, 256, 2, 2, bf16),
                  ring_config(Config::kAutoChannels, 16, 4)};
  const auto one_round = workload::generate(c.shape, seed_for("cuda/internode/graph_refusal"));
  const Expected want = compute_expected(c.shape, one_round, 1);
  std::vector<std::vector<std::string>> failures(c.shape.topology.num_ranks);
  run_case(
      c, seed_for("cuda/internode/graph_refusal"), [&](Buffer& buffer, Group& group, cudaStream_t stream) {
        const int rank = group.rank();
        const int device = device_of(buffer);
        Tensor x = to_device(one_round[rank].x, device, stream);
        Tensor topk_idx = to_device(one_round[rank].topk_idx, device, stream);
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
        } catch (const Unsupported& error) {
          refusal = error.what();
        }
        cudaGraph_t graph = nullptr;
        check_cuda(cudaStreamEndCapture(stream, &graph), "end dispatch capture");
        if (graph) cudaGraphDestroy(graph);
        if (refusal.find("num_worst_tokens") == std::string::npos) {
          failures[rank].push_back(
              "rank " + std::to_string(rank) +
              ": expected a host-synchronising dispatch under capture to be refused naming "
              "num_worst_tokens, got '" +
              refusal + "'");
        }
        group.barrier();
        DispatchResult result = buffer.dispatch(args);
        buffer.synchronize(stream);
        std::string why;
        if (!workload::bitwise_equal(to_host(result.recv_x, stream), want.dispatched[rank].recv_x, &why)) {
          failures[rank].push_back("rank " + std::to_string(rank) + " after the refusal, recv_x: " + why);
        }
      });
  report(failures);
}

// A rank of the other node never calls dispatch: every other rank gets a TimeoutError naming itself
// and the missing rank, within about the configured timeout, and nothing hangs.
// Every rank combines with a handle of the same routing, rank 0 with an earlier dispatch's: alike in every
// shape, told apart only by the routing epoch mixed into the opening stamps, which reach the other node by a
// put ahead of the barrier's signal. Every rank refuses with an InvalidArgument at synchronize, before the
// timeout, writing nothing.
TEST(CudaInternodeErrors, CombinesOnHandlesOfDifferentDispatchesAreRefusedOnEveryRank) {
  SWITCHYARD_REQUIRE_GPU();
  InternodeCase c{"n2x2_mismatch", make_shape(2, 2, 24, 256, 4, 2, DType::bf16), ring_config(2, 4, 2)};
  c.config.timeout_seconds = 30;
  const uint64_t seed = seed_for("cuda/internode/mismatch");
  SCOPED_TRACE(describe(c, seed));
  const auto data = workload::generate(c.shape, seed);
  const Expected expected = compute_expected(c.shape, data, c.expert_alignment);
  const int ranks = c.shape.topology.num_ranks;
  std::vector<std::string> messages(ranks);
  std::vector<char> untouched(ranks, 0);
  std::vector<std::vector<std::string>> failures(ranks);
  const auto start = std::chrono::steady_clock::now();
  run_case(c, seed, [&](Buffer& buffer, Group& group, cudaStream_t stream) {
    const int rank = group.rank();
    const int device = device_of(buffer);
    DispatchHandle earlier, later;
    group.barrier();
    run_on_device(buffer, c.shape, data[rank], expected, c.expert_alignment, stream, nullptr, &earlier);
    group.barrier();
    run_on_device(buffer, c.shape, data[rank], expected, c.expert_alignment, stream, nullptr, &later);
    const int64_t rows = static_cast<int64_t>(expected.dispatched[rank].recv_src_rank.size());
    Tensor y = poisoned_device(DType::bf16, {rows, c.shape.hidden}, device, stream);
    Tensor combined_x = poisoned_device(DType::bf16, {data[rank].x.size(0), c.shape.hidden}, device, stream);
    CombineArgs combine;
    combine.x = y;
    combine.handle = rank == 0 ? &earlier : &later;
    combine.out_combined_x = combined_x;
    combine.stream = stream;
    group.barrier();
    messages[rank] = invalid_argument_message([&] {
      buffer.combine(combine);
      buffer.synchronize(stream);
    });
    untouched[rank] = testing::expert_major::all_poison_on_device(combined_x, stream);
    // The refusal was this call's only (record_call_mismatch): the next round trip is bitwise right.
    group.barrier();
    try {
      DeviceRun after = run_on_device(buffer, c.shape, data[rank], expected, c.expert_alignment, stream);
      compare_with_reference(after, c.shape, expected, rank, &failures[rank]);
    } catch (const std::exception& error) {
      failures[rank].push_back(std::string("the round trip after the refusal threw: ") + error.what());
    }
  });
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 20.0) << "the refusal waited for a timeout";
  for (int rank = 0; rank < ranks; ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank) + ": " + messages[rank]);
    EXPECT_NE(messages[rank].find("expected every rank to call with the same shape"), std::string::npos);
    EXPECT_TRUE(untouched[rank]) << "combined_x was written";
    for (const auto& failure : failures[rank]) ADD_FAILURE() << "after the refusal: " << failure;
  }
}

// A dispatch whose host fails after the notify's exchange still runs its part, into outputs of its own
// (InternodeEngine's stand_in): rank 0's call raises, the other ranks' calls complete without waiting for the
// timeout, and the next round trip is bitwise right everywhere. `spoil` makes rank 0's call fail (given its
// arguments, the rows it should receive, its device and stream; it returns any tensor it made for them).
template <typename Spoil>
std::string fail_rank0_after_the_notify(const std::string& name, Spoil&& spoil) {
  InternodeCase c{name, make_shape(2, 2, 24, 256, 4, 2, DType::bf16), ring_config(2, 4, 2)};
  c.config.timeout_seconds = 30;
  const uint64_t seed = seed_for("cuda/internode/" + name);
  SCOPED_TRACE(describe(c, seed));
  const auto data = workload::generate(c.shape, seed);
  const Expected expected = compute_expected(c.shape, data, c.expert_alignment);
  const int ranks = c.shape.topology.num_ranks;
  std::vector<std::string> messages(ranks);
  std::vector<std::vector<std::string>> failures(ranks);
  const auto start = std::chrono::steady_clock::now();
  run_case(c, seed, [&](Buffer& buffer, Group& group, cudaStream_t stream) {
    const int rank = group.rank();
    const int device = device_of(buffer);
    const int64_t rows = static_cast<int64_t>(expected.dispatched[rank].recv_src_rank.size());
    Tensor x = to_device(data[rank].x, device, stream);
    Tensor topk_idx = to_device(data[rank].topk_idx, device, stream);
    Tensor topk_weights = to_device(data[rank].topk_weights, device, stream);
    DispatchArgs args;
    args.x = x;
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
          DeviceRun after = run_on_device(buffer, c.shape, data[rank], expected, c.expert_alignment, stream);
          compare_with_reference(after, c.shape, expected, rank, &failures[rank]);
        },
        &failures[rank]);
  });
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 20.0) << "a peer waited for the timeout";
  for (int rank = 0; rank < ranks; ++rank) {
    for (const auto& failure : failures[rank]) ADD_FAILURE() << "rank " << rank << ": " << failure;
  }
  return messages[0];
}

TEST(CudaInternodeErrors, ADispatchWhoseOutputsFailAfterTheNotifyLetsItsPeersFinish) {
  SWITCHYARD_REQUIRE_GPU();
  const std::string message = fail_rank0_after_the_notify(
      "outputs_fail", [](DispatchArgs& args, int64_t rows, int device, cudaStream_t stream) {
        Tensor recv_x = poisoned_device(DType::bf16, {rows + 1, args.x.shape[1]}, device, stream);
        args.out_recv_x = recv_x;
        return recv_x;
      });
  EXPECT_NE(message.find("out_recv_x: expected"), std::string::npos) << message;
}

// Bad input found on the device (rank 0's topk_idx names an expert past the last): the notify records it
// and its exchange passes; the peers treat the slot as -1.
TEST(CudaInternodeErrors, ADispatchWithAnExpertIdFoundBadOnTheDeviceLetsItsPeersFinish) {
  SWITCHYARD_REQUIRE_GPU();
  const std::string message = fail_rank0_after_the_notify(
      "bad_id_on_device", [](DispatchArgs& args, int64_t, int, cudaStream_t stream) {
        const int64_t bad = args.num_experts + 5;
        check_cuda(cudaMemcpyAsync(args.topk_idx.data, &bad, sizeof(bad), cudaMemcpyHostToDevice, stream),
                   "cudaMemcpyAsync (a bad expert id)");
        check_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
        return Tensor();
      });
  EXPECT_NE(message.find("topk_idx: expected expert ids in [-1, 8), got 13"), std::string::npos) << message;
}

TEST(CudaInternodeErrors, ARankThatNeverArrivesEndsInTimeoutErrorOnTheOthers) {
  SWITCHYARD_REQUIRE_GPU();
  constexpr double kShortTimeoutSeconds = 1.0;
  constexpr double kDeadlineSeconds = 15.0;
  constexpr int kMissing = 3;  // on the other node than rank 0
  InternodeCase c{"n2x2_missing_rank", make_shape(2, 2, 24, 256, 2, 2, bf16), ring_config(2, 4, 2)};
  c.config.timeout_seconds = kShortTimeoutSeconds;
  const uint64_t seed = seed_for("cuda/internode/" + c.name);
  SCOPED_TRACE(describe(c, seed));
  const auto data = workload::generate(c.shape, seed);
  const int num_ranks = c.shape.topology.num_ranks;
  std::vector<std::string> messages(num_ranks);
  std::vector<int> timed_out(num_ranks, 0);
  std::vector<double> seconds(num_ranks, 0.0);
  std::promise<void> others_done;
  std::shared_future<void> release = others_done.get_future().share();
  std::atomic<int> remaining{num_ranks - 1};
  run_case(c, seed, [&](Buffer& buffer, Group& group, cudaStream_t stream) {
    const int rank = group.rank();
    if (rank == kMissing) {
      release.wait_for(std::chrono::seconds(60));
      return;
    }
    const int device = device_of(buffer);
    Tensor x = to_device(data[rank].x, device, stream),
           topk_idx = to_device(data[rank].topk_idx, device, stream);
    DispatchArgs args;
    args.x = x;
    args.topk_idx = topk_idx;
    args.num_experts = c.shape.num_experts;
    args.stream = stream;
    const auto start = std::chrono::steady_clock::now();
    try {
      buffer.dispatch(args);
      buffer.synchronize(stream);
      messages[rank] = "no error";
    } catch (const TimeoutError& error) {
      timed_out[rank] = 1;
      messages[rank] = error.what();
    } catch (const std::exception& error) {
      messages[rank] = std::string("not a TimeoutError: ") + error.what();
    }
    seconds[rank] = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (--remaining == 0) others_done.set_value();
  });
  for (int rank = 0; rank < num_ranks; ++rank) {
    if (rank == kMissing) continue;
    SCOPED_TRACE("rank " + std::to_string(rank) + ": " + messages[rank]);
    EXPECT_TRUE(timed_out[rank]);
    EXPECT_LT(seconds[rank], kDeadlineSeconds);
    EXPECT_NE(messages[rank].find("rank " + std::to_string(rank)), std::string::npos)
        << "does not name the rank";
    EXPECT_NE(messages[rank].find("barrier"), std::string::npos) << "does not name the role";
    EXPECT_NE(messages[rank].find("rank " + std::to_string(kMissing)), std::string::npos)
        << "does not name the missing rank";
  }
}

// Too many channels for every rank's blocks to be resident: refused up front (by connect, or by the
// hierarchical engine's own check of its three blocks per channel), naming the setting, instead of
// a deadlock.
// Each rank's error from its first dispatch of `c` ("no error" if none): for configurations the
// engine must refuse before it launches anything.
std::vector<std::string> first_dispatch_errors(const InternodeCase& c) {
  const int ranks = c.shape.topology.num_ranks;
  const auto data = workload::generate(c.shape, seed_for("cuda/internode/" + c.name));
  std::vector<std::string> messages(ranks);
  run_ranks(ranks, [&](Group& group) {
    const int rank = group.rank();
    const int device = device_for_rank(rank, ranks);
    check_cuda(cudaSetDevice(device), "cudaSetDevice");
    try {
      Buffer buffer(options_for(c, rank));
      buffer.connect(group.allgather(buffer.local_handle()));
      Tensor x = to_device(data[rank].x, device, nullptr),
             topk_idx = to_device(data[rank].topk_idx, device, nullptr);
      DispatchArgs args;
      args.x = x;
      args.topk_idx = topk_idx;
      args.num_experts = c.shape.num_experts;
      buffer.dispatch(args);
      messages[rank] = "no error";
    } catch (const Unsupported& error) {
      messages[rank] = error.what();
    } catch (const Error& error) {
      messages[rank] = std::string("not Unsupported: ") + error.what();
    }
  });
  return messages;
}

TEST(CudaInternodeErrors, ChannelsThatCannotBeResidentAreRefused) {
  SWITCHYARD_REQUIRE_GPU();
  int sm_count = 0;
  // NOTES: rank 0's GPU stands for both (the machines' GPUs are one model). Two blocks per channel make
  // this too many whether the two ranks share a GPU or each has its own.
  check_cuda(cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, device_for_rank(0, 2)),
             "SM count");
  const int channels = sm_count / 2 + 1;  // more than one block per SM each
  const InternodeCase c{"n2x1_too_many_channels", make_shape(2, 1, 8, 128, 2, 2, bf16),
                        ring_config(channels, 4, 2)};
  const std::vector<std::string> messages = first_dispatch_errors(c);
  for (size_t rank = 0; rank < messages.size(); ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank) + ": " + messages[rank]);
    EXPECT_NE(messages[rank].find("num_channels"), std::string::npos);
  }
}

}  // namespace
}  // namespace switchyard::testing
