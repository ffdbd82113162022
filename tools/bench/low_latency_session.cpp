// The `low_latency` engine (expert-major, DESIGN.md; switchyard/low_latency.hpp) on one rank, and
// the `symmetric` engine, which takes the same calls and must give the same outputs:
// dispatch -> synthetic expert -> combine into preallocated outputs, checked against
// problem.low_latency.
//
// Its inputs are the problem's low_latency inputs: --ll-tokens tokens per rank (see --help), always
// bf16. With --dtype fp8 the dispatch casts them on the fly (use_fp8: per-128-channel amax scales,
// f32), as the engine is meant to be used at decode time.
//
// dispatch: max_tokens_per_rank = --ll-tokens, no round_scale / ue8m0. combine: the dispatch's own
// topk_idx and topk_weights, the expert outputs y passed as x (no zero-copy). The timed iterations
// make plain calls; the hook split (low_latency) makes the same calls with return_recv_hook, and the
// graph replays (cuda) replay captured plain calls.
//
// The check: rows at and past recv_count[l] of recv_x, recv_x_scales and src_info are unspecified
// (the library does not write them), so only rows < recv_count are compared, and only those rows are
// poisoned before a check iteration (which also keeps memory small: [L, R * max, H] is mostly
// empty). recv_count and layout_range are compared whole, and combined_x.
//
// One input set serves every iteration (a decode batch is small: no rotation against the cache).
// The synthetic expert runs on the host once, on the first check iteration's recv_x; its y is placed
// on the backend once and reused.
#include <algorithm>
#include <cstring>
#include <functional>
#include <vector>

#include "compare.hpp"
#include "engines.hpp"
#include "switchyard/errors.hpp"
#include "transfer.hpp"
#include "workload/workload.hpp"

namespace switchyard::bench {
namespace {

// Rows [0, rows) of expert `l` of an expert-major tensor [L, R * max, C].
TensorView expert_rows(const TensorView& tensor, int64_t l, int64_t rows) {
  const int64_t columns = tensor.ndim == 3 ? tensor.shape[2] : 1;
  const size_t row_bytes = static_cast<size_t>(columns) * dtype_size(tensor.dtype);
  uint8_t* data = tensor.as<uint8_t>() + static_cast<size_t>(l * tensor.shape[1]) * row_bytes;
  if (tensor.ndim == 3)
    return TensorView(data, tensor.dtype, {rows, columns}, tensor.device, tensor.device_index);
  return TensorView(data, tensor.dtype, {rows}, tensor.device, tensor.device_index);
}

class LowLatencySession final : public EngineSession {
 public:
  LowLatencySession(const SessionContext& context, Engine engine)
      : context_(context),
        engine_(engine),
        backend_(context.options->backend),
        reference_(engine == Engine::symmetric ? context.problem->symmetric : context.problem->low_latency),
        expected_(reference_.dispatched.at(context.rank)),
        expected_combined_(reference_.combined.at(context.rank)) {
    const BenchOptions& options = *context.options;
    const workload::RankData& data = reference_.inputs.at(context.rank);
    const Stream stream = context.stream;
    heap_tensors_ = engine == Engine::symmetric && options.symmetric_heap;
    if (heap_tensors_) {
      // The rank's tokens where every peer reads them in place (Buffer::symmetric_input).
      x_ = Tensor::borrow(context.buffer->symmetric_input(data.x.size(0), options.hidden));
      copy_into(x_, data.x, stream);
    } else {
      x_ = to_backend(data.x, backend_, stream);
    }
    topk_idx_ = to_backend(data.topk_idx, backend_, stream);
    topk_weights_ = to_backend(data.topk_weights, backend_, stream);

    const int64_t local_experts = options.num_experts / options.topology.num_ranks;
    const int64_t rows = reference_.rows_per_expert;  // expert_capacity, or R * max
    const bool fp8 = reference_.ll_options.use_fp8;
    if (heap_tensors_) {
      // recv_x (and its scales) in the heap receive area (Buffer::symmetric_receive, sized for this run's
      // dtype by bench_buffer_options), which every source pushes into on CUDA, across processes too.
      const SymmetricReceiveViews views = context.buffer->symmetric_receive(rows, options.hidden);
      out_recv_x_ = Tensor::borrow(views.recv_x);
      if (fp8) out_recv_x_scales_ = Tensor::borrow(views.recv_x_scales);
    } else {
      out_recv_x_ = allocate_on_backend(backend_, fp8 ? DType::fp8_e4m3 : DType::bf16,
                                        {local_experts, rows, options.hidden}, stream);
      if (fp8) {
        out_recv_x_scales_ = allocate_on_backend(
            backend_, DType::f32, {local_experts, rows, options.hidden / kFp8ScaleBlock}, stream);
      }
    }
    out_recv_count_ = allocate_on_backend(backend_, DType::i32, {local_experts}, stream);
    out_layout_range_ =
        allocate_on_backend(backend_, DType::i32, {local_experts, options.topology.num_ranks, 2}, stream);
    out_src_info_ = allocate_on_backend(backend_, DType::i32, {local_experts, rows}, stream);
    out_combined_x_ = allocate_on_backend(backend_, DType::bf16, {data.x.size(0), options.hidden}, stream);
  }

