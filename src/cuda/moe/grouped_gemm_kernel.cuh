#pragma once
// One CUTLASS grouped GEMM kind (grouped_gemm.hpp) as a class template: the kernel's types, built from
// CUTLASS's collective builders, and the runner that owns its per-group arrays and workspace. Included
// only by the grouped_gemm_<kind>.cu files, each of which instantiates one kind: a CUTLASS kernel takes
// minutes to compile, and one per file lets them compile in parallel.
#include <cutlass/cutlass.h>
#include <cutlass/epilogue/thread/linear_combination.h>
#include <cutlass/gemm/device/gemm_universal_adapter.h>

#include <algorithm>
#include <cute/tensor.hpp>
#include <cutlass/detail/blockwise_scale_layout.hpp>
#include <cutlass/epilogue/collective/collective_builder.hpp>
#include <cutlass/gemm/collective/collective_builder.hpp>
#include <cutlass/gemm/dispatch_policy.hpp>
#include <cutlass/gemm/group_array_problem_shape.hpp>
#include <cutlass/gemm/kernel/gemm_universal.hpp>
#include <cutlass/util/packed_stride.hpp>
#include <memory>
#include <string>
#include <vector>

#include "common/moe_layout.hpp"
#include "core/device_memory.hpp"
#include "cuda/backend/dependent_launch.hpp"
#include "cuda/moe/grouped_gemm.hpp"
#include "cuda/moe/grouped_gemm_kinds.hpp"
#include "cuda/moe/home_rows_epilogue.cuh"
#include "cuda/moe/swiglu_epilogue.cuh"
#include "device/cuda_check.hpp"
#include "device/ptx.cuh"
#include "switchyard/errors.hpp"

