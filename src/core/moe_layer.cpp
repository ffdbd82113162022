// MoeLayer: symmetric dispatch, the backend's expert phase, symmetric combine (docs/MOE.md). Every
// argument is checked on the host before the dispatch moves a row; the workspace between the phases is
// allocated once, here, so that a call allocates nothing but an output the caller did not give.
#include <memory>
#include <string>
#include <vector>

#include "core/buffer_access.hpp"
#include "core/expert_major_plan.hpp"
#include "core/moe_plan.hpp"
#include "switchyard/errors.hpp"
#include "switchyard/moe.hpp"

namespace switchyard {

namespace {

// The phases' tensors, where the backend computes: the dispatch's outputs (preallocated, as graph
// capture needs) and the activations and expert outputs between the GEMMs.
struct MoeWorkspace {
  Tensor recv_x, recv_x_scales, recv_count, layout_range, src_info;
  Tensor gate_up, activations, activation_scales, out;
};

// Whether the Buffer's heap-resident expert outputs (BufferSizing::symmetric_heap_output_rows_per_expert)
// hold the layer's o [L, C, H].
bool heap_output_fits(const common::SymmetricLayout& layout, const detail::MoeLayerPlan& plan) {
  return layout.heap_output_rows >= plan.expert_capacity && layout.hidden >= plan.hidden &&
         layout.local_experts >= plan.local_experts;
}

// Whether the Buffer's heap receive area (BufferSizing::symmetric_heap_receive_rows_per_expert) holds the
// layer's fp8 recv_x [L, C, H] and its scales: the dispatch then pushes into them from any process. (A bf16
// area, BufferSizing::symmetric_heap_receive_dtype, is not used by the layer yet: its bf16 recipe allocates.)
bool heap_receive_fits(const common::SymmetricLayout& layout, const detail::MoeLayerPlan& plan) {
  return plan.fp8 && layout.heap_receive_scaled() && layout.heap_receive_rows >= plan.expert_capacity &&
         layout.hidden >= plan.hidden && layout.local_experts >= plan.local_experts;
}

MoeWorkspace allocate_workspace(Buffer& buffer, const detail::MoeLayerPlan& plan,
                                const detail::PlanContext& context) {
  using detail::BufferAccess;
  const int64_t local = plan.local_experts, rows = plan.expert_capacity, hidden = plan.hidden,
                intermediate = plan.intermediate;
  const common::SymmetricLayout& layout = BufferAccess::symmetric_layout(buffer);
  const DType dtype = plan.weight_dtype();
  MoeWorkspace space;
  const int device_index = context.device_index();
  if (heap_receive_fits(layout, plan)) {
    // Every source pushes its fp8 rows straight into them (cuda/symmetric/push.cuh):
    // Buffer::symmetric_receive's views, narrowed to the layer's experts (a leading part). The Buffer
    // outlives the layer.
    SymmetricReceiveViews views = detail::symmetric_receive_views(
        context, layout, BufferAccess::heap_base(buffer), rows, static_cast<int>(hidden));
    views.recv_x.shape[0] = local;
    views.recv_x_scales.shape[0] = local;
    space.recv_x = Tensor::borrow(views.recv_x);
    space.recv_x_scales = Tensor::borrow(views.recv_x_scales);
  } else {
    space.recv_x = BufferAccess::allocate(buffer, dtype, {local, rows, hidden});
    if (plan.fp8) {
      space.recv_x_scales =
          BufferAccess::allocate(buffer, DType::f32, {local, rows, hidden / common::kMoeScaleBlock});
    }
  }
  space.recv_count = BufferAccess::allocate(buffer, DType::i32, {local});
  space.layout_range = BufferAccess::allocate(buffer, DType::i32, {local, plan.num_ranks, 2});
  space.src_info = BufferAccess::allocate(buffer, DType::i32, {local, rows});
  space.gate_up = BufferAccess::allocate(buffer, DType::bf16, {local, rows, 2 * intermediate});
  space.activations = BufferAccess::allocate(buffer, dtype, {local, rows, intermediate});
  if (plan.rows_home) {
    // GEMM 2 writes each row of o into its home's combine buffer: no o here (at DeepSeek-V3's shape and the
    // default capacity, 32 experts x 1024 rows x 7168 channels at 128 tokens on 8 ranks: 470 MB a rank).
  } else if (heap_output_fits(layout, plan)) {
    // GEMM 2 writes o straight into the heap-resident expert outputs, which every home reads in place
    // (the pull combine, across processes too). The Buffer outlives the layer.
    space.out = Tensor::borrow(TensorView(BufferAccess::heap_base(buffer) + layout.heap_output_offset(),
                                          DType::bf16, {local, rows, hidden}, context.device, device_index));
  } else {
    space.out = BufferAccess::allocate(buffer, DType::bf16, {local, rows, hidden});
  }
  if (plan.fp8) {
    space.activation_scales =
        BufferAccess::allocate(buffer, DType::f32, {local, rows, intermediate / common::kMoeScaleBlock});
  }
  return space;
}

}  // namespace

class MoeLayer::Impl {
 public:
  Impl(Buffer& buffer, const MoeWeights& weights, const MoeLayerOptions& options) : buffer_(buffer) {
    const detail::PlanContext context = detail::BufferAccess::plan_context(buffer, "MoeLayer");
    device_ = context.device;
    plan_ = detail::plan_moe_layer(weights, options, context, detail::BufferAccess::symmetric_layout(buffer));
    check_pull_reaches_outputs(context);
    space_ = allocate_workspace(buffer, plan_, context);
    experts_ = detail::BufferAccess::make_moe_experts(buffer, experts_plan());
  }