  // The rows the reference says arrive; the rest are unspecified (see the top of this file).
  void poison_outputs() override {
    for (int64_t l = 0; l < expected_.recv_count.numel(); ++l) {
      poison_on_backend(expert_rows(out_recv_x_, l, received_rows(l)), context_.stream);
      if (out_recv_x_scales_.defined())
        poison_on_backend(expert_rows(out_recv_x_scales_, l, received_rows(l)), context_.stream);
    }
    for (const Tensor* output : {&out_recv_count_, &out_layout_range_, &out_src_info_, &out_combined_x_}) {
      poison_on_backend(*output, context_.stream);
    }
  }

  void prepare(int /*iteration*/) override {
    dispatched_ = LowLatencyDispatchResult();
    combined_ = LowLatencyCombineResult();
  }

  void dispatch(int /*iteration*/) override { call_dispatch(dispatch_args()); }

  void expert(int /*iteration*/) override {
    if (expert_output_.defined()) return;
    Tensor recv_count = to_host(dispatched_.recv_count, context_.stream);
    Tensor recv_x = to_host(dispatched_.recv_x, context_.stream);
    Tensor recv_x_scales = to_host(dispatched_.recv_x_scales, context_.stream);
    const Tensor host_output =
        expert_major_synthetic_expert(recv_x, recv_x_scales, recv_count, context_.rank);
    if (heap_tensors_) {
      // The expert outputs where every home reads them in place (Buffer::symmetric_expert_output); the
      // routing is the same every iteration, so one copy serves them all.
      expert_output_ = Tensor::borrow(context_.buffer->symmetric_expert_output(dispatched_.handle));
      copy_into(expert_output_, host_output, context_.stream);
    } else {
      expert_output_ = to_backend(host_output, backend_, context_.stream);
    }
  }

  void combine(int /*iteration*/) override { call_combine(combine_args()); }

  // symmetric: the combine path and dispatch source its Buffer took (the design bytes follow them).
  std::string note() const override {
    if (engine_ != Engine::symmetric) return "";
    return std::string("combine path: ") + symmetric_combine_name(context_.buffer->symmetric_combine_path()) +
           " (Buffer::symmetric_combine_path; --symmetric-combine); dispatch source: " +
           (heap_tensors_ && !reference_.ll_options.use_fp8
                ? std::string("zero_copy (x is the heap-resident input: --symmetric-heap on)")
                : std::string(symmetric_dispatch_name(context_.buffer->symmetric_dispatch_path())) +
                      " (Buffer::symmetric_dispatch_path; --symmetric-dispatch; fp8 publishes when it "
                      "pulls)") +
           "; on CUDA pushed instead where every receiver's outputs are reachable (ranks as threads on one "
           "GPU, or --symmetric-heap on: recv_x in the heap receive area), unless SWITCHYARD_SYMMETRIC_PULL "
           "or --symmetric-dispatch names a pull" +
           (heap_tensors_ ? "; y is the heap-resident expert output" : "");
  }

  // low_latency only: the symmetric engine is one stage each way (its calls refuse return_recv_hook).
  std::string hook_split_unsupported() const override {
    if (engine_ == Engine::symmetric)
      return "not supported by the symmetric engine (one stage each way, no hook)";
    return "";
  }
  void dispatch_send(int /*iteration*/) override {
    LowLatencyDispatchArgs args = dispatch_args();
    args.return_recv_hook = true;
    call_dispatch(args);
    pending_hook_ = std::move(dispatched_.hook);
  }
  void combine_send(int /*iteration*/) override {
    LowLatencyCombineArgs args = combine_args();
    args.return_recv_hook = true;
    call_combine(args);
    pending_hook_ = std::move(combined_.hook);
  }
  void receive() override {
    if (!pending_hook_) throw Error("switchyard-bench: receive() without a pending hook");
    std::function<void()> hook = std::move(pending_hook_);
    pending_hook_ = nullptr;
    hook();
  }