namespace switchyard::cuda::grouped_gemm_detail {

using ProblemShape = cutlass::gemm::GroupProblemShape<cute::Shape<int, int, int>>;
using RowMajor = cutlass::layout::RowMajor;
using ColumnMajor = cutlass::layout::ColumnMajor;  // B [N, K] with K fastest, in CUTLASS's K x N terms

// D = 1 * accumulator: alpha 1 multiplies exactly, no source C is read (void), and the conversion to D's
// type rounds to nearest even, the rounding docs/MOE.md names.
template <class TileShape, class ClusterShape, class Schedule, class ElementD>
using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
    cutlass::epilogue::collective::EpilogueTileAuto, float, float, void, RowMajor*,
    128 / cutlass::sizeof_bits<ElementD>::value, ElementD, RowMajor*,
    128 / cutlass::sizeof_bits<ElementD>::value, Schedule,
    cutlass::epilogue::fusion::LinearCombination<ElementD, float, void, float>>::CollectiveOp;

// bf16 x bf16 -> fp32 accumulators: the cooperative schedule (two consumer warpgroups on a 128-row tile).
template <class ElementD>
struct Bf16Kernel {
  using TileShape = cute::Shape<cute::_128, cute::_128, cute::_64>;
  using ClusterShape = cute::Shape<cute::_1, cute::_1, cute::_1>;
  using CollectiveEpilogue =
      Epilogue<TileShape, ClusterShape, cutlass::epilogue::PtrArrayTmaWarpSpecializedCooperative, ElementD>;
  using CollectiveMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, cutlass::bfloat16_t, RowMajor*, 8,
      cutlass::bfloat16_t, ColumnMajor*, 8, float, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(
          sizeof(typename CollectiveEpilogue::SharedStorage))>,
      cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperative>::CollectiveOp;
  using Kernel = cutlass::gemm::kernel::GemmUniversal<ProblemShape, CollectiveMainloop, CollectiveEpilogue>;
  static constexpr bool kFp8 = false;
  static constexpr bool kSwiglu = false;
  static constexpr bool kHome = false;
  static constexpr int kScaleRowsB = 128;  // no scales
};

// The fp8 kernels' tiles (GroupedGemmTile, grouped_gemm.hpp): tile and cluster shapes and the schedules.
template <GroupedGemmTile kTile>
struct Fp8Tile;
template <>
struct Fp8Tile<GroupedGemmTile::m128> {  // two consumer warpgroups share a 128-row tile
  using TileShape = cute::Shape<cute::_128, cute::_128, cute::_128>;
  using ClusterShape = cute::Shape<cute::_1, cute::_1, cute::_1>;
  using KernelSchedule = cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperativeFP8Blockwise;
  using EpilogueSchedule = cutlass::epilogue::PtrArrayTmaWarpSpecializedCooperative;
};
template <>
struct Fp8Tile<GroupedGemmTile::m128_cluster2m> : Fp8Tile<GroupedGemmTile::m128> {
  // Two CTAs on neighbouring M blocks of one expert: B's tile (the weights) is loaded once for both.
  using ClusterShape = cute::Shape<cute::_2, cute::_1, cute::_1>;
};
template <>
struct Fp8Tile<GroupedGemmTile::m128_cluster2n> : Fp8Tile<GroupedGemmTile::m128> {
  // Two CTAs on neighbouring N blocks: A's tile (the rows) is loaded once for both.
  using ClusterShape = cute::Shape<cute::_1, cute::_2, cute::_1>;
};
template <>
struct Fp8Tile<GroupedGemmTile::m64_pingpong> {
  // Each consumer warpgroup its own 64-row tile, one's epilogue under the other's mainloop.
  using TileShape = cute::Shape<cute::_64, cute::_128, cute::_128>;
  using ClusterShape = cute::Shape<cute::_1, cute::_1, cute::_1>;
  using KernelSchedule = cutlass::gemm::KernelPtrArrayTmaWarpSpecializedPingpongFP8Blockwise;
  using EpilogueSchedule = cutlass::epilogue::PtrArrayTmaWarpSpecializedPingpong;
};

// The scales' layouts: A one per row and 128 K, B one per `kScaleRowsB` rows and 128 K (the checkpoint's
// 128 x 128 blocks, or W1's repeated per 64 rows for the SwiGLU GEMM's tiles), both K-major.
template <int kScaleRowsB>
using Fp8ScaleConfigFor = cutlass::detail::Sm90BlockwiseScaleConfig<1, kScaleRowsB, 128, cute::GMMA::Major::K,
                                                                    cute::GMMA::Major::K>;
using Fp8ScaleConfig = Fp8ScaleConfigFor<128>;
using Fp8LayoutSFA = decltype(Fp8ScaleConfig::deduce_layoutSFA());
using Fp8LayoutSFB = decltype(Fp8ScaleConfig::deduce_layoutSFB());

// The blockwise fp8 mainloop of a tile and schedule, its stages fitted beside `EpilogueSharedStorage`.
// Every stage that fits (6 for the m128 tiles), although fewer read less: GEMM 1 at one rank with 32768
// tokens read 41 GB from DRAM at 6 stages, 28 at 5 and 9.4 (its operands once) at 4, and ran 10 % faster
// cold at 4. In steady state 4 stages were 5-11 % slower (the tile sweep, the layer at 512-2048 and 128
// tokens x 8) and level at 4096 x 8, so the count stays (bench/NOTES.md, session 27).
template <class TileShape, class ClusterShape, class KernelSchedule, class EpilogueSharedStorage,
          class ScaleConfig = Fp8ScaleConfig>
using Fp8BlockwiseMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, cutlass::float_e4m3_t,
    cute::tuple<RowMajor*, decltype(ScaleConfig::deduce_layoutSFA())*>, 16, cutlass::float_e4m3_t,
    cute::tuple<ColumnMajor*, decltype(ScaleConfig::deduce_layoutSFB())*>, 16, float, TileShape, ClusterShape,
    cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(EpilogueSharedStorage))>,
    KernelSchedule>::CollectiveOp;

