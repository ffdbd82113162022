// The `normal` engine (rank-major, DESIGN.md) on one rank: layout -> dispatch -> synthetic expert ->
// combine into preallocated outputs, checked against problem.normal.
//
// Input sets: on cuda, the rank's inputs are copied to the device several times (at most
// kMaxInputSets), so that the copies together exceed twice the L2 and each iteration, rotating through
// them, reads its inputs from memory rather than from the cache the previous iteration left them in.
// Every copy holds the same values, so the one reference checks every set, and each set gets its own
// check iteration. On cpu one set serves every iteration.
//
// The combine input y: the synthetic expert runs on the host once, on the first check iteration's
// recv_x; each set gets its own device copy of that y, reused by every later iteration of the set.
// As the sets hold the same inputs, y is also exactly what each set's dispatch delivers.
//
// --normal-heap on: x (and its scales) are copied into the Buffer's heap-resident input in prepare(), and
// each iteration's y (and the dispatch's weights) into its combine input in expert(), both untimed, as the
// layers around the calls would write them there (docs/normal-in-place.md). --normal-heap staged: the same
// Buffer, but the calls pass the ordinary tensors and the Buffer copies them in, inside the timed calls.
//
// Timed phases use preallocated outputs and no host <-> device copies; the previous iteration's
// results are released in prepare(), before the barrier, so no device memory is freed inside a phase.
// A non-worst-case dispatch still synchronises the host once for the counts and allocates its
// handle's device tensors: that is the library's, and part of the measured time.
#include <algorithm>
#include <cstddef>
#include <vector>

#include "compare.hpp"
#include "engines.hpp"
#include "transfer.hpp"
#include "workload/workload.hpp"

namespace switchyard::bench {
namespace {

constexpr const char* kEngineName = "normal";

class NormalSession final : public EngineSession {
 public:
  explicit NormalSession(const SessionContext& context)
      : context_(context),
        backend_(context.options->backend),
        expected_layout_(context.problem->normal.layouts.at(context.rank)),
        expected_dispatch_(context.problem->normal.dispatched.at(context.rank)),
        expected_combine_(context.problem->normal.combined.at(context.rank)) {
    const BenchOptions& options = *context.options;
    const workload::RankData& data = context.problem->inputs.at(context.rank);
    const Stream stream = context.stream;
    const size_t set_bytes =
        data.x.nbytes() + data.x_scales.nbytes() + data.topk_idx.nbytes() + data.topk_weights.nbytes();
    const int sets = input_set_count(set_bytes, backend_cache_bytes(backend_, stream));
    for (int set = 0; set < sets; ++set) {
      input_sets_.push_back(InputSet{
          to_backend(data.x, backend_, stream), to_backend(data.x_scales, backend_, stream),
          to_backend(data.topk_idx, backend_, stream), to_backend(data.topk_weights, backend_, stream)});
    }
    expert_outputs_.resize(input_sets_.size());

    const int64_t received = expected_dispatch_.recv_x.size(0);
    const int64_t tokens = data.x.size(0);
    const bool fp8 = options.dtype == DType::fp8_e4m3;
    out_recv_x_ = allocate_on_backend(backend_, options.dtype, {received, options.hidden}, stream);
    if (fp8)
      out_recv_x_scales_ =
          allocate_on_backend(backend_, DType::f32, {received, options.hidden / kFp8ScaleBlock}, stream);
    out_recv_topk_idx_ = allocate_on_backend(backend_, DType::i64, {received, options.topk}, stream);
    out_recv_topk_weights_ = allocate_on_backend(backend_, DType::f32, {received, options.topk}, stream);
    out_combined_x_ = allocate_on_backend(backend_, DType::bf16, {tokens, options.hidden}, stream);
    out_combined_topk_weights_ = allocate_on_backend(backend_, DType::f32, {tokens, options.topk}, stream);
  }

