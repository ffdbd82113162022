// Rank masks on the CUDA backend (Buffer::update_mask, Config::mask_ranks_on_timeout), ranks as
// threads on the GPUs SWITCHYARD_TEST_DEVICES picks: the survivors go on over the same buffers, bitwise
// equal to the reference on the survivors' routing; a masked rank that keeps calling gets nothing and
// rejoins after clean_mask; a timeout masks the silent peer (silent from the dispatch, or from the
// combine on). Also the mask read by a replayed CUDA graph. The symmetric engine on each of its combine
// paths (push, pull) after each of its dispatch sources (publish, zero_copy), and with fp8 rows, which
// ranks as threads of one GPU push into their receivers (cuda/symmetric/push.cuh). The CPU suite
// (tests/cpu/rank_mask_test.cpp) has the same scenarios. Skipped without a GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <chrono>
#include <ostream>
#include <set>
#include <string>
#include <vector>

#include "cuda/captured_round_trip.hpp"
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

void round_trip_checked(Engine engine, Buffer& buffer, cudaStream_t stream, const Case& c,
                        const workload::RankData& data, const Expected& expected, int rank,
                        const std::string& what, Failures& failures) {
  const int device = device_of(buffer);
  const DeviceInputs in = upload_inputs(data, device, stream);
  const LowLatencyDispatchResult dispatched =
      dispatch_with(engine, buffer, dispatch_args(c, in.x, in.topk_idx, stream));
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

// An engine, and for the symmetric one the combine path and dispatch source its buffers force.
struct Variant {
  Engine engine;
  SymmetricCombine combine = SymmetricCombine::automatic;
  SymmetricDispatch dispatch = SymmetricDispatch::automatic;
  bool fp8 = false;  // e4m3 rows with f32 scales: the symmetric engine's fp8 push on one GPU
};

std::string variant_name(const Variant& v) {
  std::string name = engine_name(v.engine);
  if (v.engine != Engine::symmetric) return name;
  name += std::string("_") + symmetric_combine_name(v.combine);
  if (v.dispatch == SymmetricDispatch::zero_copy) name += "_zero_copy";
  if (v.fp8) name += "_fp8";
  return name;
}

void PrintTo(const Variant& v, std::ostream* out) {
  *out << variant_name(v);
}

Case with_variant(Case c, const Variant& v) {
  if (v.fp8) c = with_fp8(c, false, false);
  return with_symmetric_dispatch(with_symmetric_combine(c, v.combine), v.dispatch);
}

// Whether c's ranks all land on one GPU (SWITCHYARD_TEST_DEVICES), which the pull combine and the
// zero-copy dispatch need (connect refuses them otherwise).
bool on_one_device(const Case& c) {
  for (int rank = 1; rank < c.ranks; ++rank) {
    if (device_for_rank(rank, c.ranks) != device_for_rank(0, c.ranks)) return false;
  }
  return true;
}

#define SWITCHYARD_REQUIRE_PATH(c)                                                           \
  if (((c).symmetric_combine == SymmetricCombine::pull ||                                    \
       (c).symmetric_dispatch == SymmetricDispatch::zero_copy) &&                            \
      !on_one_device(c))                                                                     \
  GTEST_SKIP() << "the pull combine and the zero-copy dispatch need every rank on one GPU; " \
                  "SWITCHYARD_TEST_DEVICES spreads them"

class CudaRankMask : public ::testing::TestWithParam<Variant> {};

Case mask_case(const Variant& v) {
  return with_variant(make("mask", 4, {6, 5, 6, 4}, 6, 3, 16, 512), v);
}

TEST_P(CudaRankMask, SurvivorsGoOnWithoutTheMaskedRankBitwise) {
  SWITCHYARD_REQUIRE_GPU();
  const Engine engine = GetParam().engine;
  const Case c = mask_case(GetParam());
  SWITCHYARD_REQUIRE_PATH(c);
  const uint64_t seed = seed_for("cuda_rank_mask/survivors/" + variant_name(GetParam()));
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
  const Engine engine = GetParam().engine;
  const Case c = mask_case(GetParam());
  SWITCHYARD_REQUIRE_PATH(c);
  const uint64_t seed = seed_for("cuda_rank_mask/rejoin/" + variant_name(GetParam()));
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
        round_trip_checked(engine, buffer, stream, c, masked_round[rank], masked_expected, rank,
                           "rank 1 masked", failures);
        buffer.clean_mask(stream);
        buffer.synchronize(stream);
        group.barrier();
        round_trip_checked(engine, buffer, stream, c, full_round[rank], full_expected, rank,
                           "after clean_mask", failures);
      },
      kTimeoutSeconds);
  expect_none(failures, seed);
}