// e4m3 x e4m3 with DeepSeek-V3's block scales: A one f32 scale per row and 128 K (granularity 1 x 128),
// B one per 128 x 128 block, both K-major (how the dispatch and the checkpoint store them). The
// mainloop promotes each 128-K block's WGMMA partial sum into the fp32 accumulator with the product of
// the two scales (DeepGEMM's SM90 recipe, docs/MOE.md rounding point 2). Every tile computes the same
// per-element sums in the same order (K blocks in order, one promotion each), so the tile changes the
// speed, never the bits (tests/cuda/moe_grouped_gemm_tile_test.cpp).
template <class ElementD, GroupedGemmTile kTile>
struct Fp8BlockwiseKernel {
  using TileShape = typename Fp8Tile<kTile>::TileShape;
  using ClusterShape = typename Fp8Tile<kTile>::ClusterShape;
  using ScaleConfig = Fp8ScaleConfig;
  using LayoutSFA = Fp8LayoutSFA;
  using LayoutSFB = Fp8LayoutSFB;
  using CollectiveEpilogue =
      Epilogue<TileShape, ClusterShape, typename Fp8Tile<kTile>::EpilogueSchedule, ElementD>;
  using CollectiveMainloop =
      Fp8BlockwiseMainloop<TileShape, ClusterShape, typename Fp8Tile<kTile>::KernelSchedule,
                           typename CollectiveEpilogue::SharedStorage>;
  using Kernel = cutlass::gemm::kernel::GemmUniversal<ProblemShape, CollectiveMainloop, CollectiveEpilogue>;
  static constexpr bool kFp8 = true;
  static constexpr bool kSwiglu = false;
  static constexpr bool kHome = false;
  static constexpr int kScaleRowsB = 128;
};

// GEMM 2 with its rows written home (fp8_to_bf16_home, m128 only): Fp8BlockwiseKernel's m128 mainloop with
// HomeRowsEpilogue (home_rows_epilogue.cuh), whose staging rows (34 KiB) stand where the TMA epilogue's
// shared memory stood beside the stages.
struct Fp8HomeKernel {
  using TileShape = typename Fp8Tile<GroupedGemmTile::m128>::TileShape;
  using ClusterShape = typename Fp8Tile<GroupedGemmTile::m128>::ClusterShape;
  using ScaleConfig = Fp8ScaleConfig;
  using LayoutSFA = Fp8LayoutSFA;
  using LayoutSFB = Fp8LayoutSFB;
  using CollectiveEpilogue = HomeRowsEpilogue;
  using CollectiveMainloop =
      Fp8BlockwiseMainloop<TileShape, ClusterShape, typename Fp8Tile<GroupedGemmTile::m128>::KernelSchedule,
                           typename CollectiveEpilogue::TensorStorage>;
  using Kernel = cutlass::gemm::kernel::GemmUniversal<ProblemShape, CollectiveMainloop, CollectiveEpilogue>;
  static constexpr bool kFp8 = true;
  static constexpr bool kSwiglu = false;
  static constexpr bool kHome = true;
  static constexpr int kScaleRowsB = 128;
};

// GEMM 1 with SwiGLU in its epilogue (fp8_swiglu_to_fp8, m128 only): Fp8BlockwiseKernel's m128 mainloop
// over W1 in MoeGateUp::interleaved (each tile 64 gate and 64 up rows), in clusters of two CTAs along N
// (the two halves of a requantisation block, x's tile multicast to both), and SwigluPairEpilogue
// (swiglu_epilogue.cuh), which trades one amax per row between the two instead of storing h. A tile holds
// two of W1's scale blocks along N (gate and up), so the kernel reads W1's scales repeated per 64 rows
// (Runner::run writes them) and fp8_promotion.cuh keeps the 128-wide tile's rounding.
struct Fp8SwigluKernel {
  using TileShape = cute::Shape<cute::_128, cute::_128, cute::_128>;
  using ClusterShape = cute::Shape<cute::_1, cute::_2, cute::_1>;
  static constexpr int kScaleRowsB = common::kMoeGateUpBlock;
  using ScaleConfig = Fp8ScaleConfigFor<kScaleRowsB>;
  using LayoutSFA = decltype(ScaleConfig::deduce_layoutSFA());
  using LayoutSFB = decltype(ScaleConfig::deduce_layoutSFB());
  using CollectiveEpilogue = SwigluPairEpilogue;
  using CollectiveMainloop =
      Fp8BlockwiseMainloop<TileShape, ClusterShape,
                           cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperativeFP8Blockwise,
                           typename CollectiveEpilogue::TensorStorage, ScaleConfig>;
  using Kernel = cutlass::gemm::kernel::GemmUniversal<ProblemShape, CollectiveMainloop, CollectiveEpilogue>;
  static constexpr bool kFp8 = true;
  static constexpr bool kSwiglu = true;
  static constexpr bool kHome = false;
};

