#pragma once
// What an epilogue that writes D itself needs from CUTLASS's warp-specialised grouped kernels, shared by the
// layer's two such epilogues (swiglu_epilogue.cuh: a and its scales; home_rows_epilogue.cuh: o's rows into
// their homes). Neither reads C nor stores D through a stride or a tensor map: they keep their own shared
// memory and take their outputs as their arguments.
//   - DirectEpilogueOp<Storage, Outputs, ElementD>: the op's type plumbing (the operator() form that
//   CUTLASS's
//     Sm90TmaWarpSpecializedAdapter wraps, as its DefaultEpilogueArray is) and the host-side static members;
//     an op derives from it and adds can_implement, its constructor and operator().
//   - DirectEpilogue<Op>: the collective the kernel holds, CUTLASS's adapter without tensor maps. The adapter
//     would reserve the op's SharedStorage a second time as tensor-map storage (shared memory the mainloop's
//     stages could use); here that storage is empty, and the members that take it are no-ops.
#include <cutlass/cutlass.h>

#include <cstddef>
#include <cute/tensor.hpp>
#include <cutlass/epilogue/collective/detail.hpp>
#include <cutlass/epilogue/dispatch_policy.hpp>

namespace switchyard::cuda::grouped_gemm_detail {

template <class Storage, class Outputs, class ElementD_>
struct DirectEpilogueOp {
  using EpilogueSchedule = cutlass::epilogue::PtrArrayNoSmemWarpSpecialized;
  using DispatchPolicy = EpilogueSchedule;
  using ThreadEpilogueOp = void;
  using ElementAccumulator = float;
  using ElementC = void;  // no C is read
  using ElementD = ElementD_;
  using StrideC = cute::Stride<int64_t, cute::Int<1>, cute::Int<0>>*;
  using StrideD = StrideC;
  using InternalStrideC = cute::remove_pointer_t<StrideC>;
  using InternalStrideD = cute::remove_pointer_t<StrideD>;
  using GmemTiledCopyC = void;
  using GmemTiledCopyD = void;

  using SharedStorage = Storage;
  using TensorMapStorage = SharedStorage;

  using Arguments = Outputs;
  using Params = Outputs;

  template <class ProblemShape>
  static constexpr Params to_underlying_arguments(ProblemShape const&, Arguments const& args, void*) {
    return args;
  }
  template <class ProblemShape>
  static size_t get_workspace_size(ProblemShape const&, Arguments const&, int) {
    return 0;
  }
  template <class ProblemShape>
  static cutlass::Status initialize_workspace(ProblemShape const&, Arguments const&, void*, cudaStream_t,
                                              cutlass::CudaHostAdapter* = nullptr) {
    return cutlass::Status::kSuccess;
  }

  CUTLASS_DEVICE bool is_source_needed() { return false; }
};

template <class Op>
class DirectEpilogue : public cutlass::epilogue::collective::detail::Sm90TmaWarpSpecializedAdapter<Op> {
  using Base = cutlass::epilogue::collective::detail::Sm90TmaWarpSpecializedAdapter<Op>;

 public:
  using Params = typename Base::Params;
  struct TensorMapStorage {};

  using Base::Base;

  CUTLASS_DEVICE auto load_init(Params const&, TensorMapStorage&, int32_t, int32_t) {
    return cute::make_tuple(nullptr);
  }
  CUTLASS_DEVICE auto store_init(Params const&, TensorMapStorage&, int32_t, int32_t, int32_t) {
    return cute::make_tuple(nullptr);
  }
  template <bool IsLoad, class ProblemShapeMNKL>
  CUTLASS_DEVICE void tensormaps_perform_update(TensorMapStorage&, Params const&, cute::TmaDescriptor const*,
                                                ProblemShapeMNKL, int32_t, int32_t) {}
  template <bool IsLoad>
  CUTLASS_DEVICE void tensormaps_cp_fence_release(TensorMapStorage&, cute::TmaDescriptor const*, int32_t) {}
};

}  // namespace switchyard::cuda::grouped_gemm_detail