// Config::mask_ranks_on_timeout: rank 3 makes `silent_from` of the first round trip's calls (0: none;
// 1: the dispatch, then it stays silent), then nothing. The survivors' first round trip ends after
// about the timeout, without TimeoutError, with rank 3 masked; the next one is bitwise the reference
// on the survivors' routing. The symmetric engine's call that timed out is checked too: rank 3 is
// masked in block 0 before the barrier's closing grid sync (or, in the pull combine, by every block's
// own wait for its record, which never comes), so every block leaves it out and that call already has
// the survivors' outputs (the dispatch's are the full reference when rank 3 made it).
void timeout_masks_the_silent_peer(const Variant& variant, int silent_from, const std::string& name) {
  const Engine engine = variant.engine;
  const Case c = mask_case(variant);
  const int silent = 3;
  const double timeout_seconds = 1.0;
  const bool check_timed_out_call = engine == Engine::symmetric;
  const uint64_t seed = seed_for("cuda_rank_mask/" + name + "/" + variant_name(variant));
  const std::vector<workload::RankData> first = workload::generate(shape_of(c), seed);
  const std::vector<workload::RankData> second = workload::generate(shape_of(c), seed + 1);
  const Expected first_full = expected_from(c, first);
  const Expected first_survivors = expected_from(c, survivors_routing(first, c, {silent}));
  const Expected expected = expected_from(c, survivors_routing(second, c, {silent}));
  Failures failures;
  run_ranks(c.ranks, [&](Group& group) {
    const int rank = group.rank();
    BufferOptions options = cuda_buffer_options(c, rank, regions_of(engine), timeout_seconds);
    options.config.mask_ranks_on_timeout = true;
    GpuRank gpu(options, group);
    Buffer& buffer = *gpu.buffer;
    if (rank == silent) {
      if (silent_from > 0) {
        const DeviceInputs in = upload_inputs(first[rank], gpu.device, gpu.stream);
        dispatch_with(engine, buffer, dispatch_args(c, in.x, in.topk_idx, gpu.stream));
        buffer.synchronize(gpu.stream);
      }
      group.allgather(Bytes{1});
      group.barrier();  // its buffer outlives the survivors' calls, which may still write to it
      return;
    }
    const auto start = std::chrono::steady_clock::now();
    try {
      const DeviceInputs in = upload_inputs(first[rank], gpu.device, gpu.stream);
      const LowLatencyDispatchResult dispatched =
          dispatch_with(engine, buffer, dispatch_args(c, in.x, in.topk_idx, gpu.stream));
      buffer.synchronize(gpu.stream);
      Outputs got = download(dispatched, gpu.stream);
      const Tensor y = to_device(expert_outputs(got.recv_x, got.recv_x_scales, rank), gpu.device, gpu.stream);
      const LowLatencyCombineResult combined = combine_with(
          engine, buffer, combine_args(in.topk_idx, in.topk_weights, dispatched.handle, y, gpu.stream));
      buffer.synchronize(gpu.stream);
      if (check_timed_out_call) {
        Outputs want = reference_outputs(silent_from > 0 ? first_full : first_survivors, rank);
        want.combined_x = first_survivors.combined[rank];
        got.combined_x = to_host(combined.combined_x, gpu.stream);
        check_outputs(got, want, "the reference (the call that timed out)", rank, failures);
      }
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
  });
  expect_none(failures, seed);
}

TEST_P(CudaRankMask, ATimeoutMasksTheSilentPeerAndTheNextCallsAreTheSurvivors) {
  SWITCHYARD_REQUIRE_GPU();
  SWITCHYARD_REQUIRE_PATH(mask_case(GetParam()));
  timeout_masks_the_silent_peer(GetParam(), 0, "timeout");
}

TEST_P(CudaRankMask, APeerSilentFromTheCombineOnIsMaskedThereAndTheNextCallsAreTheSurvivors) {
  SWITCHYARD_REQUIRE_GPU();
  SWITCHYARD_REQUIRE_PATH(mask_case(GetParam()));
  timeout_masks_the_silent_peer(GetParam(), 1, "timeout_in_combine");
}

TEST_P(CudaRankMask, ACapturedRoundTripReadsTheMaskWhenReplayed) {
  // Every rank captures one round trip in CUDA graphs and replays it once with nothing masked; then
  // the survivors mask rank 2 (on their streams, after the capture) and rank 2 stops. The survivors'
  // next replays of the same graphs, on new inputs, are bitwise the reference on their routing: the
  // kernels read the mask when they run, not when they were captured.
  SWITCHYARD_REQUIRE_GPU();
  const Engine engine = GetParam().engine;
  const Case c = mask_case(GetParam());
  SWITCHYARD_REQUIRE_PATH(c);
  const int gone = 2;
  const uint64_t seed = seed_for("cuda_rank_mask/graph/" + variant_name(GetParam()));
  std::vector<Expected> rounds;
  for (int round = 0; round < 3; ++round) {
    const std::vector<workload::RankData> drawn = workload::generate(shape_of(c), seed + round);
    rounds.push_back(round == 0 ? expected_from(c, drawn)
                                : expected_from(c, survivors_routing(drawn, c, {gone})));
  }
  Failures failures;
  run_ranks(c.ranks, [&](Group& group) {
    const int rank = group.rank();
    GpuRank gpu(cuda_buffer_options(c, rank, regions_of(engine), kTimeoutSeconds), group);
    const cudaStream_t stream = gpu.stream;
    const workload::RankData& data = rounds[0].data[rank];
    const DeviceInputs in = upload_inputs(data, gpu.device, stream);
    Tensor y = poisoned_device(DType::bf16, {c.num_experts / c.ranks, c.ranks * c.max_tokens, c.hidden},
                               gpu.device, stream);
    const PoisonedOutputs out = poisoned_device_outputs(c, data.x.size(0), gpu.device, stream);
    const CapturedRoundTrip captured(engine, c, group, *gpu.buffer, in, y, out, stream);
    for (int round = 0; round < 3; ++round) {
      if (round == 1) {
        check_cuda(cudaStreamSynchronize(stream), "sync after the unmasked replay");
        group.barrier();  // every rank's unmasked replay is done
        if (rank == gone) break;
        gpu.buffer->update_mask(gone, true, stream);
      }
      // The caller's inputs, unmasked: the kernels drop what the mask leaves out.
      const workload::RankData& inputs = rounds[round].data[rank];
      upload(in.x, inputs.x, stream);
      upload(in.topk_idx, inputs.topk_idx, stream);
      upload(in.topk_weights, inputs.topk_weights, stream);
      upload(y, rounds[round].ys[rank], stream);
      captured.launch_dispatch();
      captured.launch_combine();
      gpu.buffer->synchronize(stream);
      Outputs got = download(out, stream);
      got.combined_x = to_host(out.combined_x, stream);
      check_outputs(got, reference_outputs(rounds[round], rank),
                    "reference (replay " + std::to_string(round) + ")", rank, failures);
    }
    group.barrier();  // rank 2's buffer outlives the survivors' replays
  });
  expect_none(failures, seed);
}

TEST_P(CudaRankMask, Small_R1_MaskedInItsOwnViewReceivesNothing) {
  SWITCHYARD_REQUIRE_GPU();
  const Engine engine = GetParam().engine;
  const Case c = with_variant(make("Small_R1_mask", 1, {5}, 6, 2, 4), GetParam());
  const std::vector<workload::RankData> data = workload::generate(shape_of(c), seed_for("cuda_rank_mask/r1"));
  const Expected expected = expected_from(c, survivors_routing(data, c, {0}));
  GpuRank gpu(cuda_buffer_options(c, 0, regions_of(engine), kTimeoutSeconds));
  Failures failures;
  gpu.buffer->update_mask(0, true, gpu.stream);
  round_trip_checked(engine, *gpu.buffer, gpu.stream, c, data[0], expected, 0, "masked itself", failures);
  gpu.buffer->clean_mask(gpu.stream);
  EXPECT_EQ(mask_on_host(*gpu.buffer, gpu.stream), std::vector<int32_t>{0});
  round_trip_checked(engine, *gpu.buffer, gpu.stream, c, data[0], expected_from(c, data), 0,
                     "after clean_mask", failures);
  expect_none(failures, 0);
}

INSTANTIATE_TEST_SUITE_P(
    Engines, CudaRankMask,
    ::testing::Values(Variant{Engine::low_latency},
                      Variant{Engine::symmetric, SymmetricCombine::push, SymmetricDispatch::publish},
                      Variant{Engine::symmetric, SymmetricCombine::push, SymmetricDispatch::zero_copy},
                      Variant{Engine::symmetric, SymmetricCombine::pull, SymmetricDispatch::publish},
                      Variant{Engine::symmetric, SymmetricCombine::pull, SymmetricDispatch::zero_copy},
                      Variant{Engine::symmetric, SymmetricCombine::push, SymmetricDispatch::publish, true},
                      Variant{Engine::symmetric, SymmetricCombine::pull, SymmetricDispatch::publish, true}),
    [](const auto& info) { return variant_name(info.param); });

}  // namespace
}  // namespace switchyard::testing::expert_major