// Device memory the runner owns; stream-ordered where the stream allows (core/device_memory.hpp), so
// that freeing it never waits for a peer's kernel that spins on this rank.
struct DeviceArray {
  std::shared_ptr<void> memory;
  DeviceArray() = default;
  DeviceArray(size_t bytes, int device, cudaStream_t stream)
      : memory(detail::allocate_cuda_bytes(bytes, device, stream)) {}
  void* get() const { return memory.get(); }
  template <class T>
  T* as() const {
    return static_cast<T*>(memory.get());
  }
};

// A device array of `values`, uploaded once. The host vector must outlive the copy: callers synchronise
// the stream before returning (Runner's constructor does).
template <class T>
DeviceArray upload(const std::vector<T>& values, int device, cudaStream_t stream) {
  DeviceArray array(values.size() * sizeof(T), device, stream);
  SY_CUDA_CHECK(
      cudaMemcpyAsync(array.get(), values.data(), values.size() * sizeof(T), cudaMemcpyHostToDevice, stream));
  return array;
}

// W1's scales for the SwiGLU GEMM's tiles: [2I / 128, K / 128] in MoeGateUp::interleaved's scale order
// (gate block b at row 2b, up block b at 2b + 1) to one row per interleaved block of W1 (64 rows,
// common::kMoeGateUpBlock; kBlocksPerScale of them to a 128-row scale block): the row the weight layout
// itself names for the block's first stored row (MoeWeightLayout::w1_scale_row_of_stored, which the CPU
// path and the reference read through). The same values, so the same products and bits as the separate
// path's. Run before every GEMM rather than once, so that weights the caller rewrites in place are never
// paired with stale scales; at DeepSeek-V3's shape it moves under 1 MB.
template <int kBlocksPerScale>
__global__ void repeat_interleaved_w1_scales(const float* __restrict__ from, int64_t from_group_stride,
                                             float* __restrict__ to, int groups, int fine_rows,
                                             int k_blocks) {
  ptx::wait_for_previous_grid();  // launched by launch_dependent: before any global access
  static_assert(kBlocksPerScale * common::kMoeGateUpBlock == common::kMoeScaleBlock,
                "a fine row of scales is one interleaved block of W1");
  common::MoeWeightLayout layout{};
  layout.gate_up = common::MoeGateUp::interleaved;
  const int64_t total = int64_t{groups} * fine_rows * k_blocks;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t k_block = i % k_blocks;
    const int64_t row = i / k_blocks;
    const int64_t group = row / fine_rows;
    const int64_t fine = row % fine_rows;
    const int64_t coarse = layout.w1_scale_row_of_stored(fine * common::kMoeGateUpBlock);
    to[i] = from[group * from_group_stride + coarse * k_blocks + k_block];
  }
}

template <class Config>
class Runner final : public GroupedGemm {
  using Kernel = typename Config::Kernel;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
  using ElementA = typename Gemm::ElementA;
  using ElementB = typename Gemm::ElementB;
  using ElementD = typename Gemm::ElementD;
  using StrideA = typename Kernel::InternalStrideA;
  using StrideB = typename Kernel::InternalStrideB;
  using StrideC = typename Kernel::InternalStrideC;
  using StrideD = typename Kernel::InternalStrideD;
  using Shape = typename ProblemShape::UnderlyingProblemShape;
  static_assert(sizeof(Shape) == 3 * sizeof(int32_t),
                "problem_shapes() hands out {M, N, K} as int32 triples");