  void poison_outputs() override {
    for (const Tensor* output : {&out_recv_x_, &out_recv_x_scales_, &out_recv_topk_idx_,
                                 &out_recv_topk_weights_, &out_combined_x_, &out_combined_topk_weights_}) {
      poison_on_backend(*output, context_.stream);
    }
  }

  int num_input_sets() const override { return static_cast<int>(input_sets_.size()); }

  // Releases the previous iteration's results here, untimed and before the barrier: on cuda that
  // frees the handle's and the layout's device memory, and cudaFree waits for the whole device.
  void prepare(int iteration) override {
    dispatched_ = DispatchResult();
    combined_ = CombineResult();
    layout_ = DispatchLayout();
    const InputSet& inputs = inputs_for(iteration);
    layout_ =
        context_.buffer->get_dispatch_layout(inputs.topk_idx, context_.options->num_experts, context_.stream);
    if (views_written()) {
      heap_input_ =
          context_.buffer->normal_input(inputs.x.size(0), context_.options->hidden, inputs.x.dtype());
      copy_into(heap_input_.x, inputs.x, context_.stream);
      if (inputs.x_scales.defined()) copy_into(heap_input_.x_scales, inputs.x_scales, context_.stream);
    }
  }

  void dispatch(int iteration) override {
    const InputSet& inputs = inputs_for(iteration);
    DispatchArgs args;
    args.x = views_written() ? heap_input_.x : inputs.x;
    args.x_scales = views_written() ? heap_input_.x_scales : inputs.x_scales;
    args.topk_idx = inputs.topk_idx;
    args.topk_weights = inputs.topk_weights;
    args.num_experts = context_.options->num_experts;
    args.layout = &layout_;
    args.out_recv_x = out_recv_x_;
    args.out_recv_x_scales = out_recv_x_scales_;
    args.out_recv_topk_idx = out_recv_topk_idx_;
    args.out_recv_topk_weights = out_recv_topk_weights_;
    args.stream = context_.stream;
    dispatched_ = context_.buffer->dispatch(args);
  }

  // The synthetic expert runs on the host, once, on the first check iteration's recv_x (see the top
  // of this file); each set's check iteration places a copy on the backend, which every later
  // iteration of the set reuses.
  void expert(int iteration) override {
    make_expert_output(iteration);
    if (!views_written()) return;
    heap_combine_input_ = context_.buffer->normal_combine_input(dispatched_.handle, context_.options->hidden);
    copy_into(heap_combine_input_.x, expert_outputs_[input_set_of(iteration)], context_.stream);
    copy_into(heap_combine_input_.topk_weights, dispatched_.recv_topk_weights, context_.stream);
  }

  // --normal-heap on: the calls take the heap views, written untimed (staged and off: the ordinary tensors).
  bool views_written() const {
    return context_.options->normal_heap && !context_.options->normal_heap_staged;
  }

  void make_expert_output(int iteration) {
    Tensor& y = expert_outputs_[input_set_of(iteration)];
    if (y.defined()) return;
    if (!host_expert_output_.defined()) {
      Tensor recv_x = to_host(dispatched_.recv_x, context_.stream);
      Tensor recv_x_scales = to_host(dispatched_.recv_x_scales, context_.stream);
      host_expert_output_ = workload::synthetic_expert(recv_x, recv_x_scales, context_.rank);
    }
    y = to_backend(host_expert_output_, backend_, context_.stream);
    const bool every_set_has_y = std::all_of(expert_outputs_.begin(), expert_outputs_.end(),
                                             [](const Tensor& output) { return output.defined(); });
    if (every_set_has_y) host_expert_output_ = Tensor();
  }

  void combine(int iteration) override {
    CombineArgs args;
    const bool heap = views_written();
    args.x = heap ? heap_combine_input_.x : TensorView(expert_outputs_[input_set_of(iteration)]);
    args.topk_weights = heap ? heap_combine_input_.topk_weights : TensorView(dispatched_.recv_topk_weights);
    args.handle = &dispatched_.handle;
    args.out_combined_x = out_combined_x_;
    args.out_combined_topk_weights = out_combined_topk_weights_;
    args.stream = context_.stream;
    combined_ = context_.buffer->combine(args);
  }

