#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <set>
#include <string>
#include <utility>

#include "common/moe_fused_schedule.hpp"
#include "core/device_memory.hpp"
#include "cuda/backend/dependent_launch.hpp"
#include "cuda/backend/kernel_preload.hpp"
#include "cuda/moe/experts.hpp"
#include "cuda/moe/swiglu_kernel.hpp"
#include "device/cuda_check.hpp"
#include "device/ptx.cuh"
#include "switchyard/errors.hpp"

namespace switchyard::cuda {

namespace {

// The fp8 layer's tiles for few rows per expert and for many (moe_gemm_tiles_for).
constexpr MoeGemmTiles kFewRowsTiles{GroupedGemmTile::m64_pingpong, GroupedGemmTile::m64_pingpong};
constexpr MoeGemmTiles kManyRowsTiles{GroupedGemmTile::m128, GroupedGemmTile::m128};

// W1 in MoeGateUp::interleaved with fp8 weights: GEMM 1 applies SwiGLU and the requantisation in its
// epilogue and writes a directly (swiglu_epilogue.cuh), whatever the rows.
bool gemm1_applies_swiglu(const detail::MoeExpertsPlan& plan) {
  return plan.fp8 && plan.weights.gate_up == common::MoeGateUp::interleaved;
}

// {M_g, N, K} of both GEMMs for every local expert g: M_g = min(recv_count[g], C). The dispatch refuses
// a call whose rows overflow C (CapacityError) before this runs; the bound keeps a count past C from
// reaching outside the workspace all the same.
__global__ void write_problem_shapes(const int32_t* recv_count, int groups, int64_t capacity, int32_t* gemm1,
                                     int n1, int k1, int32_t* gemm2, int n2, int k2) {
  ptx::wait_for_previous_grid();  // launched by launch_dependent: before any global access
  for (int g = threadIdx.x; g < groups; g += blockDim.x) {
    const int32_t rows = static_cast<int32_t>(recv_count[g] < capacity ? recv_count[g] : capacity);
    gemm1[3 * g + 0] = rows;
    gemm1[3 * g + 1] = n1;
    gemm1[3 * g + 2] = k1;
    gemm2[3 * g + 0] = rows;
    gemm2[3 * g + 1] = n2;
    gemm2[3 * g + 2] = k2;
  }
}

// places[g * C + r], for every received row r < min(recv_count[g], C) of local expert g: where GEMM 2's
// epilogue sends the row (common::SymmetricHomeRows::place: its home's combine row, or null where nothing
// is written). Rows past the count are never read (the GEMM's M_g stops there). The combine's half is read
// from the engine's count on the device, so a graph replay writes its own turn's.
__global__ void write_home_places(const __grid_constant__ common::SymmetricHomeRows home,
                                  const int32_t* recv_count, int groups, int64_t capacity, uint8_t** places) {
  ptx::wait_for_previous_grid();  // launched by launch_dependent: before any global access
  const int half = home.combine_half();
  const int64_t total = static_cast<int64_t>(groups) * capacity;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int g = static_cast<int>(i / capacity);
    const int64_t row = i % capacity;
    if (row >= recv_count[g]) continue;
    places[i] = home.place(g, row, half);
  }
}

}  // namespace

void prepare_moe_kernels(int device) {
  // Once per device, as the engines' kernels (cuda/backend/kernel_preload.hpp says why).
  static std::mutex mutex;
  static std::set<int> prepared;
  const std::lock_guard<std::mutex> lock(mutex);
  if (!prepared.insert(device).second) return;
  preload_kernel(write_problem_shapes);
  preload_kernel(write_home_places);
  moe_kernels::preload_swiglu_kernels();
  prepare_grouped_gemms();
}

bool moe_gemm_tiles_from_environment(MoeGemmTiles& tiles) {
  const char* text = std::getenv("SWITCHYARD_MOE_GEMM_TILES");
  if (text == nullptr || *text == '\0') return false;
  const std::string value = text;
  const size_t comma = value.find(',');
  if (comma == std::string::npos) {
    throw InvalidArgument("SWITCHYARD_MOE_GEMM_TILES: expected '<gemm 1 tile>,<gemm 2 tile>', got '" + value +
                          "'");
  }
  tiles.gemm1 = grouped_gemm_tile_from_name(value.substr(0, comma), "SWITCHYARD_MOE_GEMM_TILES (gemm 1)");
  tiles.gemm2 = grouped_gemm_tile_from_name(value.substr(comma + 1), "SWITCHYARD_MOE_GEMM_TILES (gemm 2)");
  return true;
}

bool moe_few_rows(int64_t expected_rows_per_expert) {
  return common::moe_fused_block_m(expected_rows_per_expert) == common::kMoeFusedSmallBlockM;
}