  // Both engines are capturable: no host synchronisation (their sequence numbers, buffer halves and
  // barrier phases are counted on the device), outputs preallocated here, and the inputs (one set,
  // x_, topk_idx_, topk_weights_ and the expert's y) never move.
  std::string graph_capture_unsupported() const override { return ""; }

  Difference first_difference() override {
    Comparison compare(context_.stream);
    compare.begin(Stage::dispatch);
    compare.tensor("recv_count", dispatched_.recv_count, expected_.recv_count);
    compare.tensor("layout_range", dispatched_.layout_range, expected_.layout_range);
    for (int64_t l = 0; l < expected_.recv_count.numel() && !compare.result().found(); ++l) {
      const int64_t rows = received_rows(l);
      const std::string expert = " (local expert " + std::to_string(l) + ", rows < recv_count)";
      const TensorView actual_x =
          dispatched_.recv_x.defined() ? expert_rows(dispatched_.recv_x, l, rows) : TensorView();
      compare.tensor("recv_x" + expert, actual_x, expert_rows(expected_.recv_x, l, rows));
      if (expected_.recv_x_scales.defined() || dispatched_.recv_x_scales.defined()) {
        const TensorView actual = dispatched_.recv_x_scales.defined()
                                      ? expert_rows(dispatched_.recv_x_scales, l, rows)
                                      : TensorView();
        const TensorView expected =
            expected_.recv_x_scales.defined() ? expert_rows(expected_.recv_x_scales, l, rows) : TensorView();
        compare.tensor("recv_x_scales" + expert, actual, expected);
      }
      const TensorView actual_src =
          dispatched_.src_info.defined() ? expert_rows(dispatched_.src_info, l, rows) : TensorView();
      compare.tensor("src_info" + expert, actual_src, expert_rows(expected_.src_info, l, rows));
    }
    compare.in_place("recv_x", dispatched_.recv_x, out_recv_x_);
    compare.in_place("recv_x_scales", dispatched_.recv_x_scales, out_recv_x_scales_);
    compare.in_place("recv_count", dispatched_.recv_count, out_recv_count_);
    compare.in_place("layout_range", dispatched_.layout_range, out_layout_range_);
    compare.in_place("src_info", dispatched_.src_info, out_src_info_);

    compare.begin(Stage::combine);
    compare.tensor("combined_x", combined_.combined_x, expected_combined_);
    compare.in_place("combined_x", combined_.combined_x, out_combined_x_);
    return compare.result();
  }

  // recv_x, recv_x_scales and src_info as the reference writes them: rows at and past recv_count are
  // zero (src_info -1) in the files, whatever the engine left there.
  void dump(DumpDirectory& dump) override {
    const int rank = context_.rank;
    const Stream stream = context_.stream;
    auto write = [&](const char* name, const TensorView& tensor) {
      dump.write(engine_name(engine_), rank, name, to_host(tensor, stream));
    };
    Tensor counts = to_host(dispatched_.recv_count, stream);
    auto write_received_rows = [&](const char* name, const TensorView& tensor, int fill) {
      if (!tensor.defined()) return;
      Tensor host = to_host(tensor, stream);
      Tensor copy =
          Tensor::empty_like_shape(host.view().dtype, host.view().shape, host.view().ndim, Device::cpu, 0);
      std::memcpy(copy.data(), host.data(), host.view().nbytes());
      const int64_t rows_per_expert = copy.view().shape[1];
      const size_t row_bytes =
          copy.view().nbytes() / static_cast<size_t>(copy.view().shape[0] * rows_per_expert);
      for (int64_t l = 0; l < copy.view().shape[0]; ++l) {
        const int64_t count = counts.view().as<const int32_t>()[l];
        if (count < 0 || count >= rows_per_expert) continue;
        uint8_t* first =
            copy.view().as<uint8_t>() + static_cast<size_t>(l * rows_per_expert + count) * row_bytes;
        std::memset(first, fill, static_cast<size_t>(rows_per_expert - count) * row_bytes);
      }
      dump.write(engine_name(engine_), rank, name, copy);
    };
    write("x", x_);
    write("topk_idx", topk_idx_);
    write("topk_weights", topk_weights_);
    write_received_rows("recv_x", dispatched_.recv_x, 0);
    write_received_rows("recv_x_scales", dispatched_.recv_x_scales, 0);
    write("recv_count", dispatched_.recv_count);
    write("layout_range", dispatched_.layout_range);
    write_received_rows("src_info", dispatched_.src_info, 0xFF);  // -1
    write("y", expert_output_);
    write("combined_x", combined_.combined_x);
  }