  Difference first_difference() override {
    const int64_t received = expected_dispatch_.recv_x.size(0);
    const int32_t received_i32 = static_cast<int32_t>(received);
    std::vector<uint8_t> in_rank = expected_layout_.is_token_in_rank;
    const int64_t tokens = context_.problem->inputs.at(context_.rank).x.size(0);
    const TensorView expected_in_rank(in_rank.data(), DType::boolean,
                                      {tokens, context_.options->topology.num_ranks});

    Comparison compare(context_.stream);
    compare.begin(Stage::layout);
    compare.tensor("num_tokens_per_rank", layout_.num_tokens_per_rank,
                   i32_view(expected_layout_.num_tokens_per_rank));
    compare.tensor("num_tokens_per_node", layout_.num_tokens_per_node,
                   i32_view(expected_layout_.num_tokens_per_node));
    compare.tensor("num_tokens_per_expert", layout_.num_tokens_per_expert,
                   i32_view(expected_layout_.num_tokens_per_expert));
    compare.tensor("is_token_in_rank", layout_.is_token_in_rank, expected_in_rank);

    compare.begin(Stage::dispatch);
    compare.integer("num_recv_tokens", dispatched_.num_recv_tokens, received);
    compare.tensor("recv_x", dispatched_.recv_x, expected_dispatch_.recv_x);
    compare.tensor("recv_x_scales", dispatched_.recv_x_scales, expected_dispatch_.recv_x_scales);
    compare.tensor("recv_topk_idx", dispatched_.recv_topk_idx, expected_dispatch_.recv_topk_idx);
    compare.tensor("recv_topk_weights", dispatched_.recv_topk_weights, expected_dispatch_.recv_topk_weights);
    compare.ints("num_recv_tokens_per_expert", dispatched_.num_recv_tokens_per_expert,
                 expected_dispatch_.num_recv_tokens_per_expert);
    compare.tensor("recv_expert_counts", dispatched_.recv_expert_counts,
                   i32_view(expected_dispatch_.num_recv_tokens_per_expert));
    compare.tensor("recv_token_count", dispatched_.recv_token_count,
                   TensorView(const_cast<int32_t*>(&received_i32), DType::i32, {1}));
    compare.in_place("recv_x", dispatched_.recv_x, out_recv_x_);
    compare.in_place("recv_x_scales", dispatched_.recv_x_scales, out_recv_x_scales_);
    compare.in_place("recv_topk_idx", dispatched_.recv_topk_idx, out_recv_topk_idx_);
    compare.in_place("recv_topk_weights", dispatched_.recv_topk_weights, out_recv_topk_weights_);

    compare.begin(Stage::combine);
    compare.tensor("combined_x", combined_.combined_x, expected_combine_.combined_x);
    compare.tensor("combined_topk_weights", combined_.combined_topk_weights,
                   expected_combine_.combined_topk_weights);
    compare.in_place("combined_x", combined_.combined_x, out_combined_x_);
    compare.in_place("combined_topk_weights", combined_.combined_topk_weights, out_combined_topk_weights_);
    return compare.result();
  }

  void dump(DumpDirectory& dump) override {
    const int rank = context_.rank;
    const InputSet& inputs = input_sets_.front();
    auto write = [&](const char* name, const TensorView& tensor) {
      dump.write(kEngineName, rank, name, to_host(tensor, context_.stream));
    };
    write("x", inputs.x);
    write("scales", inputs.x_scales);
    write("topk_idx", inputs.topk_idx);
    write("topk_weights", inputs.topk_weights);
    write("num_tokens_per_rank", layout_.num_tokens_per_rank);
    write("num_tokens_per_node", layout_.num_tokens_per_node);
    write("num_tokens_per_expert", layout_.num_tokens_per_expert);
    write("is_token_in_rank", layout_.is_token_in_rank);
    write("recv_x", dispatched_.recv_x);
    write("recv_x_scales", dispatched_.recv_x_scales);
    write("recv_topk_idx", dispatched_.recv_topk_idx);
    write("recv_topk_weights", dispatched_.recv_topk_weights);
    dump.write(kEngineName, rank, "num_recv_tokens_per_expert", dispatched_.num_recv_tokens_per_expert);
    write("y", expert_outputs_.front());
    write("combined_x", combined_.combined_x);
    write("combined_topk_weights", combined_.combined_topk_weights);
  }