  MoeResult forward(const MoeArgs& args) {
    detail::check_moe_call(args, plan_, device_);

    LowLatencyDispatchArgs dispatch;
    dispatch.x = args.x;
    dispatch.x_scales = args.x_scales;  // fp8 x: the caller's scales, carried as given (no cast)
    dispatch.topk_idx = args.topk_idx;
    dispatch.max_tokens_per_rank = plan_.max_tokens_per_rank;
    dispatch.num_experts = plan_.num_experts;
    dispatch.expert_capacity = plan_.expert_capacity;
    // The dispatch's cast (common/fp8_cast.hpp) is the recipe's x; fp8 x arrives cast already.
    dispatch.use_fp8 = plan_.fp8;
    dispatch.out_recv_x = space_.recv_x;
    dispatch.out_recv_x_scales = space_.recv_x_scales;
    dispatch.out_recv_count = space_.recv_count;
    dispatch.out_layout_range = space_.layout_range;
    dispatch.out_src_info = space_.src_info;
    dispatch.stream = args.stream;
    LowLatencyDispatchResult received = buffer_.symmetric_dispatch(dispatch);

    // The combine is planned (and its arguments checked) before the expert phase: with the rows written
    // home, the phase needs the places the engine gives for this combine.
    LowLatencyCombineArgs combine;
    combine.x = space_.out;  // none with the rows written home
    combine.topk_idx = args.topk_idx;
    combine.topk_weights = args.topk_weights;
    combine.handle = &received.handle;
    combine.out_combined_x = args.out_y;
    combine.stream = args.stream;
    const detail::SymmetricCombinePlan combine_plan =
        detail::BufferAccess::plan_symmetric_combine(buffer_, combine, plan_.rows_home);

    detail::MoeExpertsCall call;
    call.stream = args.stream;
    call.marks = phase_marks_;
    call.expected_rows_per_expert = detail::moe_expected_rows_per_expert(
        args.x.size(0), args.topk_idx.size(1), plan_.num_ranks, plan_.num_experts);
    common::SymmetricHomeRows home_rows;
    if (plan_.rows_home) {
      home_rows = detail::BufferAccess::symmetric_home_rows(buffer_, combine_plan);
      call.home_rows = &home_rows;
    }
    detail::BufferAccess::run_moe_experts(buffer_, *experts_, call);

    // Under capture, `received.handle` dies here while the graph's kernels keep its tables' addresses:
    // those allocations are the graph's too (src/cuda/backend/device_memory.cpp), so replays stay valid.
    return MoeResult{detail::BufferAccess::run_symmetric_combine(buffer_, combine_plan).combined_x};
  }

