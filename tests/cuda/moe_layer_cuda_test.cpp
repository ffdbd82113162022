// The MoE layer (switchyard/moe.hpp, docs/MOE.md) on the CUDA backend, ranks as threads on the GPU(s):
// symmetric dispatch, CUTLASS grouped GEMM 1, SwiGLU (and the fp8 requantisation), grouped GEMM 2,
// symmetric combine. The GPU sums in its own order, so y is held to docs/MOE.md's tolerance against
// the reference (the largest |dy| / S is printed) and pinned bitwise to itself: run to run, and a CUDA
// graph replay with new routing against a direct call. Edge cases of the issue: experts with 0 rows,
// 1 row and exactly full capacity, k = 1, N = 0, all slots empty; both recipes.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

#include "common/numeric.hpp"
#include "cuda/device_tensors.hpp"
#include "cuda/expert_major_round_trip.hpp"
#include "cuda/rank_device.hpp"
#include "support/expert_major_cases.hpp"
#include "support/expert_major_gtest.hpp"
#include "support/test_seed.hpp"
#include "switchyard/errors.hpp"
#include "switchyard/moe.hpp"
#include "switchyard/reference.hpp"
#include "workload/moe_weights.hpp"
#include "workload/workload.hpp"

namespace switchyard::testing::expert_major {
namespace {

// NOTES: generous, so that compute-sanitizer does not turn a slow barrier into a timeout.
// SWITCHYARD_MOE_TEST_TIMEOUT overrides it (a short one names a stuck rank and role quickly).
const double kTestTimeoutSeconds = [] {
  const char* text = std::getenv("SWITCHYARD_MOE_TEST_TIMEOUT");
  return text != nullptr ? std::atof(text) : 120.0;
}();

#define SWITCHYARD_REQUIRE_GPU() \
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device: GPU tests are skipped, not passed"

enum class Rows { drawn, one_per_expert, exactly_full };

struct MoeCase {
  Case c;
  int intermediate = 128;
  DType weights = DType::bf16;
  float clamp = 0.0f;
  Rows rows = Rows::drawn;
};

void PrintTo(const MoeCase& m, std::ostream* out) {
  *out << m.c.name;
}

// H and I are multiples of 128 in both recipes: the fp8 scales need whole blocks, and the same shapes
// keep the two recipes' cases alike.
MoeCase moe_case(std::string name, int ranks, std::vector<int64_t> tokens, int64_t max_tokens, int topk,
                 int num_experts, DType weights, int hidden = 256, int intermediate = 128) {
  MoeCase m;
  m.c = make(std::move(name), ranks, std::move(tokens), max_tokens, topk, num_experts, hidden);
  m.intermediate = intermediate;
  m.weights = weights;
  return m;
}

// Every rank's inputs, weights, expected y and tolerance scale S.
struct Expected {
  MoeCase m;
  std::vector<workload::RankData> data;
  std::vector<workload::MoeExpertWeights> weights;
  std::vector<Tensor> y, scale;
};

Expected expected_for(MoeCase m, const std::vector<workload::RankData>& data, uint64_t seed) {
  Expected e;
  e.data = data;
  const int local_experts = m.c.num_experts / m.c.ranks;
  std::vector<MoeWeights> views;
  for (int rank = 0; rank < m.c.ranks; ++rank) {
    e.weights.push_back(
        workload::generate_moe_weights(local_experts, m.c.hidden, m.intermediate, m.weights, seed, rank));
    views.push_back(e.weights.back().weights());
  }
  std::vector<reference::RankInputs> inputs;
  for (const workload::RankData& rank : e.data) inputs.push_back(rank.inputs());
  e.y = reference::moe_layer(inputs, views, m.c.num_experts, Topology::single_node(m.c.ranks), m.clamp,
                             &e.scale);
  e.m = m;
  return e;
}

Expected expected_for(MoeCase m, uint64_t seed) {
  std::vector<workload::RankData> data = m.rows == Rows::one_per_expert
                                             ? one_row_per_expert(m.c, seed)
                                             : workload::generate(shape_of(m.c), seed);
  if (m.rows == Rows::one_per_expert) m.c.capacity = 1;
  if (m.rows == Rows::exactly_full)
    m.c.capacity = std::max<int64_t>(1, max_expert_rows(data, m.c.num_experts));
  return expected_for(m, data, seed);
}

MoeLayerOptions layer_options(const MoeCase& m) {
  MoeLayerOptions options;
  options.num_experts = m.c.num_experts;
  options.max_tokens_per_rank = m.c.max_tokens;
  options.expert_capacity = m.c.capacity;
  options.activation_clamp = m.clamp;
  return options;
}

// One rank's weights on its device.
struct DeviceWeights {
  Tensor w1, w1_scales, w2, w2_scales;
  MoeWeights view() const { return {w1, w1_scales, w2, w2_scales}; }
};
DeviceWeights upload_weights(const workload::MoeExpertWeights& host, int device, cudaStream_t stream) {
  return {to_device(host.w1, device, stream), to_device(host.w1_scales, device, stream),
          to_device(host.w2, device, stream), to_device(host.w2_scales, device, stream)};
}

// The largest |got - want| / S over y (0 where both are equal), and whether all are within tau.
struct Deviation {
  double worst = 0.0;
  bool within = true;
  std::string why;
};
Deviation deviation(const TensorView& got, const TensorView& want, const TensorView& scale, DType recipe) {
  Deviation d;
  d.within = reference::within_moe_tolerance(got, want, scale, recipe, &d.why);
  const uint16_t* g = got.as<const uint16_t>();
  const uint16_t* w = want.as<const uint16_t>();
  const float* s = scale.as<const float>();
  for (int64_t i = 0; i < got.numel(); ++i) {
    const double diff =
        std::fabs(static_cast<double>(common::bf16_to_float(g[i])) - common::bf16_to_float(w[i]));
    if (diff == 0.0) continue;
    d.worst = std::max(d.worst, s[i] > 0.0f ? diff / s[i] : INFINITY);
  }
  return d;
}

struct Report {
  std::mutex mutex;
  double worst = 0.0;
  void add(double value) {
    std::lock_guard<std::mutex> lock(mutex);
    worst = std::max(worst, value);
  }
};

void check_y(const Tensor& got, const Expected& e, int rank, const std::string& what, Failures& failures,
             Report& report) {
  const Deviation d = deviation(got, e.y[rank], e.scale[rank], e.m.weights);
  report.add(d.worst);
  if (!d.within) failures.add(rank, what + " outside the tolerance: " + d.why);
}

void bitwise(const Tensor& got, const Tensor& want, int rank, const std::string& what, Failures& failures) {
  std::string why;
  if (!workload::bitwise_equal(got, want, &why)) failures.add(rank, what + ": " + why);
}

// ---- within the tolerance of the reference, bitwise run to run ------------------------------------------

class MoeLayerCuda : public ::testing::TestWithParam<MoeCase> {};

TEST_P(MoeLayerCuda, WithinToleranceOfTheReferenceAndBitwiseRunToRun) {
  SWITCHYARD_REQUIRE_GPU();
  const uint64_t seed = seed_for("moe_cuda/" + GetParam().c.name);
  const Expected e = expected_for(GetParam(), seed);
  const MoeCase& m = e.m;
  Failures failures;
  Report report;
  // With fp8 weights the interleaved layer below takes GEMM 1's SwiGLU epilogue (in the m128 tile, whatever
  // the rows), the halves layer the separate kernels in the tiles its calls pick: every tile gives the
  // same bits (the tile test), so the two layers' y must agree bit for bit.
  with_gpu_ranks(
      m.c, Regions::symmetric,
      [&](Group& group, Buffer& buffer, cudaStream_t stream) {
        const int rank = group.rank();
        const int device = device_for_rank(rank, m.c.ranks);
        const DeviceWeights weights = upload_weights(e.weights[rank], device, stream);
        MoeLayer layer(buffer, weights.view(), layer_options(m));
        group.barrier();  // every layer made before any rank's first call (switchyard/moe.hpp)
        const DeviceInputs in = upload_inputs(e.data[rank], device, stream);
        MoeArgs args;
        args.x = in.x;
        args.topk_idx = in.topk_idx;
        args.topk_weights = in.topk_weights;
        args.stream = stream;
        // A poisoned output on even ranks (every byte must be written); the layer allocates on odd ones.
        const Tensor out = poisoned_device(DType::bf16, {e.data[rank].x.size(0), m.c.hidden}, device, stream);
        if (rank % 2 == 0) args.out_y = out;
        const Tensor first = to_host(layer.forward(args).y, stream);
        check_y(first, e, rank, "y", failures, report);
        for (int again = 0; again < 2; ++again) {
          bitwise(to_host(layer.forward(args).y, stream), first, rank, "y of a later call vs the first",
                  failures);
        }
        // The same weights with W1 in MoeGateUp::interleaved (copied on the device by interleave_gate_up):
        // the same bits; with fp8 weights that is GEMM 1's SwiGLU epilogue against the separate kernels.
        // Made after every rank's calls, before any rank's next (switchyard/moe.hpp).
        DeviceWeights interleaved = weights;
        interleaved.w1 = poisoned_device(
            weights.w1.dtype(), {weights.w1.size(0), weights.w1.size(1), weights.w1.size(2)}, device, stream);
        interleave_gate_up(weights.w1, interleaved.w1, stream);
        if (weights.w1_scales.defined()) {
          interleaved.w1_scales = poisoned_device(
              DType::f32, {weights.w1_scales.size(0), weights.w1_scales.size(1), weights.w1_scales.size(2)},
              device, stream);
          interleave_gate_up(weights.w1_scales, interleaved.w1_scales, stream);
        }
        MoeWeights view = interleaved.view();
        view.gate_up = MoeGateUp::interleaved;
        group.barrier();
        MoeLayer fused(buffer, view, layer_options(m));
        group.barrier();
        bitwise(to_host(fused.forward(args).y, stream), first, rank, "y with W1 interleaved vs halves",
                failures);
        // fp8: GEMM 2 writing each row home from its epilogue (MoeExpertOutput::home), with W1 in both
        // layouts, twice each (the combine's heap half turns over between layer calls of other layers):
        // the same bits.
        if (m.weights == DType::fp8_e4m3) {
          MoeLayerOptions home_options = layer_options(m);
          home_options.expert_output = MoeExpertOutput::home;
          group.barrier();
          MoeLayer home(buffer, weights.view(), home_options);
          MoeLayer fused_home(buffer, view, home_options);
          group.barrier();
          for (int again = 0; again < 2; ++again) {
            bitwise(to_host(home.forward(args).y, stream), first, rank, "y with rows written home vs local",
                    failures);
            bitwise(to_host(fused_home.forward(args).y, stream), first, rank,
                    "y with W1 interleaved and rows written home vs local", failures);
          }
        }
      },
      kTestTimeoutSeconds);
  std::printf("[ moe     ] %s: largest |y - y_ref| / S = %.3g (tau %.3g)\n", m.c.name.c_str(), report.worst,
              reference::moe_tolerance(m.weights));
  expect_none(failures, seed);
}

std::vector<MoeCase> cases() {
  using workload::Routing;
  std::vector<MoeCase> list;
  for (DType dtype : {DType::bf16, DType::fp8_e4m3}) {
    const std::string recipe = dtype == DType::bf16 ? "bf16" : "fp8";
    list.push_back(moe_case("Small_R1_" + recipe, 1, {7}, 8, 2, 4, dtype));
    list.push_back(moe_case(recipe + "_r2_k1", 2, {6, 5}, 8, 1, 4, dtype));
    list.push_back(moe_case(recipe + "_r4_some_ranks_empty", 4, {5, 0, 3, 0}, 6, 3, 8, dtype));
    list.push_back(moe_case(recipe + "_r2_no_tokens", 2, {0, 0}, 4, 2, 4, dtype));
    MoeCase all_invalid = moe_case(recipe + "_r4_all_slots_empty", 4, {3, 2, 4, 1}, 4, 2, 8, dtype);
    all_invalid.c = with_routing(all_invalid.c, Routing::all_invalid);
    list.push_back(all_invalid);
    MoeCase one_expert = moe_case(recipe + "_r2_one_expert_the_rest_empty", 2, {6, 4}, 6, 2, 8, dtype);
    one_expert.c = with_routing(one_expert.c, Routing::one_expert);
    list.push_back(one_expert);
    MoeCase full = moe_case(recipe + "_r2_capacity_exactly_full", 2, {8, 7}, 8, 2, 4, dtype);
    full.rows = Rows::exactly_full;
    list.push_back(full);
    MoeCase one_row = moe_case(recipe + "_r4_one_row_per_expert", 4, {2, 2, 1, 2}, 2, 2, 16, dtype);
    one_row.rows = Rows::one_per_expert;
    list.push_back(one_row);
    MoeCase clamped = moe_case(recipe + "_r2_clamped", 2, {5, 6}, 6, 2, 4, dtype);
    clamped.clamp = 0.25f;
    list.push_back(clamped);
    // Several tiles in every dimension: more than 128 rows for some experts, K over many k-blocks.
    MoeCase tiles = moe_case(recipe + "_r4_tiles", 4, {96, 80, 96, 64}, 96, 4, 8, dtype, 1024, 512);
    tiles.c = with_routing(tiles.c, Routing::skewed);
    list.push_back(tiles);
    list.push_back(moe_case(recipe + "_r8", 8, {16, 9, 16, 0, 12, 16, 3, 16}, 16, 8, 32, dtype, 512, 256));
  }
  return list;
}

INSTANTIATE_TEST_SUITE_P(Recipes, MoeLayerCuda, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<MoeCase>& info) { return info.param.c.name; });

// ---- CUDA graphs ---------------------------------------------------------------------------------------

// The layer captured once in a CUDA graph, replayed with the inputs of new rounds uploaded into the same
// device tensors: every replay equals a direct call on those inputs bit for bit, and is within the
// tolerance of the reference. The direct calls between replays drop their own handles, so a replay
// reads the tables of the captured call's handle, which the layer keeps. Captured in the thread-local
// mode and in the global one (torch.cuda.graph's default), where any thread's unrelaxed cudaMalloc
// would invalidate every capture in flight.
struct GraphCase {
  DType recipe;
  cudaStreamCaptureMode mode;
  MoeExpertOutput output = MoeExpertOutput::local;
};

std::string graph_case_name(const GraphCase& g) {
  return std::string(g.recipe == DType::bf16 ? "bf16" : "fp8") +
         (g.mode == cudaStreamCaptureModeGlobal ? "_global" : "_thread_local") +
         (g.output == MoeExpertOutput::home ? "_rows_home" : "");
}

class MoeLayerCudaGraph : public ::testing::TestWithParam<GraphCase> {};

TEST_P(MoeLayerCudaGraph, ReplaysWithNewRoutingEqualDirectCallsBitwise) {
  SWITCHYARD_REQUIRE_GPU();
  const DType recipe = GetParam().recipe;
  const std::string name = "graph_" + graph_case_name(GetParam());
  const uint64_t seed = seed_for("moe_cuda/" + name);
  MoeCase m = moe_case(name, 4, {24, 24, 24, 24}, 24, 4, 16, recipe, 512, 256);
  constexpr int kRounds = 3;
  std::vector<std::vector<workload::RankData>> drawn;
  for (int round = 0; round < kRounds; ++round)
    drawn.push_back(workload::generate(shape_of(m.c), seed + round));
  std::vector<Expected> rounds;
  for (int round = 0; round < kRounds; ++round) rounds.push_back(expected_for(m, drawn[round], seed));
  Failures failures;
  Report report;
  with_gpu_ranks(
      m.c, Regions::symmetric,
      [&](Group& group, Buffer& buffer, cudaStream_t stream) {
        const int rank = group.rank();
        const int device = device_for_rank(rank, m.c.ranks);
        const DeviceWeights weights = upload_weights(rounds[0].weights[rank], device, stream);
        MoeLayerOptions options = layer_options(m);
        options.expert_output = GetParam().output;
        MoeLayer layer(buffer, weights.view(), options);
        group.barrier();
        const DeviceInputs in = upload_inputs(rounds[0].data[rank], device, stream);
        const Tensor out = poisoned_device(DType::bf16, {in.x.size(0), m.c.hidden}, device, stream);
        MoeArgs args;
        args.x = in.x;
        args.topk_idx = in.topk_idx;
        args.topk_weights = in.topk_weights;
        args.out_y = out;
        args.stream = stream;
        check_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
        group.barrier();  // no rank captures while another still has work in flight
        cudaGraph_t graph = nullptr;
        cudaGraphExec_t exec = nullptr;
        check_cuda(cudaStreamBeginCapture(stream, GetParam().mode), "cudaStreamBeginCapture");
        layer.forward(args);
        check_cuda(cudaStreamEndCapture(stream, &graph), "cudaStreamEndCapture");
        group.barrier();  // every rank's capture has ended before any instantiates (one process, as torch)
        check_cuda(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
        group.barrier();
        for (int round = 0; round < kRounds; ++round) {
          const workload::RankData& inputs = rounds[round].data[rank];
          upload(in.x, inputs.x, stream);
          upload(in.topk_idx, inputs.topk_idx, stream);
          upload(in.topk_weights, inputs.topk_weights, stream);
          check_cuda(cudaGraphLaunch(exec, stream), "cudaGraphLaunch");
          const Tensor replayed = to_host(out, stream);
          check_y(replayed, rounds[round], rank, "replay " + std::to_string(round), failures, report);
          MoeArgs direct = args;
          direct.out_y = Tensor();
          bitwise(replayed, to_host(layer.forward(direct).y, stream), rank,
                  "replay " + std::to_string(round) + " vs a direct call", failures);
        }
        cudaGraphExecDestroy(exec);
        cudaGraphDestroy(graph);
      },
      kTestTimeoutSeconds);
  std::printf("[ moe     ] %s: largest |y - y_ref| / S = %.3g\n", name.c_str(), report.worst);
  expect_none(failures, seed);
}

INSTANTIATE_TEST_SUITE_P(
    Recipes, MoeLayerCudaGraph,
    ::testing::Values(GraphCase{DType::bf16, cudaStreamCaptureModeThreadLocal},
                      GraphCase{DType::fp8_e4m3, cudaStreamCaptureModeThreadLocal},
                      GraphCase{DType::bf16, cudaStreamCaptureModeGlobal},
                      // GEMM 2's places are written on the device from the engine's
                      // call count: a replay sends its rows to its own turn's half.
                      GraphCase{DType::fp8_e4m3, cudaStreamCaptureModeThreadLocal, MoeExpertOutput::home}),
    [](const ::testing::TestParamInfo<GraphCase>& info) { return graph_case_name(info.param); });

// ---- refusals ------------------------------------------------------------------------------------------

TEST(MoeLayerCudaRefusals, Small_R1_WeightsOnTheHostAreRefusedByName) {
  SWITCHYARD_REQUIRE_GPU();
  const MoeCase m = moe_case("host_weights", 1, {4}, 4, 2, 4, DType::bf16);
  const workload::MoeExpertWeights host =
      workload::generate_moe_weights(4, m.c.hidden, m.intermediate, DType::bf16, 1, 0);
  with_gpu_ranks(
      m.c, Regions::symmetric,
      [&](Group&, Buffer& buffer, cudaStream_t) {
        try {
          MoeLayer layer(buffer, host.weights(), layer_options(m));
          ADD_FAILURE() << "host weights on a cuda buffer were accepted";
        } catch (const InvalidArgument& error) {
          EXPECT_NE(std::string(error.what()).find("w1"), std::string::npos) << error.what();
        }
      },
      kTestTimeoutSeconds);
}

TEST(MoeLayerCudaRefusals, Small_R1_RowsHomeWithBf16WeightsAreRefusedByName) {
  SWITCHYARD_REQUIRE_GPU();
  const MoeCase m = moe_case("bf16_rows_home", 1, {4}, 4, 2, 4, DType::bf16);
  const workload::MoeExpertWeights host =
      workload::generate_moe_weights(4, m.c.hidden, m.intermediate, DType::bf16, 1, 0);
  with_gpu_ranks(
      m.c, Regions::symmetric,
      [&](Group& group, Buffer& buffer, cudaStream_t stream) {
        const DeviceWeights weights = upload_weights(host, device_for_rank(group.rank(), 1), stream);
        MoeLayerOptions options = layer_options(m);
        options.expert_output = MoeExpertOutput::home;
        try {
          MoeLayer layer(buffer, weights.view(), options);
          ADD_FAILURE() << "rows written home with bf16 weights on CUDA were accepted";
        } catch (const Unsupported& error) {
          EXPECT_NE(
              std::string(error.what()).find("expert_output: MoeExpertOutput::home on CUDA expects fp8"),
              std::string::npos)
              << error.what();
        }
      },
      kTestTimeoutSeconds);
}

}  // namespace
}  // namespace switchyard::testing::expert_major