MoeGemmTiles moe_gemm_tiles_for(int64_t expected_rows_per_expert) {
  return moe_few_rows(expected_rows_per_expert) ? kFewRowsTiles : kManyRowsTiles;
}

MoeGemmTiles moe_gemm_tiles_in_effect(const detail::MoeExpertsPlan& plan, MoeGemmTiles wanted) {
  // The bf16 kernels come in one tile.
  if (!plan.fp8) return MoeGemmTiles{};
  // The SwiGLU kernel comes in the m128 tile alone (the pair's exchange is written for it); the interleaved
  // W1's 128-row tiles hold two scale blocks, which only that kernel reads.
  if (gemm1_applies_swiglu(plan)) wanted.gemm1 = GroupedGemmTile::m128;
  // Rows written home (MoeExpertOutput::home): the fp8 kernel whose epilogue sends each row to its place, in
  // the m128 tile alone (home_rows_epilogue.cuh).
  if (plan.rows_home) wanted.gemm2 = GroupedGemmTile::m128;
  return wanted;
}

MoeGroupedGemms make_moe_grouped_gemms(const detail::MoeExpertsPlan& plan, cudaStream_t stream,
                                       MoeGemmTiles wanted, uint8_t* const* home_places,
                                       const MoeGroupedGemms* share) {
  const common::MoeWeightLayout& w = plan.weights;
  const common::MoeWorkspaceLayout& space = plan.workspace;
  const int hidden = space.hidden, intermediate = space.intermediate;
  const int64_t capacity = space.capacity;
  const MoeGemmTiles tiles = moe_gemm_tiles_in_effect(plan, wanted);
  const bool fused = gemm1_applies_swiglu(plan);
  GroupedGemmOperands gemm1;  // h = bf16(recv_x . W1^T) (fused: a = swiglu(h), h in registers)
  gemm1.groups = space.local_experts;
  gemm1.n = 2 * intermediate;
  gemm1.k = hidden;
  gemm1.a = plan.recv_x;
  gemm1.a_group_stride = capacity * hidden;
  gemm1.b = plan.w1;
  gemm1.b_group_stride = w.w1_row(1, 0) - w.w1_row(0, 0);
  if (fused) {
    gemm1.swiglu = GroupedGemmSwigluOutputs{space, plan.activation_clamp,
                                            static_cast<uint8_t*>(plan.activations), plan.activation_scales};
  } else {
    gemm1.d = plan.gate_up;
    gemm1.d_group_stride = capacity * 2 * intermediate;
  }
  GroupedGemmOperands gemm2;  // o = a . W2^T
  gemm2.groups = space.local_experts;
  gemm2.n = hidden;
  gemm2.k = intermediate;
  gemm2.a = plan.activations;
  gemm2.a_group_stride = capacity * intermediate;
  gemm2.b = plan.w2;
  gemm2.b_group_stride = w.w2_row(1, 0) - w.w2_row(0, 0);
  gemm2.d = plan.out;
  gemm2.d_group_stride = capacity * hidden;
  // Rows written home (MoeExpertOutput::home): o in the workspace is not written.
  const bool home = plan.rows_home;
  if (home) {
    if (!plan.fp8 || home_places == nullptr) {
      throw Error(
          "MoeLayer: the expert phase writes rows home only with fp8 weights and their places (internal)");
    }
    gemm2.home = GroupedGemmHomeOutputs{home_places, capacity};
  }
  if (plan.fp8) {
    gemm1.a_scales = plan.recv_x_scales;
    gemm1.a_scales_group_stride = space.hidden_scales_row(1, 0) - space.hidden_scales_row(0, 0);
    gemm1.b_scales = plan.w1_scales;
    gemm1.b_scales_group_stride = w.w1_scales_row(1, 0) - w.w1_scales_row(0, 0);
    gemm2.a_scales = plan.activation_scales;
    gemm2.a_scales_group_stride = space.activation_scales_row(1, 0) - space.activation_scales_row(0, 0);
    gemm2.b_scales = plan.w2_scales;
    gemm2.b_scales_group_stride = w.w2_scales_row(1, 0) - w.w2_scales_row(0, 0);
  }
  // share's runner where its tile is this one, else a new one.
  const auto built = [&](const std::shared_ptr<GroupedGemm>& theirs, GroupedGemmTile their_tile,
                         GroupedGemmKind kind, const GroupedGemmOperands& operands,
                         GroupedGemmTile tile) -> std::shared_ptr<GroupedGemm> {
    if (theirs && their_tile == tile) return theirs;
    return make_grouped_gemm(kind, operands, stream, tile);
  };
  const MoeGroupedGemms none;
  const MoeGroupedGemms& other = share != nullptr ? *share : none;
  const GroupedGemmKind plain = plan.fp8 ? GroupedGemmKind::fp8_to_bf16 : GroupedGemmKind::bf16_to_bf16;
  MoeGroupedGemms gemms;
  gemms.gemm1_applies_swiglu = fused;
  gemms.tiles = tiles;
  gemms.gemm1 = built(other.gemm1, other.tiles.gemm1, fused ? GroupedGemmKind::fp8_swiglu_to_fp8 : plain,
                      gemm1, tiles.gemm1);
  gemms.gemm2 = built(other.gemm2, other.tiles.gemm2, home ? GroupedGemmKind::fp8_to_bf16_home : plain, gemm2,
                      tiles.gemm2);
  return gemms;
}