 private:
  struct InputSet {
    Tensor x, x_scales, topk_idx, topk_weights;
  };
  int input_set_of(int iteration) const { return iteration % static_cast<int>(input_sets_.size()); }
  const InputSet& inputs_for(int iteration) const { return input_sets_[input_set_of(iteration)]; }

  SessionContext context_;
  Backend backend_;
  const reference::Layout& expected_layout_;
  const reference::NormalDispatchOutput& expected_dispatch_;
  const reference::NormalCombineOutput& expected_combine_;

  std::vector<InputSet> input_sets_;
  std::vector<Tensor> expert_outputs_;  // y per input set, on the backend
  Tensor host_expert_output_;           // y on the host, until every set has its copy
  Tensor out_recv_x_, out_recv_x_scales_, out_recv_topk_idx_, out_recv_topk_weights_;
  Tensor out_combined_x_, out_combined_topk_weights_;

  DispatchLayout layout_;
  DispatchResult dispatched_;
  CombineResult combined_;
  NormalInputViews heap_input_;  // --normal-heap on: the Buffer's views, refilled per call
  NormalCombineInputViews heap_combine_input_;
};

}  // namespace

std::unique_ptr<EngineSession> make_normal_session(const SessionContext& context) {
  return std::make_unique<NormalSession>(context);
}

void dump_normal_reference(DumpDirectory& dump, const Problem& problem) {
  const NormalReference& normal = problem.normal;
  const std::string group = "reference";
  for (size_t rank = 0; rank < normal.dispatched.size(); ++rank) {
    const int r = static_cast<int>(rank);
    const reference::Layout& layout = normal.layouts[rank];
    const reference::NormalDispatchOutput& dispatched = normal.dispatched[rank];
    const int64_t tokens = problem.inputs[rank].x.size(0);
    std::vector<uint8_t> in_rank = layout.is_token_in_rank;
    dump.write(group, r, "num_tokens_per_rank", layout.num_tokens_per_rank);
    dump.write(group, r, "num_tokens_per_node", layout.num_tokens_per_node);
    dump.write(group, r, "num_tokens_per_expert", layout.num_tokens_per_expert);
    dump.write(group, r, "is_token_in_rank",
               TensorView(in_rank.data(), DType::boolean, {tokens, problem.shape.topology.num_ranks}));
    dump.write(group, r, "recv_x", dispatched.recv_x);
    dump.write(group, r, "recv_x_scales", dispatched.recv_x_scales);
    dump.write(group, r, "recv_topk_idx", dispatched.recv_topk_idx);
    dump.write(group, r, "recv_topk_weights", dispatched.recv_topk_weights);
    dump.write(group, r, "num_recv_tokens_per_expert", dispatched.num_recv_tokens_per_expert);
    dump.write(group, r, "recv_src_rank", dispatched.recv_src_rank);
    std::vector<int64_t> src_token = dispatched.recv_src_token;
    dump.write(group, r, "recv_src_token",
               TensorView(src_token.data(), DType::i64, {static_cast<int64_t>(src_token.size())}));
    dump.write(group, r, "y", normal.expert_outputs[rank]);
    dump.write(group, r, "combined_x", normal.combined[rank].combined_x);
    dump.write(group, r, "combined_topk_weights", normal.combined[rank].combined_topk_weights);
  }
}

}  // namespace switchyard::bench