  const detail::MoeLayerPlan& plan() const { return plan_; }

  // With ranks in separate processes the pull combine reads only heap-resident expert outputs: a layer
  // whose o does not fit them would fail at its first combine, so it is refused here.
  void check_pull_reaches_outputs(const detail::PlanContext& context) const {
    if (context.options.sharing != HeapSharing::processes) return;
    if (plan_.rows_home) return;  // the combine reads no expert output: the rows are home already
    if (buffer_.symmetric_combine_path() != SymmetricCombine::pull) return;
    if (heap_output_fits(detail::BufferAccess::symmetric_layout(buffer_), plan_)) return;
    throw InvalidArgument(
        "MoeLayer: the buffer's symmetric combine is pull across processes, which reads the expert outputs "
        "only "
        "in the heap: expected sizing.symmetric_heap_output_rows_per_expert >= the layer's expert capacity " +
        std::to_string(plan_.expert_capacity) + " (and hidden " + std::to_string(plan_.hidden) +
        " within sizing.hidden), got " +
        std::to_string(detail::BufferAccess::symmetric_layout(buffer_).heap_output_rows));
  }
  void set_phase_marks(void* const* marks) { phase_marks_ = marks; }

 private:
  // The expert phase's tensors: the layer's weights and workspace, the same for every call.
  detail::MoeExpertsPlan experts_plan() const {
    detail::MoeExpertsPlan experts;
    experts.weights = plan_.weight_layout();
    experts.workspace = plan_.workspace_layout();
    experts.fp8 = plan_.fp8;
    experts.activation_clamp = plan_.activation_clamp;
    experts.w1 = plan_.weights.w1.data;
    experts.w1_scales = plan_.weights.w1_scales.as<const float>();
    experts.w2 = plan_.weights.w2.data;
    experts.w2_scales = plan_.weights.w2_scales.as<const float>();
    experts.recv_x = space_.recv_x.data();
    experts.recv_x_scales = space_.recv_x_scales.as<const float>();
    experts.recv_count = space_.recv_count.as<const int32_t>();
    experts.gate_up = space_.gate_up.as<uint16_t>();
    experts.activations = space_.activations.data();
    experts.activation_scales = space_.activation_scales.as<float>();
    experts.out = space_.out.defined() ? space_.out.as<uint16_t>() : nullptr;
    experts.symmetric = detail::BufferAccess::symmetric_layout(buffer_);
    experts.rows_home = plan_.rows_home;
    return experts;
  }

  Buffer& buffer_;
  Device device_ = Device::cpu;
  detail::MoeLayerPlan plan_;
  MoeWorkspace space_;
  std::unique_ptr<detail::MoeExperts> experts_;  // after space_: it points into it
  void* const* phase_marks_ = nullptr;
};

void detail::MoeLayerAccess::set_phase_marks(MoeLayer& layer, void* const* marks) {
  layer.impl_->set_phase_marks(marks);
}

MoeLayer::MoeLayer(Buffer& buffer, const MoeWeights& weights, const MoeLayerOptions& options)
    : impl_(std::make_unique<Impl>(buffer, weights, options)) {}
MoeLayer::~MoeLayer() = default;
MoeResult MoeLayer::forward(const MoeArgs& args) {
  return impl_->forward(args);
}
int MoeLayer::hidden() const {
  return impl_->plan().hidden;
}
int MoeLayer::intermediate() const {
  return impl_->plan().intermediate;
}
int MoeLayer::local_experts() const {
  return impl_->plan().local_experts;
}
DType MoeLayer::weight_dtype() const {
  return impl_->plan().weight_dtype();
}
int64_t MoeLayer::expert_capacity() const {
  return impl_->plan().expert_capacity;
}

}  // namespace switchyard