 public:
  Runner(GroupedGemmKind kind, const GroupedGemmOperands& op, cudaStream_t stream) : kind_(kind) {
    const int groups = op.groups;
    int device = 0;
    SY_CUDA_CHECK(cudaGetDevice(&device));
    std::vector<const ElementA*> a(groups);
    std::vector<const ElementB*> b(groups);
    std::vector<ElementD*> d(groups);
    std::vector<const float*> sfa(groups), sfb(groups);
    if constexpr (kRepeatScales) prepare_repeated_scales(op, device, stream);
    // Strides depend only on a row's length (K for A and B, N for D), never on M: M_g can change from
    // call to call on the device while these stay as uploaded.
    std::vector<StrideA> stride_a(groups,
                                  cutlass::make_cute_packed_stride(StrideA{}, cute::make_shape(1, op.k, 1)));
    std::vector<StrideB> stride_b(
        groups, cutlass::make_cute_packed_stride(StrideB{}, cute::make_shape(op.n, op.k, 1)));
    std::vector<StrideD> stride_d(groups,
                                  cutlass::make_cute_packed_stride(StrideD{}, cute::make_shape(1, op.n, 1)));
    std::vector<Shape> shapes(groups, Shape{0, op.n, op.k});
    for (int g = 0; g < groups; ++g) {
      a[g] = static_cast<const ElementA*>(op.a) + g * op.a_group_stride;
      b[g] = static_cast<const ElementB*>(op.b) + g * op.b_group_stride;
      d[g] = static_cast<ElementD*>(op.d) + g * op.d_group_stride;
      if constexpr (Config::kFp8) {
        sfa[g] = op.a_scales + g * op.a_scales_group_stride;
        sfb[g] = kRepeatScales ? repeated_scales_.template as<const float>() + g * repeated_group_stride_
                               : op.b_scales + g * op.b_scales_group_stride;
      }
    }
    a_ = upload(a, device, stream);
    b_ = upload(b, device, stream);
    d_ = upload(d, device, stream);
    stride_a_ = upload(stride_a, device, stream);
    stride_b_ = upload(stride_b, device, stream);
    stride_d_ = upload(stride_d, device, stream);
    shapes_ = upload(shapes, device, stream);

    typename Gemm::Arguments args;
    args.mode = cutlass::gemm::GemmUniversalMode::kGrouped;
    // No host shapes: the persistent group scheduler reads M_g on the device (grid = the SMs).
    args.problem_shape = {groups, shapes_.template as<Shape>(), nullptr};
    args.mainloop.ptr_A = a_.template as<const ElementA*>();
    args.mainloop.dA = stride_a_.template as<StrideA>();
    args.mainloop.ptr_B = b_.template as<const ElementB*>();
    args.mainloop.dB = stride_b_.template as<StrideB>();
    if constexpr (Config::kFp8) {
      // The mainloop derives the scales' layouts from each group's shape; these arrays only carry the
      // type through the arguments.
      using LayoutSFA = typename Config::LayoutSFA;
      using LayoutSFB = typename Config::LayoutSFB;
      std::vector<LayoutSFA> layout_sfa(
          groups, Config::ScaleConfig::tile_atom_to_shape_SFA(cute::make_shape(1, op.n, op.k, 1)));
      std::vector<LayoutSFB> layout_sfb(
          groups, Config::ScaleConfig::tile_atom_to_shape_SFB(cute::make_shape(1, op.n, op.k, 1)));
      sfa_ = upload(sfa, device, stream);
      sfb_ = upload(sfb, device, stream);
      layout_sfa_ = upload(layout_sfa, device, stream);
      layout_sfb_ = upload(layout_sfb, device, stream);
      args.mainloop.ptr_SFA = sfa_.template as<const float*>();
      args.mainloop.layout_SFA = layout_sfa_.template as<LayoutSFA>();
      args.mainloop.ptr_SFB = sfb_.template as<const float*>();
      args.mainloop.layout_SFB = layout_sfb_.template as<LayoutSFB>();
      SY_CUDA_CHECK(cudaStreamSynchronize(stream));  // layout_sfa and layout_sfb are the copies' sources
    }
    if constexpr (Config::kSwiglu) {
      args.epilogue = op.swiglu;
    } else if constexpr (Config::kHome) {
      args.epilogue = op.home;
    } else {
      args.epilogue.thread.alpha = 1.0f;
      args.epilogue.thread.beta = 0.0f;
      args.epilogue.ptr_C = nullptr;
      args.epilogue.dC = nullptr;
      args.epilogue.ptr_D = d_.template as<ElementD*>();
      args.epilogue.dD = stride_d_.template as<StrideD>();
    }
    args.hw_info = cutlass::KernelHardwareInfo::make_kernel_hardware_info<Kernel>(device);

    const cutlass::Status status = gemm_.can_implement(args);
    if (status != cutlass::Status::kSuccess) {
      throw Unsupported(std::string("MoeLayer: the CUTLASS grouped GEMM (") + grouped_gemm_kind_name(kind) +
                        ", N " + std::to_string(op.n) + ", K " + std::to_string(op.k) +
                        ") cannot run these operands: " + cutlassGetStatusString(status));
    }
    workspace_ = DeviceArray(Gemm::get_workspace_size(args), device, stream);
    check(gemm_.initialize(args, workspace_.get(), stream), "initialize");
    // The host vectors above are the copies' sources.
    SY_CUDA_CHECK(cudaStreamSynchronize(stream));
  }

