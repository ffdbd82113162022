// Rank masks on the CUDA backend (Buffer::update_mask, Config::mask_ranks_on_timeout), ranks as
// threads on the GPUs SWITCHYARD_TEST_DEVICES picks: the survivors go on over the same buffers, bitwise
// equal to the reference on the survivors' routing; a masked rank that keeps calling gets nothing and
// rejoins after clean_mask; a timeout masks the silent peer. Also the mask read by a replayed CUDA
// graph. The CPU suite (tests/cpu/rank_mask_test.cpp) has the same scenarios. Skipped without a GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <chrono>
#include <set>
#include <string>
#include <vector>

#include "cuda/device_tensors.hpp"
#include "cuda/expert_major_round_trip.hpp"
#include "cuda/rank_device.hpp"
#include "support/expert_major_gtest.hpp"
#include "support/test_seed.hpp"
#include "switchyard/buffer.hpp"
#include "switchyard/errors.hpp"
#include "switchyard/group.hpp"
#include "workload/workload.hpp"

namespace switchyard::testing::expert_major {
namespace {

#define SWITCHYARD_REQUIRE_GPU() \
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device: GPU tests are skipped, not passed"

constexpr double kTimeoutSeconds = 10.0;

// As tests/cpu/rank_mask_test.cpp: a masked rank's tokens are dropped and slots on masked ranks are -1.
std::vector<workload::RankData> survivors_routing(std::vector<workload::RankData> data, const Case& c,
                                                  const std::set<int>& masked) {
  const int local_experts = c.num_experts / c.ranks;
  for (int rank = 0; rank < c.ranks; ++rank) {
    Tensor& topk_idx = data[rank].topk_idx;
    Tensor copy = Tensor::empty(DType::i64, {topk_idx.size(0), topk_idx.size(1)});
    const int64_t* from = topk_idx.as<const int64_t>();
    int64_t* to = copy.as<int64_t>();
    for (int64_t i = 0; i < topk_idx.numel(); ++i) {
      const bool dropped = masked.count(rank) != 0 ||
                           (from[i] >= 0 && masked.count(static_cast<int>(from[i] / local_experts)) != 0);
      to[i] = dropped ? -1 : from[i];
    }
    topk_idx = copy;
  }
  return data;
}

void round_trip_checked(Engine engine, Buffer& buffer, cudaStream_t stream, const Case& c,
                        const workload::RankData& data, const Expected& expected, int rank, const std::string& what,
                        Failures& failures) {
  const int device = device_of(buffer);
  const DeviceInputs in = upload_inputs(data, device, stream);
  const LowLatencyDispatchResult dispatched = dispatch_with(engine, buffer, dispatch_args(c, in.x, in.topk_idx, stream));
  buffer.synchronize(stream);
  Outputs got = download(dispatched, stream);
  const Tensor y = to_device(expert_outputs(got.recv_x, got.recv_x_scales, rank), device, stream);
  const LowLatencyCombineResult combined =
      combine_with(engine, buffer, combine_args(in.topk_idx, in.topk_weights, dispatched.handle, y, stream));
  buffer.synchronize(stream);
  got.combined_x = to_host(combined.combined_x, stream);
  check_outputs(got, reference_outputs(expected, rank),
                "the reference on the survivors' routing (" + what + ")", rank, failures);
}

std::vector<int32_t> mask_on_host(Buffer& buffer, cudaStream_t stream) {
  const Tensor mask = to_host(buffer.query_mask(stream), stream);
  return std::vector<int32_t>(mask.as<const int32_t>(), mask.as<const int32_t>() + mask.numel());
}

class CudaRankMask : public ::testing::TestWithParam<Engine> {};

Case mask_case() {
  return make("mask", 4, {6, 5, 6, 4}, 6, 3, 16, 512);
}

TEST_P(CudaRankMask, SurvivorsGoOnWithoutTheMaskedRankBitwise) {
  SWITCHYARD_REQUIRE_GPU();
  const Engine engine = GetParam();
  const Case c = mask_case();
  const uint64_t seed = seed_for(std::string("cuda_rank_mask/survivors/") + engine_name(engine));
  std::vector<std::vector<workload::RankData>> inputs;
  std::vector<Expected> expected;
  for (int round = 0; round < 3; ++round) {
    inputs.push_back(workload::generate(shape_of(c), seed + round));
    expected.push_back(expected_from(c, survivors_routing(inputs.back(), c, {2})));
  }
  Failures failures;
  with_gpu_ranks(
      c, regions_of(engine),
      [&](Group& group, Buffer& buffer, cudaStream_t stream) {
        const int rank = group.rank();
        if (rank == 2) return;  // gone: no call at all
        buffer.update_mask(2, true, stream);
        for (int round = 0; round < 3; ++round) {
          round_trip_checked(engine, buffer, stream, c, inputs[round][rank], expected[round], rank,
                             "round " + std::to_string(round), failures);
        }
        if (mask_on_host(buffer, stream) != std::vector<int32_t>{0, 0, 1, 0})
          failures.add(rank, "query_mask() is not {0, 0, 1, 0}");
      },
      kTimeoutSeconds);
  expect_none(failures, seed);
}

TEST_P(CudaRankMask, AMaskedRankThatKeepsCallingGetsNothingAndRejoinsAfterCleanMask) {
  SWITCHYARD_REQUIRE_GPU();
  const Engine engine = GetParam();
  const Case c = mask_case();
  const uint64_t seed = seed_for(std::string("cuda_rank_mask/rejoin/") + engine_name(engine));
  const std::vector<workload::RankData> masked_round = workload::generate(shape_of(c), seed);
  const std::vector<workload::RankData> full_round = workload::generate(shape_of(c), seed + 1);
  const Expected masked_expected = expected_from(c, survivors_routing(masked_round, c, {1}));
  const Expected full_expected = expected_from(c, full_round);
  Failures failures;
  with_gpu_ranks(
      c, regions_of(engine),
      [&](Group& group, Buffer& buffer, cudaStream_t stream) {
        const int rank = group.rank();
        buffer.update_mask(1, true, stream);
        round_trip_checked(engine, buffer, stream, c, masked_round[rank], masked_expected, rank, "rank 1 masked",
                           failures);
        buffer.clean_mask(stream);
        buffer.synchronize(stream);
        group.barrier();
        round_trip_checked(engine, buffer, stream, c, full_round[rank], full_expected, rank, "after clean_mask",
                           failures);
      },
      kTimeoutSeconds);
  expect_none(failures, seed);
}

TEST_P(CudaRankMask, ATimeoutMasksTheSilentPeerAndTheNextCallsAreTheSurvivors) {
  SWITCHYARD_REQUIRE_GPU();
  const Engine engine = GetParam();
  const Case c = mask_case();
  const double timeout_seconds = 1.0;
  const uint64_t seed = seed_for(std::string("cuda_rank_mask/timeout/") + engine_name(engine));
  const std::vector<workload::RankData> first = workload::generate(shape_of(c), seed);
  const std::vector<workload::RankData> second = workload::generate(shape_of(c), seed + 1);
  const Expected expected = expected_from(c, survivors_routing(second, c, {3}));
  Failures failures;
  run_ranks(c.ranks, [&](Group& group) {
    const int rank = group.rank();
    BufferOptions options = cuda_buffer_options(c, rank, regions_of(engine), timeout_seconds);
    options.config.mask_ranks_on_timeout = true;
    GpuRank gpu(options, group);
    Buffer& buffer = *gpu.buffer;
    if (rank != 3) {
      const auto start = std::chrono::steady_clock::now();
      try {
        const DeviceInputs in = upload_inputs(first[rank], gpu.device, gpu.stream);
        const LowLatencyDispatchResult dispatched =
            dispatch_with(engine, buffer, dispatch_args(c, in.x, in.topk_idx, gpu.stream));
        buffer.synchronize(gpu.stream);
        const Outputs got = download(dispatched, gpu.stream);
        const Tensor y = to_device(expert_outputs(got.recv_x, got.recv_x_scales, rank), gpu.device, gpu.stream);
        combine_with(engine, buffer, combine_args(in.topk_idx, in.topk_weights, dispatched.handle, y, gpu.stream));
        buffer.synchronize(gpu.stream);
      } catch (const std::exception& error) {
        failures.add(rank, std::string("the round trip with a silent peer raised: ") + error.what());
      }
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (seconds > 10 * timeout_seconds)
        failures.add(rank, "the round trip with a silent peer took " + std::to_string(seconds) + " s");
      if (mask_on_host(buffer, gpu.stream) != std::vector<int32_t>{0, 0, 0, 1})
        failures.add(rank, "query_mask() is not {0, 0, 0, 1} after the timeout");
      group.allgather(Bytes{1});
      round_trip_checked(engine, buffer, gpu.stream, c, second[rank], expected, rank, "after the timeout",
                         failures);
      group.barrier();
    } else {
      group.allgather(Bytes{1});
      group.barrier();
    }
  });
  expect_none(failures, seed);
}

TEST_P(CudaRankMask, Small_R1_MaskedInItsOwnViewReceivesNothing) {
  SWITCHYARD_REQUIRE_GPU();
  const Engine engine = GetParam();
  const Case c = make("Small_R1_mask", 1, {5}, 6, 2, 4);
  const std::vector<workload::RankData> data = workload::generate(shape_of(c), seed_for("cuda_rank_mask/r1"));
  const Expected expected = expected_from(c, survivors_routing(data, c, {0}));
  GpuRank gpu(cuda_buffer_options(c, 0, regions_of(engine), kTimeoutSeconds));
  Failures failures;
  gpu.buffer->update_mask(0, true, gpu.stream);
  round_trip_checked(engine, *gpu.buffer, gpu.stream, c, data[0], expected, 0, "masked itself", failures);
  gpu.buffer->clean_mask(gpu.stream);
  EXPECT_EQ(mask_on_host(*gpu.buffer, gpu.stream), std::vector<int32_t>{0});
  round_trip_checked(engine, *gpu.buffer, gpu.stream, c, data[0], expected_from(c, data), 0, "after clean_mask",
                     failures);
  expect_none(failures, 0);
}

INSTANTIATE_TEST_SUITE_P(Engines, CudaRankMask, ::testing::Values(Engine::low_latency, Engine::symmetric),
                         [](const auto& info) { return std::string(engine_name(info.param)); });

}  // namespace
}  // namespace switchyard::testing::expert_major
