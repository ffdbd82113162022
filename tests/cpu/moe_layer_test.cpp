// The MoE layer (switchyard/moe.hpp, docs/MOE.md) on the CPU backend, with ranks as threads: symmetric
// dispatch, each local expert's GEMM 1, SwiGLU (and requantisation), GEMM 2, symmetric combine, bit for bit
// against the single-process reference (reference::moe_layer), in both recipes, on the edge cases of the
// issue (experts with 0 rows, 1 row and exactly full capacity; k = 1; N = 0; ranks 1, 2 and 4), and the
// named refusals of bad weights, options and calls.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "core/moe_plan.hpp"
#include "support/expert_major_cases.hpp"
#include "support/expert_major_gtest.hpp"
#include "support/refusal.hpp"
#include "support/test_seed.hpp"
#include "switchyard/moe.hpp"
#include "switchyard/reference.hpp"
#include "workload/moe_weights.hpp"
#include "workload/workload.hpp"

namespace switchyard::testing {
namespace {

using expert_major::Case;
using expert_major::Failures;
using expert_major::Regions;

// What the inputs of a case are made to contain, so that the edge case it is named after is there.
enum class Rows {
  drawn,           // the workload's routing as drawn
  one_per_expert,  // every (token, slot) names its own expert: capacity 1 is exactly full
  exactly_full,    // capacity = the most rows any expert receives
};

struct MoeCase {
  Case c;
  int intermediate = 32;
  DType weights = DType::bf16;
  float clamp = 0.0f;
  Rows rows = Rows::drawn;
  MoeExpertOutput output = MoeExpertOutput::local;
};

void PrintTo(const MoeCase& m, std::ostream* out) {
  *out << m.c.name;
}

MoeCase moe_case(std::string name, int ranks, std::vector<int64_t> tokens, int64_t max_tokens, int topk,
                 int num_experts, DType weights) {
  MoeCase m;
  const bool fp8 = weights == DType::fp8_e4m3;
  // NOTES: fp8 needs whole 128-channel blocks; bf16 runs smaller shapes to keep the loops quick.
  m.c = expert_major::make(std::move(name), ranks, std::move(tokens), max_tokens, topk, num_experts,
                           fp8 ? 256 : 64);
  m.intermediate = fp8 ? 128 : 32;
  m.weights = weights;
  return m;
}
MoeCase with_routing(MoeCase m, workload::Routing routing) {
  m.c = expert_major::with_routing(m.c, routing);
  return m;
}
MoeCase with_rows(MoeCase m, Rows rows) {
  m.rows = rows;
  return m;
}
MoeCase with_clamp(MoeCase m, float clamp) {
  m.clamp = clamp;
  return m;
}

// Rows each expert (global id) receives from every rank's topk_idx.
std::vector<int64_t> rows_per_expert(const std::vector<workload::RankData>& data, int num_experts) {
  std::vector<int64_t> rows(num_experts, 0);
  for (const workload::RankData& rank : data) {
    const int64_t* ids = rank.topk_idx.as<const int64_t>();
    for (int64_t i = 0; i < rank.topk_idx.numel(); ++i) {
      if (ids[i] >= 0) ++rows[ids[i]];
    }
  }
  return rows;
}

// Every rank's inputs, weights and expected y; the case's capacity set as its Rows say.
struct Expected {
  MoeCase m;
  std::vector<workload::RankData> data;
  std::vector<workload::MoeExpertWeights> weights;
  std::vector<Tensor> y;
};

Expected expected_for(MoeCase m, uint64_t seed) {
  Expected e;
  e.data = m.rows == Rows::one_per_expert ? expert_major::one_row_per_expert(m.c, seed)
                                          : workload::generate(expert_major::shape_of(m.c), seed);
  if (m.rows == Rows::one_per_expert) m.c.capacity = 1;
  if (m.rows == Rows::exactly_full) {
    m.c.capacity = std::max<int64_t>(1, expert_major::max_expert_rows(e.data, m.c.num_experts));
  }
  const int local_experts = m.c.num_experts / m.c.ranks;
  std::vector<MoeWeights> views;
  for (int rank = 0; rank < m.c.ranks; ++rank) {
    e.weights.push_back(
        workload::generate_moe_weights(local_experts, m.c.hidden, m.intermediate, m.weights, seed, rank));
    views.push_back(e.weights.back().weights());
  }
  std::vector<reference::RankInputs> inputs;
  for (const workload::RankData& rank : e.data) inputs.push_back(rank.inputs());
  e.y = reference::moe_layer(inputs, views, m.c.num_experts, Topology::single_node(m.c.ranks), m.clamp);
  e.m = m;
  return e;
}

MoeLayerOptions layer_options(const MoeCase& m) {
  MoeLayerOptions options;
  options.num_experts = m.c.num_experts;
  options.max_tokens_per_rank = m.c.max_tokens;
  options.expert_capacity = m.c.capacity;
  options.activation_clamp = m.clamp;
  options.expert_output = m.output;
  return options;
}

MoeArgs layer_args(const workload::RankData& data) {
  MoeArgs args;
  args.x = data.x;
  args.topk_idx = data.topk_idx;
  args.topk_weights = data.topk_weights;
  return args;
}

void compare_y(const TensorView& got, const TensorView& want, const std::string& what, int rank,
               Failures& failures) {
  std::string why;
  if (!workload::bitwise_equal(got, want, &why)) failures.add(rank, what + ": " + why);
}

// ---- bitwise against the reference ----------------------------------------------------------------

class MoeLayerMatchesReference : public ::testing::TestWithParam<MoeCase> {};

TEST_P(MoeLayerMatchesReference, BitwiseAndRunAfterRun) {
  const uint64_t seed = seed_for("moe/" + GetParam().c.name);
  const Expected e = expected_for(GetParam(), seed);
  const MoeCase& m = e.m;
  // The case holds the edge case it is named after.
  const std::vector<int64_t> rows = rows_per_expert(e.data, m.c.num_experts);
  const int64_t most = *std::max_element(rows.begin(), rows.end());
  if (m.rows == Rows::one_per_expert) {
    ASSERT_EQ(most, 1) << "capacity 1 must be exactly full";
  }
  if (m.rows == Rows::exactly_full) {
    ASSERT_EQ(most, m.c.capacity);
  }
  if (m.c.routing == workload::Routing::one_expert) {
    ASSERT_EQ(std::count(rows.begin(), rows.end(), 0), m.c.num_experts - 1) << "one expert, the rest empty";
  }

  Failures failures;
  expert_major::with_buffers(m.c, Regions::symmetric, [&](Group& group, Buffer& buffer) {
    const int rank = group.rank();
    const workload::RankData& data = e.data[rank];
    MoeLayer layer(buffer, e.weights[rank].weights(), layer_options(m));
    MoeArgs args = layer_args(data);
    // A poisoned output on even ranks (every byte must be written); the layer allocates on odd ones.
    Tensor out = expert_major::poisoned(DType::bf16, {data.x.size(0), m.c.hidden});
    if (rank % 2 == 0) args.out_y = out;
    MoeResult first = layer.forward(args);
    if (rank % 2 == 0 && first.y.data() != out.data()) failures.add(rank, "out_y was not used");
    compare_y(first.y, e.y[rank], "y vs reference", rank, failures);
    // Again, on the same workspace: the same bits.
    const Tensor kept = expert_major::host_copy(first.y);
    MoeResult second = layer.forward(layer_args(data));
    compare_y(second.y, kept, "y of a second call vs the first", rank, failures);
  });
  expert_major::expect_none(failures, seed);
}

std::vector<MoeCase> reference_cases() {
  using workload::Routing;
  std::vector<MoeCase> cases;
  for (DType dtype : {DType::bf16, DType::fp8_e4m3}) {
    const std::string recipe = dtype == DType::bf16 ? "bf16" : "fp8";
    cases.push_back(moe_case(recipe + "_r1", 1, {7}, 8, 2, 4, dtype));
    cases.push_back(moe_case(recipe + "_r2_k1", 2, {6, 5}, 8, 1, 4, dtype));
    cases.push_back(moe_case(recipe + "_r4_some_ranks_empty", 4, {5, 0, 3, 0}, 6, 3, 8, dtype));
    cases.push_back(moe_case(recipe + "_r2_no_tokens", 2, {0, 0}, 4, 2, 4, dtype));
    cases.push_back(with_routing(moe_case(recipe + "_r4_all_slots_empty", 4, {3, 2, 4, 1}, 4, 2, 8, dtype),
                                 Routing::all_invalid));
    cases.push_back(with_routing(
        moe_case(recipe + "_r2_one_expert_the_rest_empty", 2, {6, 4}, 6, 2, 8, dtype), Routing::one_expert));
    cases.push_back(
        with_routing(moe_case(recipe + "_r4_skewed", 4, {6, 5, 6, 3}, 6, 4, 8, dtype), Routing::skewed));
    cases.push_back(with_rows(moe_case(recipe + "_r2_capacity_exactly_full", 2, {8, 7}, 8, 2, 4, dtype),
                              Rows::exactly_full));
    cases.push_back(with_rows(moe_case(recipe + "_r4_one_row_per_expert", 4, {2, 2, 1, 2}, 2, 2, 16, dtype),
                              Rows::one_per_expert));
    cases.push_back(with_clamp(moe_case(recipe + "_r2_clamped", 2, {5, 6}, 6, 2, 4, dtype), 0.25f));
  }
  // Each again with the expert phase writing its rows home (MoeExpertOutput::home): the same bits.
  const size_t local_cases = cases.size();
  for (size_t i = 0; i < local_cases; ++i) {
    MoeCase home = cases[i];
    home.output = MoeExpertOutput::home;
    home.c.name += "_rows_home";
    cases.push_back(home);
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(EdgeCases, MoeLayerMatchesReference, ::testing::ValuesIn(reference_cases()),
                         [](const ::testing::TestParamInfo<MoeCase>& info) { return info.param.c.name; });

// ---- W1 with gate and up interleaved -------------------------------------------------------------------

// The rank's weights with W1 (and its scales) copied into MoeGateUp::interleaved by interleave_gate_up.
workload::MoeExpertWeights interleaved_copy(const workload::MoeExpertWeights& halves) {
  workload::MoeExpertWeights out = halves;
  const TensorView w1 = halves.w1;
  out.w1 = Tensor::empty(w1.dtype, {w1.shape[0], w1.shape[1], w1.shape[2]});
  interleave_gate_up(halves.w1, out.w1);
  if (halves.w1_scales.defined()) {
    const TensorView s = halves.w1_scales;
    out.w1_scales = Tensor::empty(s.dtype, {s.shape[0], s.shape[1], s.shape[2]});
    interleave_gate_up(halves.w1_scales, out.w1_scales);
  }
  return out;
}

class MoeLayerInterleaved : public ::testing::TestWithParam<MoeCase> {};

// The same layer with W1 in MoeGateUp::interleaved gives the reference's bits (computed on the halves):
// I = 256, so the two layouts differ (gate block 1 and up block 0 trade places).
TEST_P(MoeLayerInterleaved, GivesTheBitsOfTheHalvesLayout) {
  const uint64_t seed = seed_for("moe_interleaved/" + GetParam().c.name);
  const Expected e = expected_for(GetParam(), seed);
  const MoeCase& m = e.m;
  Failures failures;
  expert_major::with_buffers(m.c, Regions::symmetric, [&](Group& group, Buffer& buffer) {
    const int rank = group.rank();
    const workload::MoeExpertWeights copy = interleaved_copy(e.weights[rank]);
    if (std::memcmp(copy.w1.data(), e.weights[rank].w1.data(), copy.w1.nbytes()) == 0) {
      failures.add(rank, "the interleaved W1 equals the halves: the case cannot tell the layouts apart");
    }
    MoeWeights weights = copy.weights();
    weights.gate_up = MoeGateUp::interleaved;
    MoeLayer layer(buffer, weights, layer_options(m));
    compare_y(layer.forward(layer_args(e.data[rank])).y, e.y[rank], "y (W1 interleaved) vs reference", rank,
              failures);
  });
  expert_major::expect_none(failures, seed);
}

std::vector<MoeCase> interleaved_cases() {
  std::vector<MoeCase> cases;
  for (DType dtype : {DType::bf16, DType::fp8_e4m3}) {
    const std::string recipe = dtype == DType::bf16 ? "bf16" : "fp8";
    MoeCase m = moe_case(recipe + "_r2_i256", 2, {6, 5}, 8, 2, 4, dtype);
    m.intermediate = 256;
    cases.push_back(m);
    cases.push_back(with_clamp(m, 0.25f));
    cases.back().c.name = recipe + "_r2_i256_clamped";
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(GateUp, MoeLayerInterleaved, ::testing::ValuesIn(interleaved_cases()),
                         [](const ::testing::TestParamInfo<MoeCase>& info) { return info.param.c.name; });

// interleave_gate_up moves W1 in 64-row blocks (gate block b to slot 2b, up block b to slot 2b + 1) and its
// scales in single rows (each covers 128 rows of one projection) alike.
TEST(InterleaveGateUp, MovesWholeBlocksOfRowsAndOfScales) {
  const workload::MoeExpertWeights halves =
      workload::generate_moe_weights(2, 128, 256, DType::fp8_e4m3, 5, 0);
  const workload::MoeExpertWeights copy = interleaved_copy(halves);
  const int64_t row = 128, block = 64 * row, expert = 8 * block;  // bytes: H = 128 fp8, 2I = 512 rows
  for (int64_t l = 0; l < 2; ++l) {
    for (int64_t b = 0; b < 4; ++b) {
      for (int up = 0; up < 2; ++up) {
        const uint8_t* from =
            static_cast<const uint8_t*>(halves.w1.data()) + l * expert + (4 * up + b) * block;
        const uint8_t* to = static_cast<const uint8_t*>(copy.w1.data()) + l * expert + (2 * b + up) * block;
        EXPECT_EQ(std::memcmp(from, to, block), 0)
            << "expert " << l << (up ? " up" : " gate") << " block " << b;
      }
    }
    for (int64_t b = 0; b < 2; ++b) {
      for (int up = 0; up < 2; ++up) {
        const float* s_from = halves.w1_scales.as<const float>() + l * 4 + 2 * up + b;
        const float* s_to = copy.w1_scales.as<const float>() + l * 4 + 2 * b + up;
        EXPECT_EQ(*s_from, *s_to) << "scale of expert " << l << (up ? " up" : " gate") << " block " << b;
      }
    }
  }
}

TEST(InterleaveGateUp, RefusesBadTensorsByNameAndWritesNothing) {
  const workload::MoeExpertWeights halves = workload::generate_moe_weights(2, 128, 256, DType::bf16, 5, 0);
  Tensor out = expert_major::poisoned(DType::bf16, {2, 512, 128});
  const Tensor before = expert_major::host_copy(out);
  const auto refusal = [&](const TensorView& in, const TensorView& to) {
    return invalid_argument_message([&] { interleave_gate_up(in, to); });
  };
  EXPECT_TRUE(contains(refusal(TensorView(), out), "halves: expected w1 [L, 2I, H]"));
  Tensor i64 = Tensor::empty(DType::i64, {2, 512, 128});
  EXPECT_TRUE(contains(refusal(i64, out), "halves: expected w1 [L, 2I, H] (bf16 or fp8_e4m3)"));
  const workload::MoeExpertWeights odd = workload::generate_moe_weights(2, 128, 64, DType::bf16, 5, 0);
  EXPECT_TRUE(contains(refusal(odd.w1, out), "halves: expected dimension 1 (2I) a multiple of 256"));
  Tensor small = Tensor::empty(DType::bf16, {2, 256, 128});
  EXPECT_TRUE(contains(refusal(halves.w1, small), "out: expected a tensor like halves"));
  Tensor fp8 = Tensor::empty(DType::fp8_e4m3, {2, 512, 128});
  EXPECT_TRUE(contains(refusal(halves.w1, fp8), "out: expected a tensor like halves"));
  EXPECT_TRUE(contains(refusal(halves.w1, halves.w1), "out: expected memory apart from halves'"));
  EXPECT_EQ(std::memcmp(out.data(), before.data(), out.nbytes()), 0) << "a refused copy wrote into out";
}

// ---- the heap-resident tensors ---------------------------------------------------------------------

// A Buffer with the symmetric engine's heap-resident tensors: the layer's GEMM 2 writes its outputs
// there, so the pull combine runs with ranks in separate processes (HeapSharing::processes: no plain
// pointer reaches a peer), and x may be the heap input (read in place). Bitwise the reference, twice.
TEST(MoeLayerExpectedRows, EvenRoutingRoundedUpPicksTheGemmTileOfTheCall) {
  // DeepSeek-V3 decode and prefill on 8 ranks: what the CUDA path picks its GEMMs' tile from.
  EXPECT_EQ(detail::moe_expected_rows_per_expert(128, 8, 8, 256), 32);
  EXPECT_EQ(detail::moe_expected_rows_per_expert(4096, 8, 8, 256), 1024);
  EXPECT_EQ(detail::moe_expected_rows_per_expert(3, 1, 1, 2), 2);  // rounded up
  EXPECT_EQ(detail::moe_expected_rows_per_expert(0, 8, 8, 256), 0);
  EXPECT_EQ(detail::moe_expected_rows_per_expert(128, 8, 8, 0), 0);
}

TEST(MoeLayerHeapTensors, PullCombineAcrossProcessesFromTheHeapMatchesTheReference) {
  // Every heap tensor the layer uses: x (round 1), the expert outputs, and with fp8 the dispatch's outputs.
  for (DType dtype : {DType::bf16, DType::fp8_e4m3}) {
    const MoeCase m =
        moe_case(dtype == DType::bf16 ? "heap_bf16_r4" : "heap_fp8_r4", 4, {5, 3, 6, 0}, 6, 2, 8, dtype);
    const uint64_t seed = seed_for("moe/" + m.c.name);
    const Expected e = expected_for(m, seed);
    Failures failures;
    run_ranks(m.c.ranks, [&](Group& group) {
      const int rank = group.rank();
      BufferOptions options = expert_major::buffer_options(m.c, rank, Regions::symmetric);
      options.sharing = HeapSharing::processes;
      options.config.symmetric_combine = SymmetricCombine::pull;
      options.sizing.symmetric_heap_input = true;
      options.sizing.symmetric_heap_output_rows_per_expert = expert_major::rows_per_expert(m.c);
      // fp8: the layer's recv_x and scales in the heap receive area (where the CUDA dispatch pushes them).
      if (dtype == DType::fp8_e4m3)
        options.sizing.symmetric_heap_receive_rows_per_expert = expert_major::rows_per_expert(m.c);
      Buffer buffer(options);
      buffer.connect(group.allgather(buffer.local_handle()));
      if (buffer.symmetric_combine_path() != SymmetricCombine::pull)
        failures.add(rank, "not the pull combine");
      MoeLayer layer(buffer, e.weights[rank].weights(), layer_options(m));
      const workload::RankData& data = e.data[rank];
      for (int round = 0; round < 2; ++round) {
        MoeArgs args = layer_args(data);
        if (round == 1) {  // x from the heap input
          const TensorView x = buffer.symmetric_input(data.x.size(0), m.c.hidden);
          std::memcpy(x.data, data.x.data(), x.nbytes());
          args.x = x;
        }
        MoeResult result = layer.forward(args);
        compare_y(result.y, e.y[rank], "y (round " + std::to_string(round) + ")", rank, failures);
      }
      group.barrier();
    });
    expert_major::expect_none(failures, seed);
  }
}

// Rows written home need no heap-resident expert outputs across processes, whichever combine path the
// buffer has: the combine moves nothing and reads only its own combine buffer. Three rounds, with a plain
// symmetric dispatch and combine of the same tokens between rounds 1 and 2 on the push path.
TEST(MoeLayerRowsHome, AcrossProcessesWithoutHeapOutputsOnBothCombinePaths) {
  for (DType dtype : {DType::bf16, DType::fp8_e4m3}) {
    for (SymmetricCombine path : {SymmetricCombine::push, SymmetricCombine::pull}) {
      MoeCase m = moe_case(std::string("rows_home_") + (dtype == DType::bf16 ? "bf16" : "fp8") +
                               (path == SymmetricCombine::push ? "_push" : "_pull"),
                           4, {5, 3, 6, 0}, 6, 2, 8, dtype);
      m.output = MoeExpertOutput::home;
      const uint64_t seed = seed_for("moe/" + m.c.name);
      const Expected e = expected_for(m, seed);
      Failures failures;
      run_ranks(m.c.ranks, [&](Group& group) {
        const int rank = group.rank();
        BufferOptions options = expert_major::buffer_options(m.c, rank, Regions::symmetric);
        options.sharing = HeapSharing::processes;
        options.config.symmetric_combine = path;
        // pull across processes is accepted at connect only with heap-resident expert outputs: one row per
        // expert, which the layer's outputs do not fit (MoeExpertOutput::local is refused with it, below).
        if (path == SymmetricCombine::pull) options.sizing.symmetric_heap_output_rows_per_expert = 1;
        Buffer buffer(options);
        buffer.connect(group.allgather(buffer.local_handle()));
        if (buffer.symmetric_combine_path() != path) failures.add(rank, "not the combine path asked for");
        if (path == SymmetricCombine::pull) {
          MoeLayerOptions local = layer_options(m);
          local.expert_output = MoeExpertOutput::local;
          const std::string message =
              invalid_argument_message([&] { MoeLayer refused(buffer, e.weights[rank].weights(), local); });
          if (!contains(message, "symmetric_heap_output_rows_per_expert"))
            failures.add(rank, "local rows without room in the heap: " + message);
        }
        MoeLayer layer(buffer, e.weights[rank].weights(), layer_options(m));
        const workload::RankData& data = e.data[rank];
        for (int round = 0; round < 3; ++round) {
          // A plain pair of symmetric calls in between (push: the pull combine across processes reads only
          // heap-resident expert outputs, which have one row per expert here).
          if (round == 2 && path == SymmetricCombine::push) {
            LowLatencyDispatchArgs dispatch;
            dispatch.x = data.x;
            dispatch.topk_idx = data.topk_idx;
            dispatch.max_tokens_per_rank = m.c.max_tokens;
            dispatch.num_experts = m.c.num_experts;
            LowLatencyDispatchResult received = buffer.symmetric_dispatch(dispatch);
            LowLatencyCombineArgs combine;
            combine.x = received.recv_x;
            combine.topk_idx = data.topk_idx;
            combine.topk_weights = data.topk_weights;
            combine.handle = &received.handle;
            buffer.symmetric_combine(combine);
          }
          MoeResult result = layer.forward(layer_args(data));
          compare_y(result.y, e.y[rank], "y (round " + std::to_string(round) + ")", rank, failures);
        }
        group.barrier();
      });
      expert_major::expect_none(failures, seed);
    }
  }
}

TEST(MoeLayerHeapTensors, PullAcrossProcessesWithoutRoomInTheHeapIsRefusedNamingTheSizing) {
  const MoeCase m = moe_case("heap_too_small", 1, {4}, 4, 2, 4, DType::bf16);
  BufferOptions options = expert_major::buffer_options(m.c, 0, Regions::symmetric);
  options.sharing = HeapSharing::processes;
  options.config.symmetric_combine = SymmetricCombine::pull;
  options.sizing.symmetric_heap_output_rows_per_expert = 2;  // the layer's capacity is 4
  Buffer buffer(options);
  buffer.connect({buffer.local_handle()});
  const workload::MoeExpertWeights w = workload::generate_moe_weights(4, 64, 32, DType::bf16, 1, 0);
  const std::string message =
      invalid_argument_message([&] { MoeLayer layer(buffer, w.weights(), layer_options(m)); });
  EXPECT_TRUE(
      contains(message, "sizing.symmetric_heap_output_rows_per_expert >= the layer's expert capacity 4"))
      << message;
  EXPECT_TRUE(contains(message, "got 2")) << message;
}

// ---- rank masks -----------------------------------------------------------------------------------

// Every rank masks rank 1 (Buffer::update_mask), rank 1 included, and every rank calls the layer: the
// survivors' y is the reference's on the survivors' routing (slots of rank 1's experts dropped), and rank 1,
// which reaches no one, gets +0.0. With the rows written home too: no row goes to a masked home.
TEST(MoeLayerRankMask, AMaskedRanksExpertsAreDroppedAndItsOwnYIsZero) {
  for (DType dtype : {DType::bf16, DType::fp8_e4m3}) {
    for (MoeExpertOutput output : {MoeExpertOutput::local, MoeExpertOutput::home}) {
      MoeCase m = moe_case(std::string("masked_") + (dtype == DType::bf16 ? "bf16" : "fp8") +
                               (output == MoeExpertOutput::home ? "_rows_home" : "_local"),
                           4, {5, 4, 6, 3}, 6, 2, 8, dtype);
      m.output = output;
      const uint64_t seed = seed_for("moe/" + m.c.name);
      const std::vector<workload::RankData> data = workload::generate(expert_major::shape_of(m.c), seed);
      const std::vector<workload::RankData> survivors = expert_major::survivors_routing(data, m.c, {1});
      const int local_experts = m.c.num_experts / m.c.ranks;
      std::vector<workload::MoeExpertWeights> weights;
      std::vector<MoeWeights> views;
      std::vector<reference::RankInputs> inputs;
      for (int rank = 0; rank < m.c.ranks; ++rank) {
        weights.push_back(
            workload::generate_moe_weights(local_experts, m.c.hidden, m.intermediate, m.weights, seed, rank));
        views.push_back(weights.back().weights());
        inputs.push_back(survivors[rank].inputs());
      }
      const std::vector<Tensor> expected =
          reference::moe_layer(inputs, views, m.c.num_experts, Topology::single_node(m.c.ranks), m.clamp);
      Failures failures;
      expert_major::with_buffers(m.c, Regions::symmetric, [&](Group& group, Buffer& buffer) {
        const int rank = group.rank();
        buffer.update_mask(1, true);
        MoeLayer layer(buffer, weights[rank].weights(), layer_options(m));
        const MoeResult result = layer.forward(layer_args(data[rank]));  // the routing as given
        compare_y(result.y, expected[rank], "y with rank 1 masked", rank, failures);
      });
      expert_major::expect_none(failures, seed);
    }
  }
}

// ---- capacity -------------------------------------------------------------------------------------

TEST(MoeLayerCapacity, AnExpertPastItsCapacityRaisesCapacityErrorOnEveryRank) {
  MoeCase m =
      with_routing(moe_case("overflow", 2, {4, 4}, 4, 2, 4, DType::bf16), workload::Routing::one_expert);
  m.c.capacity = 3;  // one expert receives all 8 rows
  const uint64_t seed = seed_for("moe/overflow");
  const std::vector<workload::RankData> data = workload::generate(expert_major::shape_of(m.c), seed);
  ASSERT_GT(expert_major::max_expert_rows(data, m.c.num_experts), m.c.capacity);
  for (MoeExpertOutput output : {MoeExpertOutput::local, MoeExpertOutput::home}) {
    m.output = output;
    Failures failures;
    expert_major::with_buffers(m.c, Regions::symmetric, [&](Group& group, Buffer& buffer) {
      const int rank = group.rank();
      const workload::MoeExpertWeights weights =
          workload::generate_moe_weights(2, m.c.hidden, m.intermediate, m.weights, seed, rank);
      MoeLayer layer(buffer, weights.weights(), layer_options(m));
      const std::string message =
          expert_major::refused<CapacityError>([&] { layer.forward(layer_args(data[rank])); });
      if (message.rfind("expert_capacity:", 0) != 0)
        failures.add(rank, "expected a CapacityError, got: " + message);
    });
    expert_major::expect_none(failures, seed);
  }
}

// ---- refusals -------------------------------------------------------------------------------------

// One rank with a symmetric region (H 64, k 2, 4 experts, 4 tokens) and good bf16 and fp8 weights.
class MoeLayerRefuses : public ::testing::Test {
 protected:
  void SetUp() override {
    c_ = expert_major::make("refusals", 1, {4}, 4, 2, 4, 256);
    buffer_ = std::make_unique<Buffer>(expert_major::buffer_options(c_, 0, Regions::symmetric));
    buffer_->connect({buffer_->local_handle()});
    bf16_ = workload::generate_moe_weights(4, 256, 128, DType::bf16, 7, 0);
    fp8_ = workload::generate_moe_weights(4, 256, 128, DType::fp8_e4m3, 7, 0);
    data_ = workload::generate(expert_major::shape_of(c_), 11)[0];
    options_.num_experts = 4;
    options_.max_tokens_per_rank = 4;
  }

  // The InvalidArgument message of making a layer with these weights and options.
  std::string construction(const MoeWeights& weights, const MoeLayerOptions& options) {
    return invalid_argument_message([&] { MoeLayer layer(*buffer_, weights, options); });
  }
  std::string construction(const MoeWeights& weights) { return construction(weights, options_); }

  Case c_;
  std::unique_ptr<Buffer> buffer_;
  workload::MoeExpertWeights bf16_, fp8_;
  workload::RankData data_;
  MoeLayerOptions options_;
};

TEST_F(MoeLayerRefuses, WeightsOfTheWrongDtypeShapeOrDevice) {
  MoeWeights w = bf16_.weights();
  Tensor f32 = Tensor::empty(DType::f32, {4, 256, 256});
  w.w1 = f32;
  EXPECT_TRUE(contains(construction(w), "weights.w1: expected dtype bf16 or fp8_e4m3, got f32[4, 256, 256]"));

  w = bf16_.weights();
  w.w1.shape[0] = 3;
  EXPECT_TRUE(contains(construction(w), "weights.w1: expected size 4 in dimension 0 (local experts"));

  w = bf16_.weights();
  w.w1.shape[1] = 255;
  EXPECT_TRUE(contains(construction(w), "weights.w1: expected an even number of rows"));

  w = bf16_.weights();
  w.w1.shape[2] = 100;  // not a multiple of 8
  EXPECT_TRUE(contains(construction(w),
                       "weights.w1: expected H (dimension 2, at most BufferSizing::hidden) a "
                       "positive multiple of 8 up to 256"));

  w = bf16_.weights();
  w.w2.shape[2] = 64;
  EXPECT_TRUE(contains(construction(w), "weights.w2: expected size 128 in dimension 2 ([L, H, I]"));

  w = bf16_.weights();
  w.w2 = fp8_.w2;
  EXPECT_TRUE(contains(construction(w), "weights.w2: expected dtype bf16, got fp8_e4m3"));

  // A tensor on a GPU, for a cpu Buffer: refused by its device before anything reads it.
  w = bf16_.weights();
  w.w2.device = Device::cuda;
  EXPECT_TRUE(
      contains(construction(w), "weights.w2: expected a tensor on cpu, got bf16[4, 256, 128] on cuda:0"));
}

TEST_F(MoeLayerRefuses, InterleavedGateUpNeedsWholeBlocks) {
  const workload::MoeExpertWeights narrow = workload::generate_moe_weights(4, 256, 32, DType::bf16, 7, 0);
  MoeWeights w = narrow.weights();
  w.gate_up = MoeGateUp::interleaved;
  EXPECT_TRUE(contains(construction(w), "weights.gate_up: MoeGateUp::interleaved expects I"));
  EXPECT_TRUE(contains(construction(w), "got I = 32"));
  w.gate_up = static_cast<MoeGateUp>(7);
  EXPECT_TRUE(contains(construction(w), "weights.gate_up: expected MoeGateUp::halves or"));
}

TEST_F(MoeLayerRefuses, ScalesThatDoNotMatchTheRecipe) {
  MoeWeights w = fp8_.weights();
  w.w1_scales = TensorView();
  EXPECT_TRUE(
      contains(construction(w), "weights.w1_scales: expected a f32 tensor with 3 dimensions, got none"));

  w = fp8_.weights();
  w.w2_scales.shape[1] = 1;
  EXPECT_TRUE(
      contains(construction(w), "weights.w2_scales: expected size 2 in dimension 1 ([L, H / 128, I / 128]"));

  w = bf16_.weights();
  w.w1_scales = fp8_.w1_scales;
  EXPECT_TRUE(contains(construction(w), "weights.w1_scales: expected none (bf16 weights have no scales)"));

  // fp8 channels come in whole 128-channel blocks.
  Tensor odd_w1 = Tensor::empty(DType::fp8_e4m3, {4, 2 * 64, 256});
  w = fp8_.weights();
  w.w1 = odd_w1;
  EXPECT_TRUE(
      contains(construction(w), "weights.w1: expected I (half of dimension 1) a positive multiple of 128"));
}

TEST_F(MoeLayerRefuses, AnExpertOutputThatIsNotOne) {
  MoeLayerOptions options = options_;
  options.expert_output = static_cast<MoeExpertOutput>(7);
  const std::string message = construction(bf16_.weights(), options);
  EXPECT_TRUE(
      contains(message, "expert_output: expected MoeExpertOutput::local or MoeExpertOutput::home, got 7"))
      << message;
}

TEST_F(MoeLayerRefuses, ExpertCountsTokenBoundsAndClamp) {
  MoeLayerOptions options = options_;
  options.num_experts = 6;  // more than the sizing's 4
  EXPECT_TRUE(contains(construction(bf16_.weights(), options), "num_experts: expected at most 4"));
  options.num_experts = 0;
  EXPECT_TRUE(contains(construction(bf16_.weights(), options), "num_experts: expected a positive multiple"));
  options = options_;
  options.max_tokens_per_rank = 5;
  EXPECT_TRUE(
      contains(construction(bf16_.weights(), options),
               "max_tokens_per_rank: expected 1..4 (BufferSizing::symmetric_max_tokens_per_rank), got 5"));
  options = options_;
  options.expert_capacity = 5;
  EXPECT_TRUE(contains(construction(bf16_.weights(), options), "expert_capacity: expected 0"));
  options = options_;
  options.activation_clamp = -1.0f;
  EXPECT_TRUE(contains(construction(bf16_.weights(), options), "activation_clamp: expected 0 (no clamp)"));
  options.activation_clamp = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(contains(construction(bf16_.weights(), options), "activation_clamp: expected 0 (no clamp)"));
  // The weights' experts are the buffer's local experts: 2 experts on 1 rank is 2 local, not 4.
  options = options_;
  options.num_experts = 2;
  EXPECT_TRUE(contains(construction(bf16_.weights(), options), "weights.w1: expected size 2 in dimension 0"));
}

TEST(MoeLayerRefusal, ABufferWithoutASymmetricRegion) {
  const Case c = expert_major::make("no_region", 1, {4}, 4, 2, 4, 64);
  Buffer buffer(expert_major::buffer_options(c, 0, Regions::low_latency));
  buffer.connect({buffer.local_handle()});
  const workload::MoeExpertWeights w = workload::generate_moe_weights(4, 64, 32, DType::bf16, 1, 0);
  MoeLayerOptions options;
  options.num_experts = 4;
  options.max_tokens_per_rank = 4;
  EXPECT_TRUE(contains(invalid_argument_message([&] { MoeLayer layer(buffer, w.weights(), options); }),
                       "MoeLayer: expected a buffer with a symmetric region"));
}

TEST_F(MoeLayerRefuses, CallsWithBadTensorsWriteNothing) {
  MoeLayer layer(*buffer_, bf16_.weights(), options_);
  Tensor out = expert_major::poisoned(DType::bf16, {4, 256});
  auto refused = [&](MoeArgs args) {
    args.out_y = out;
    return invalid_argument_message([&] { layer.forward(args); });
  };
  MoeArgs args = layer_args(data_);
  Tensor f32_x = Tensor::empty(DType::f32, {4, 256});
  args.x = f32_x;
  EXPECT_TRUE(contains(refused(args), "x: expected dtype bf16, got f32[4, 256]"));
  args = layer_args(data_);
  args.x.shape[1] = 128;
  EXPECT_TRUE(contains(refused(args), "x: expected size 256 in dimension 1 (H of the weights)"));
  args = layer_args(data_);
  Tensor fp8_x = Tensor::empty(DType::fp8_e4m3, {4, 256});
  args.x = fp8_x;
  EXPECT_TRUE(contains(refused(args), "x: expected bf16 with bf16 weights"));
  args = layer_args(data_);
  args.topk_weights = TensorView();
  EXPECT_TRUE(contains(refused(args), "topk_weights: expected a f32 tensor with 2 dimensions, got none"));
  args = layer_args(data_);
  args.topk_weights.shape[1] = 1;
  EXPECT_TRUE(contains(refused(args), "topk_weights: expected size 2 in dimension 1 (k of topk_idx)"));
  args = layer_args(data_);
  data_.topk_idx.as<int64_t>()[3] = 4;  // past the 4 experts
  EXPECT_TRUE(contains(refused(args), "topk_idx: expected expert ids in [-1, 4), got 4 at token 1, slot 1"));
  data_.topk_idx.as<int64_t>()[3] = 0;
  Tensor small_out = Tensor::empty(DType::bf16, {3, 256});
  args = layer_args(data_);
  args.out_y = small_out;
  EXPECT_TRUE(contains(invalid_argument_message([&] { layer.forward(args); }),
                       "out_y: expected size 4 in dimension 0 (num_tokens of x)"));
  EXPECT_TRUE(expert_major::all_poison(out)) << "a refused call wrote its output";
}

}  // namespace
}  // namespace switchyard::testing