  int32_t* problem_shapes() const override { return shapes_.template as<int32_t>(); }

  // The kernel loaded and its shared memory allowed, before any rank launches (the adapter's
  // initialize() sets the same attribute to the same value later).
  static void prepare() {
    const void* kernel = reinterpret_cast<const void*>(&cutlass::device_kernel<Kernel>);
    cudaFuncAttributes attributes{};
    SY_CUDA_CHECK(cudaFuncGetAttributes(&attributes, kernel));
    if constexpr (kRepeatScales) {
      SY_CUDA_CHECK(cudaFuncGetAttributes(
          &attributes, reinterpret_cast<const void*>(&repeat_interleaved_w1_scales<kBlocksPerScale>)));
    }
    const int shared_bytes = static_cast<int>(Kernel::SharedStorageSize);
    if (shared_bytes >= (48 << 10)) {
      SY_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, shared_bytes));
    }
  }

  void run(cudaStream_t stream) override {
    if constexpr (kRepeatScales) {
      constexpr int kThreads = 256;
      const int64_t total = int64_t{scale_groups_} * scale_fine_rows_ * scale_k_blocks_;
      const int blocks = static_cast<int>(std::min<int64_t>((total + kThreads - 1) / kThreads, 1024));
      if (blocks > 0) {
        // Launched as a dependent of the kernel before it; the GEMM after it is an ordinary launch (CUTLASS
        // 4.2's SM90 grouped kernels never call griddepcontrol.wait, so they cannot be launched as
        // dependents).
        launch_dependent(repeat_interleaved_w1_scales<kBlocksPerScale>, blocks, kThreads, 0, stream,
                         scale_source_, scale_source_group_stride_, repeated_scales_.template as<float>(),
                         scale_groups_, scale_fine_rows_, scale_k_blocks_);
      }
    }
    check(gemm_.run(stream), "run");
  }

 private:
  // Whether B's scales are W1's, repeated per 64 rows before each run (the SwiGLU GEMM).
  static constexpr bool kRepeatScales = Config::kFp8 && Config::kScaleRowsB != 128;
  static constexpr int kBlocksPerScale = 128 / Config::kScaleRowsB;

  // The repeated scales' buffer: every group's [N / 64, K / 128].
  void prepare_repeated_scales(const GroupedGemmOperands& op, int device, cudaStream_t stream) {
    static_assert(Config::kScaleRowsB == common::kMoeGateUpBlock, "W1's scales repeat per interleaved block");
    scale_source_ = op.b_scales;
    scale_source_group_stride_ = op.b_scales_group_stride;
    scale_groups_ = op.groups;
    scale_fine_rows_ = op.n / Config::kScaleRowsB;
    scale_k_blocks_ = op.k / 128;
    repeated_group_stride_ = int64_t{scale_fine_rows_} * scale_k_blocks_;
    const size_t bytes = static_cast<size_t>(repeated_group_stride_ * op.groups) * sizeof(float);
    repeated_scales_ = DeviceArray(bytes, device, stream);
  }

  void check(cutlass::Status status, const char* what) const {
    if (status != cutlass::Status::kSuccess) {
      throw Error(std::string("MoeLayer: CUTLASS grouped GEMM ") + grouped_gemm_kind_name(kind_) + " " +
                  what + " failed: " + cutlassGetStatusString(status));
    }
  }

  GroupedGemmKind kind_;
  Gemm gemm_;
  // kRepeatScales: where run() reads W1's scales from, and the shape it repeats them in.
  const float* scale_source_ = nullptr;
  int64_t scale_source_group_stride_ = 0;
  int scale_groups_ = 0, scale_fine_rows_ = 0, scale_k_blocks_ = 0;
  int64_t repeated_group_stride_ = 0;
  DeviceArray repeated_scales_;
  DeviceArray a_, b_, d_, sfa_, sfb_, stride_a_, stride_b_, stride_d_, shapes_, layout_sfa_, layout_sfb_,
      workspace_;
};

