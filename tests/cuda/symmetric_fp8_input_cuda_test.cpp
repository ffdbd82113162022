// fp8 x that the caller cast itself (ExpertMajorDispatchArgs::x_scales) through the CUDA `symmetric`
// engine (the publish role that copies pre-cast rows, cuda/symmetric/dispatch_kernel.cu), ranks as threads
// on the GPU(s): rows and scales arrive bit for bit as given (against the reference and against the
// callers' own tensors), twice on one buffer (both heap halves), on both combine paths and both dispatch
// settings, with the combine on top against the reference; equal, bit for bit, to the dispatch that casts
// the same bf16 rows itself; and x_scales in the wrong place refused before anything is written. Skipped
// (reported as skipped) where no GPU is present.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "cuda/device_tensors.hpp"
#include "cuda/expert_major_round_trip.hpp"
#include "cuda/rank_device.hpp"
#include "support/expert_major_gtest.hpp"
#include "support/fp8_inputs.hpp"
#include "support/test_seed.hpp"
#include "switchyard/buffer.hpp"
#include "switchyard/errors.hpp"
#include "workload/workload.hpp"

namespace switchyard::testing::expert_major {
namespace {

constexpr double kTimeoutSeconds = 120.0;

#define SWITCHYARD_REQUIRE_GPU() \
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device: GPU tests are skipped, not passed"

// The pull combine and the zero-copy dispatch setting need every rank on one GPU.
bool on_one_device(const Case& c) {
  for (int rank = 1; rank < c.ranks; ++rank) {
    if (device_for_rank(rank, c.ranks) != device_for_rank(0, c.ranks)) return false;
  }
  return true;
}

// A case, and whether token 0 of its rank 0 is routed nowhere (every slot -1).
struct Fp8Case {
  Case c;
  bool first_token_unrouted = false;
};

void PrintTo(const Fp8Case& f, std::ostream* out) {
  *out << f.c.name;
}

class SymmetricCudaPrecastFp8 : public ::testing::TestWithParam<Fp8Case> {};

TEST_P(SymmetricCudaPrecastFp8, RowsAndScalesArriveAsTheCallerGaveThemBitwiseTwice) {
  SWITCHYARD_REQUIRE_GPU();
  const Fp8Case& f = GetParam();
  const Case& c = f.c;
  if ((c.symmetric_combine == SymmetricCombine::pull ||
       c.symmetric_dispatch == SymmetricDispatch::zero_copy) &&
      !on_one_device(c)) {
    GTEST_SKIP() << "the pull combine and the zero-copy dispatch need every rank on one GPU";
  }
  const uint64_t seed = seed_for("symmetric_cuda/precast_fp8/" + c.name);
  std::vector<workload::RankData> data = precast_inputs(c, seed);
  if (f.first_token_unrouted)
    std::fill(data[0].topk_idx.as<int64_t>(), data[0].topk_idx.as<int64_t>() + c.topk, -1);
  const Expected expected = expected_from(c, data);
  Failures failures;
  with_gpu_ranks(
      c, Regions::symmetric,
      [&](Group& group, Buffer& buffer, cudaStream_t stream) {
        const int rank = group.rank();
        const int device = device_for_rank(rank, c.ranks);
        const workload::RankData& mine = expected.data[rank];
        const DeviceInputs in = upload_inputs(mine, device, stream);
        const Tensor scales = to_device(mine.x_scales, device, stream);
        const Tensor y = to_device(expected.ys[rank], device, stream);
        // Twice: the second call publishes into the other heap half.
        for (int round = 0; round < 2; ++round) {
          const std::string when = " (round " + std::to_string(round) + ")";
          LowLatencyDispatchArgs args = dispatch_args(c, in.x, in.topk_idx, stream);
          args.x_scales = scales;
          // Preallocated, poisoned outputs on even ranks; the library allocates on odd ones.
          const PoisonedOutputs out =
              rank % 2 == 0 ? poisoned_device_outputs(c, mine.x.size(0), device, stream) : PoisonedOutputs();
          out.attach(args);
          LowLatencyDispatchResult dispatched = buffer.symmetric_dispatch(args);
          buffer.synchronize(stream);
          const Outputs got = download(dispatched, stream);
          check_dispatch(got, expected.dispatched[rank], "reference" + when, rank, failures);
          check_rows_are_the_callers(got, expected.data, rank, failures);
          LowLatencyCombineResult combined = buffer.symmetric_combine(
              combine_args(in.topk_idx, in.topk_weights, dispatched.handle, y, stream));
          buffer.synchronize(stream);
          compare(to_host(combined.combined_x, stream), expected.combined[rank],
                  "combined_x vs reference" + when, rank, failures);
        }
      },
      kTimeoutSeconds);
  expect_none(failures, seed);
}

std::vector<Fp8Case> precast_cases() {
  using workload::Routing;
  std::vector<Fp8Case> cases;
  for (const Case& c : on_both_combine_paths({
           make("r1_k1", 1, {5}, 8, 1, 4),
           make("r2_k3", 2, {7, 4}, 8, 3, 8, 384),
           make("r4_k4_some_ranks_empty", 4, {6, 0, 5, 2}, 6, 4, 16, 128),
           make("r4_zero_tokens", 4, {0, 0, 0, 0}, 4, 2, 8),
           with_routing(make("r2_all_invalid", 2, {4, 3}, 4, 3, 4), Routing::all_invalid),
           // 7168 channels: 448 16-byte vectors and 56 scales per row, a DeepSeek-V3 row.
           make("r2_k8_hidden_7168", 2, {9, 6}, 12, 8, 16, 7168),
       })) {
    cases.push_back({with_precast_x(c)});
  }
  Fp8Case unrouted{with_precast_x(make("r2_k2_first_token_unrouted", 2, {5, 6}, 6, 2, 4))};
  unrouted.first_token_unrouted = true;
  cases.push_back(unrouted);
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Shapes, SymmetricCudaPrecastFp8, ::testing::ValuesIn(precast_cases()),
                         [](const auto& info) { return info.param.c.name; });

// Rows the caller cast give, bit for bit, what the dispatch's own cast of the same bf16 rows gives.
TEST(SymmetricCudaPrecastFp8Cast, EqualsTheDispatchThatCastsTheSameRows) {
  SWITCHYARD_REQUIRE_GPU();
  const Case c = with_precast_x(make("r3_k2_cast", 3, {6, 4, 5}, 6, 2, 6, 256));
  const uint64_t seed = seed_for("symmetric_cuda/precast_fp8/cast");
  const std::vector<workload::RankData> bf16 = workload::generate(shape_of(c), seed);
  const std::vector<workload::RankData> cast = cast_inputs(bf16);
  Failures failures;
  with_gpu_ranks(
      c, Regions::symmetric,
      [&](Group& group, Buffer& buffer, cudaStream_t stream) {
        const int rank = group.rank();
        const int device = device_for_rank(rank, c.ranks);
        const DeviceInputs plain = upload_inputs(bf16[rank], device, stream);
        const DeviceInputs precast = upload_inputs(cast[rank], device, stream);
        const Tensor scales = to_device(cast[rank].x_scales, device, stream);
        LowLatencyDispatchResult from_bf16 =
            buffer.symmetric_dispatch(dispatch_args(c, plain.x, plain.topk_idx, stream));
        buffer.synchronize(stream);
        const Outputs cast_here = download(from_bf16, stream);
        LowLatencyDispatchArgs args = dispatch_args(c, precast.x, precast.topk_idx, stream);
        args.x_scales = scales;
        LowLatencyDispatchResult given = buffer.symmetric_dispatch(args);
        buffer.synchronize(stream);
        const Outputs got = download(given, stream);
        check_dispatch(got, cast_here, "the dispatch's own cast", rank, failures);
        check_rows_are_the_callers(got, cast, rank, failures);
      },
      kTimeoutSeconds);
  expect_none(failures, seed);
}

// x_scales on the host with x on the GPU, and scales with bf16 x: refused by name, nothing written.
TEST(SymmetricCudaPrecastFp8Refusal, ScalesInTheWrongPlaceWriteNothing) {
  SWITCHYARD_REQUIRE_GPU();
  const Case c = with_precast_x(make("single", 1, {4}, 4, 2, 4));
  GpuRank gpu(cuda_buffer_options(c, 0, Regions::symmetric, kTimeoutSeconds));
  const workload::RankData data = precast_inputs(c, 3)[0];
  const DeviceInputs in = upload_inputs(data, gpu.device, gpu.stream);
  const PoisonedOutputs out = poisoned_device_outputs(c, 4, gpu.device, gpu.stream);
  const auto refusal = [&](const LowLatencyDispatchArgs& args) {
    return refused<InvalidArgument>([&] { gpu.buffer->symmetric_dispatch(args); });
  };
  LowLatencyDispatchArgs args = dispatch_args(c, in.x, in.topk_idx, gpu.stream);
  args.x_scales = data.x_scales;  // on the host
  out.attach(args);
  EXPECT_EQ(refusal(args).rfind("x_scales: expected a tensor on cuda", 0), 0u) << refusal(args);
  const workload::RankData bf16 = workload::generate(shape_of(c), 3)[0];
  const Tensor x_bf16 = to_device(bf16.x, gpu.device, gpu.stream);
  args.x = x_bf16;
  args.x_scales = to_device(data.x_scales, gpu.device, gpu.stream);
  EXPECT_EQ(refusal(args).rfind("x_scales: expected none (scales come only with fp8_e4m3 x", 0), 0u)
      << refusal(args);
  for (const Tensor& output : out.dispatch_outputs())
    EXPECT_TRUE(all_poison_on_device(output, gpu.stream)) << "a refused call wrote its outputs";
}

}  // namespace
}  // namespace switchyard::testing::expert_major