CudaMoeExperts::CudaMoeExperts(const detail::MoeExpertsPlan& plan, cudaStream_t stream,
                               std::function<void(cudaStream_t)> barrier)
    : plan_(plan), barrier_(std::move(barrier)) {
  uint8_t* const* places = nullptr;
  if (plan.rows_home) {
    int device = 0;
    SY_CUDA_CHECK(cudaGetDevice(&device));
    const int64_t rows = int64_t{plan.workspace.local_experts} * plan.workspace.capacity;
    home_places_ = detail::allocate_cuda_bytes(static_cast<size_t>(rows) * sizeof(uint8_t*), device, stream);
    places = static_cast<uint8_t* const*>(home_places_.get());
  }
  MoeGemmTiles tiles;
  if (moe_gemm_tiles_from_environment(tiles) || !plan.fp8) {
    many_rows_ = make_moe_grouped_gemms(plan, stream, tiles, places);
    return;
  }
  many_rows_ = make_moe_grouped_gemms(plan, stream, kManyRowsTiles, places);
  // A few-rows pair only where a tile in effect differs (with SwiGLU in GEMM 1 and rows written home, both
  // GEMMs come in m128 alone, and the pairs would be the same kernels twice); a GEMM whose tile agrees is
  // many_rows_'s runner.
  const MoeGemmTiles few = moe_gemm_tiles_in_effect(plan, kFewRowsTiles);
  if (few.gemm1 != many_rows_.tiles.gemm1 || few.gemm2 != many_rows_.tiles.gemm2)
    few_rows_ = make_moe_grouped_gemms(plan, stream, kFewRowsTiles, places, &many_rows_);
}

void CudaMoeExperts::run(const detail::MoeExpertsCall& call) {
  detail::check_home_rows_given(plan_, call);
  const cudaStream_t stream = static_cast<cudaStream_t>(call.stream);
  const auto mark = [&](int index) {
    if (call.marks) SY_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(call.marks[index]), stream));
  };
  // Every tile gives the same bits (tests/cuda/moe_grouped_gemm_tile_test.cpp): the pick changes speed only.
  const MoeGroupedGemms& gemms =
      few_rows_.gemm1 && moe_few_rows(call.expected_rows_per_expert) ? few_rows_ : many_rows_;
  GroupedGemm* const gemm1 = gemms.gemm1.get();
  GroupedGemm* const gemm2 = gemms.gemm2.get();
  const common::MoeWorkspaceLayout& space = plan_.workspace;
  const int groups = space.local_experts;
  launch_dependent(write_problem_shapes, 1, 256, 0, stream, plan_.recv_count, groups, space.capacity,
                   gemm1->problem_shapes(), 2 * space.intermediate, space.hidden, gemm2->problem_shapes(),
                   space.hidden, space.intermediate);
  if (call.home_rows != nullptr) {
    constexpr int kThreads = 256;
    const int64_t rows = int64_t{groups} * space.capacity;
    const int blocks = static_cast<int>(std::min<int64_t>((rows + kThreads - 1) / kThreads, 1024));
    launch_dependent(write_home_places, blocks, kThreads, 0, stream, *call.home_rows, plan_.recv_count,
                     groups, space.capacity, static_cast<uint8_t**>(home_places_.get()));
  }
  mark(0);
  gemm1->run(stream);
  mark(1);

  // With the SwiGLU epilogue, GEMM 1 has written a: the SwiGLU phase is inside GEMM 1.
  if (!gemms.gemm1_applies_swiglu) {
    const moe_kernels::SwigluArgs swiglu{plan_.weights,          space,
                                         plan_.gate_up,          plan_.recv_count,
                                         plan_.activation_clamp, plan_.activations,
                                         plan_.activation_scales};
    moe_kernels::launch_swiglu(swiglu, plan_.fp8, stream);
  }
  mark(2);
  gemm2->run(stream);
  mark(3);
  // NOTES: every call, not only where ranks share a GPU: a rank does not know whether its peers do, and
  // all ranks must number their barriers alike. Its cost (one barrier's latency) counts in the combine.
  barrier_(stream);
}

}  // namespace switchyard::cuda