// The kernel of a (kind, tile): the bf16 kinds, fp8_swiglu_to_fp8 and fp8_to_bf16_home come in the m128 tile
// only (grouped_gemm.cpp refuses others).
template <GroupedGemmKind kKind, GroupedGemmTile kTile>
struct KernelConfig;
template <GroupedGemmTile kTile>
struct KernelConfig<GroupedGemmKind::bf16_to_bf16, kTile> {
  using type = Bf16Kernel<cutlass::bfloat16_t>;
};
template <GroupedGemmTile kTile>
struct KernelConfig<GroupedGemmKind::fp8_to_bf16, kTile> {
  using type = Fp8BlockwiseKernel<cutlass::bfloat16_t, kTile>;
};
template <>
struct KernelConfig<GroupedGemmKind::fp8_swiglu_to_fp8, GroupedGemmTile::m128> {
  using type = Fp8SwigluKernel;
};
template <>
struct KernelConfig<GroupedGemmKind::fp8_to_bf16_home, GroupedGemmTile::m128> {
  using type = Fp8HomeKernel;
};

template <GroupedGemmKind kKind, GroupedGemmTile kTile>
std::unique_ptr<GroupedGemm> make_kernel(const GroupedGemmOperands& operands, cudaStream_t stream) {
  return std::make_unique<Runner<typename KernelConfig<kKind, kTile>::type>>(kKind, operands, stream);
}

template <GroupedGemmKind kKind, GroupedGemmTile kTile>
void prepare_kernel() {
  Runner<typename KernelConfig<kKind, kTile>::type>::prepare();
}

// One (kind, tile)'s kernel, instantiated in the grouped_gemm_<kind>[_<tile>].cu that includes this.
#define SWITCHYARD_GROUPED_GEMM_INSTANCE(kind, tile)                                               \
  template std::unique_ptr<GroupedGemm> make_kernel<GroupedGemmKind::kind, GroupedGemmTile::tile>( \
      const GroupedGemmOperands&, cudaStream_t);                                                   \
  template void prepare_kernel<GroupedGemmKind::kind, GroupedGemmTile::tile>();

}  // namespace switchyard::cuda::grouped_gemm_detail