 private:
  // Every call writes into the preallocated outputs and reads the same input tensors, so a captured
  // call replays on the current inputs.
  LowLatencyDispatchArgs dispatch_args() const {
    LowLatencyDispatchArgs args;
    args.x = x_;
    args.topk_idx = topk_idx_;
    args.max_tokens_per_rank = reference_.max_tokens_per_rank;
    args.num_experts = context_.options->num_experts;
    args.expert_capacity = reference_.expert_capacity;  // 0 for low_latency
    args.use_fp8 = reference_.ll_options.use_fp8;
    args.out_recv_x = out_recv_x_;
    args.out_recv_x_scales = out_recv_x_scales_;
    args.out_recv_count = out_recv_count_;
    args.out_layout_range = out_layout_range_;
    args.out_src_info = out_src_info_;
    args.stream = context_.stream;
    return args;
  }

  LowLatencyCombineArgs combine_args() const {
    LowLatencyCombineArgs args;
    args.x = expert_output_;
    args.topk_idx = topk_idx_;
    args.topk_weights = topk_weights_;
    args.handle = &dispatched_.handle;
    args.out_combined_x = out_combined_x_;
    args.stream = context_.stream;
    return args;
  }

  void call_dispatch(const LowLatencyDispatchArgs& args) {
    dispatched_ = engine_ == Engine::symmetric ? context_.buffer->symmetric_dispatch(args)
                                               : context_.buffer->low_latency_dispatch(args);
  }

  void call_combine(const LowLatencyCombineArgs& args) {
    combined_ = engine_ == Engine::symmetric ? context_.buffer->symmetric_combine(args)
                                             : context_.buffer->low_latency_combine(args);
  }

  // Rows of local expert l that exist in the outputs: recv_count, within the capacity.
  int64_t received_rows(int64_t l) const {
    return std::min<int64_t>(expected_.recv_count.as<const int32_t>()[l], reference_.rows_per_expert);
  }

  SessionContext context_;
  Engine engine_;
  Backend backend_;
  const LowLatencyReference& reference_;
  const reference::LowLatencyDispatchOutput& expected_;
  const Tensor& expected_combined_;

  bool heap_tensors_ = false;  // --symmetric-heap on: x_ and expert_output_ are views of the heap
  Tensor x_, topk_idx_, topk_weights_;
  Tensor expert_output_;  // y on the backend, from the first check iteration
  Tensor out_recv_x_, out_recv_x_scales_, out_recv_count_, out_layout_range_, out_src_info_, out_combined_x_;

  LowLatencyDispatchResult dispatched_;
  LowLatencyCombineResult combined_;
  std::function<void()> pending_hook_;  // the receive half of the last *_send()
};

}  // namespace

std::unique_ptr<EngineSession> make_low_latency_session(const SessionContext& context) {
  return std::make_unique<LowLatencySession>(context, Engine::low_latency);
}

std::unique_ptr<EngineSession> make_symmetric_session(const SessionContext& context) {
  return std::make_unique<LowLatencySession>(context, Engine::symmetric);
}

void dump_low_latency_reference(DumpDirectory& dump, const LowLatencyReference& ll,
                                const std::string& group) {
  for (size_t rank = 0; rank < ll.dispatched.size(); ++rank) {
    const int r = static_cast<int>(rank);
    const reference::LowLatencyDispatchOutput& dispatched = ll.dispatched[rank];
    dump.write(group, r, "recv_x", dispatched.recv_x);
    dump.write(group, r, "recv_x_scales", dispatched.recv_x_scales);
    dump.write(group, r, "recv_count", dispatched.recv_count);
    dump.write(group, r, "layout_range", dispatched.layout_range);
    dump.write(group, r, "src_info", dispatched.src_info);
    dump.write(group, r, "y", ll.expert_outputs[rank]);
    dump.write(group, r, "combined_x", ll.combined[rank]);
  }
}

}  // namespace switchyard::bench
