// The expert-major engines (switchyard/low_latency.hpp): low_latency (with its send/receive hooks
// and zero-copy combine buffer) and symmetric (same arguments and outputs, no hooks, no zero copy).
#include <nanobind/stl/function.h>
#include <nanobind/stl/string.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "bindings.hpp"
#include "switchyard/errors.hpp"
#include "tensors.hpp"

namespace switchyard::python {

namespace {

Stream to_stream(uintptr_t stream) {
  return reinterpret_cast<Stream>(stream);
}

enum class Engine { low_latency, symmetric };

// A Python callable running `hook` once, without the GIL. It keeps alive what the receive half still
// needs: the Buffer (its Python object) and the call's input arrays.
nb::object make_hook(std::function<void()> hook, nb::handle buffer, std::shared_ptr<KeepAlive> keep,
                     const char* name) {
  if (!hook) return nb::none();
  auto state = std::make_shared<std::function<void()>>(std::move(hook));
  nb::object buffer_ref = nb::borrow(buffer);
  std::string what = name;
  return nb::cpp_function([state, buffer_ref, keep, what]() {
    if (!*state)
      throw InvalidArgument(what + " hook: already called (a hook runs the receive half at most once)");
    std::function<void()> run = std::move(*state);
    *state = nullptr;
    CallScope scope(nb::cast<const PyBuffer&>(buffer_ref));
    nb::gil_scoped_release release;
    run();
  });
}

nb::dict dispatch(Engine engine, nb::handle self_object, nb::handle x, nb::handle topk_idx,
                  int64_t max_tokens_per_rank, int num_experts, bool use_fp8, bool round_scale,
                  bool use_ue8m0, bool return_recv_hook, int64_t expert_capacity, uintptr_t stream,
                  const std::string& framework, nb::handle wait_recv_cost_stats, nb::handle x_scales,
                  nb::handle out_recv_x, nb::handle out_recv_x_scales) {
  PyBuffer& self = nb::cast<PyBuffer&>(self_object);
  const OutputStyle style = parse_output_style(framework);
  CallScope scope(self);
  auto keep = std::make_shared<KeepAlive>();
  LowLatencyDispatchArgs args;
  args.x = to_view(x, "x", *keep, self.placement());
  // With fp8 x (uint8 bits, or a float8_e4m3fn tensor): the caller's scales, carried as given.
  args.x_scales = to_view(x_scales, "x_scales", *keep, self.placement());
  args.topk_idx = to_view(topk_idx, "topk_idx", *keep, self.placement());
  args.max_tokens_per_rank = max_tokens_per_rank;
  args.num_experts = num_experts;
  args.use_fp8 = use_fp8;
  args.round_scale = round_scale;
  args.use_ue8m0 = use_ue8m0;
  args.return_recv_hook = return_recv_hook;
  args.expert_capacity = expert_capacity;
  // Added to when the receive half runs: kept alive with the inputs until the hook (if any) has run.
  args.wait_recv_cost_stats =
      to_view(wait_recv_cost_stats, "wait_recv_cost_stats", *keep, self.placement(), true);
  // Optional preallocated outputs (e.g. Buffer.symmetric_receive's views, which the sources push into);
  // written when the receive half runs: kept alive with the inputs until the hook (if any) has run.
  args.out_recv_x = to_view(out_recv_x, "out_recv_x", *keep, self.placement(), true);
  args.out_recv_x_scales = to_view(out_recv_x_scales, "out_recv_x_scales", *keep, self.placement(), true);
  args.stream = to_stream(stream);
  LowLatencyDispatchResult result;
  {
    nb::gil_scoped_release release;
    result = engine == Engine::low_latency ? self.low_latency_dispatch(args) : self.symmetric_dispatch(args);
  }
  nb::dict out;
  out["recv_x"] = to_python(result.recv_x, style);
  out["recv_x_scales"] = to_python(result.recv_x_scales, style);
  out["recv_count"] = to_python(result.recv_count, style);
  out["layout_range"] = to_python(result.layout_range, style);
  out["src_info"] = to_python(result.src_info, style);
  out["handle"] = nb::cast(result.handle);
  out["hook"] = make_hook(std::move(result.hook), self_object, keep, "dispatch");
  return out;
}

nb::tuple combine(Engine engine, nb::handle self_object, nb::handle x, nb::handle topk_idx,
                  nb::handle topk_weights, const LowLatencyHandle& handle, bool zero_copy,
                  bool return_recv_hook, nb::handle out_combined_x, uintptr_t stream,
                  const std::string& framework, nb::handle bias0, nb::handle bias1, bool use_logfmt,
                  nb::handle wait_recv_cost_stats) {
  PyBuffer& self = nb::cast<PyBuffer&>(self_object);
  const OutputStyle style = parse_output_style(framework);
  CallScope scope(self);
  const Placement& placement = self.placement();
  auto keep = std::make_shared<KeepAlive>();
  LowLatencyCombineArgs args;
  args.x = to_view(x, "x", *keep, placement);
  args.topk_idx = to_view(topk_idx, "topk_idx", *keep, placement);
  args.topk_weights = to_view(topk_weights, "topk_weights", *keep, placement);
  // The handle's routing data is shared: a copy keeps it alive for the hook.
  auto handle_copy = std::make_shared<LowLatencyHandle>(handle);
  args.handle = handle_copy.get();
  args.zero_copy = zero_copy;
  args.use_logfmt = use_logfmt;
  args.return_recv_hook = return_recv_hook;
  args.out_combined_x = to_view(out_combined_x, "out", *keep, placement, true);
  // Kept alive with the other inputs until the hook (if any) has run.
  args.bias0 = to_view(bias0, "bias0", *keep, placement);
  args.bias1 = to_view(bias1, "bias1", *keep, placement);
  args.wait_recv_cost_stats = to_view(wait_recv_cost_stats, "wait_recv_cost_stats", *keep, placement, true);
  args.stream = to_stream(stream);
  LowLatencyCombineResult result;
  {
    nb::gil_scoped_release release;
    result = engine == Engine::low_latency ? self.low_latency_combine(args) : self.symmetric_combine(args);
  }
  std::function<void()> hook;
  if (result.hook) hook = [run = std::move(result.hook), handle_copy]() { run(); };
  return nb::make_tuple(to_python(result.combined_x, style),
                        make_hook(std::move(hook), self_object, keep, "combine"));
}

}  // namespace

void bind_low_latency(nb::module_& m, BufferClass& buffer) {
  nb::class_<LowLatencyHandle>(
      m, "LowLatencyHandle",
      "Opaque: the routing of one low_latency (or symmetric) dispatch, for its combine. "
      "Valid only with the Buffer and engine that made it.")
      .def_prop_ro("valid", &LowLatencyHandle::valid)
      .def("__repr__", [](const LowLatencyHandle& handle) {
        return std::string("<switchyard.LowLatencyHandle") + (handle.valid() ? ">" : " (empty)>");
      });

  m.def(
      "low_latency_heap_bytes",
      [](int num_ranks, int ranks_per_node, const BufferSizing& sizing) {
        return low_latency_heap_bytes(Topology{num_ranks, ranks_per_node}, sizing);
      },
      nb::arg("num_ranks"), nb::arg("ranks_per_node"), nb::arg("sizing"));
  m.def(
      "symmetric_heap_bytes",
      [](int num_ranks, int ranks_per_node, const BufferSizing& sizing) {
        return symmetric_heap_bytes(Topology{num_ranks, ranks_per_node}, sizing);
      },
      nb::arg("num_ranks"), nb::arg("ranks_per_node"), nb::arg("sizing"));

  for (Engine engine : {Engine::low_latency, Engine::symmetric}) {
    const bool ll = engine == Engine::low_latency;
    buffer.def(
        ll ? "low_latency_dispatch" : "symmetric_dispatch",
        [engine](nb::handle self, nb::handle x, nb::handle topk_idx, int64_t max_tokens_per_rank,
                 int num_experts, bool use_fp8, bool round_scale, bool use_ue8m0, bool return_recv_hook,
                 int64_t expert_capacity, uintptr_t stream, const std::string& framework,
                 nb::handle wait_recv_cost_stats, nb::handle x_scales, nb::handle out_recv_x,
                 nb::handle out_recv_x_scales) {
          return dispatch(engine, self, x, topk_idx, max_tokens_per_rank, num_experts, use_fp8, round_scale,
                          use_ue8m0, return_recv_hook, expert_capacity, stream, framework,
                          wait_recv_cost_stats, x_scales, out_recv_x, out_recv_x_scales);
        },
        nb::arg("x"), nb::arg("topk_idx"), nb::arg("max_tokens_per_rank"), nb::arg("num_experts"),
        nb::arg("use_fp8") = false, nb::arg("round_scale") = false, nb::arg("use_ue8m0") = false,
        nb::arg("return_recv_hook") = false, nb::arg("expert_capacity") = 0, nb::arg("stream") = 0,
        nb::arg("framework") = "numpy", nb::arg("wait_recv_cost_stats").none() = nb::none(),
        nb::arg("x_scales").none() = nb::none(), nb::arg("out_recv_x").none() = nb::none(),
        nb::arg("out_recv_x_scales").none() = nb::none(),
        "-> dict(recv_x, recv_x_scales, recv_count, layout_range, src_info, handle, hook)");
    buffer.def(
        ll ? "low_latency_combine" : "symmetric_combine",
        [engine](nb::handle self, nb::handle x, nb::handle topk_idx, nb::handle topk_weights,
                 const LowLatencyHandle& handle, bool zero_copy, bool return_recv_hook, nb::handle out,
                 uintptr_t stream, const std::string& framework, nb::handle bias0, nb::handle bias1,
                 bool use_logfmt, nb::handle wait_recv_cost_stats) {
          return combine(engine, self, x, topk_idx, topk_weights, handle, zero_copy, return_recv_hook, out,
                         stream, framework, bias0, bias1, use_logfmt, wait_recv_cost_stats);
        },
        nb::arg("x").none(), nb::arg("topk_idx"), nb::arg("topk_weights"), nb::arg("handle"),
        nb::arg("zero_copy") = false, nb::arg("return_recv_hook") = false, nb::arg("out").none() = nb::none(),
        nb::arg("stream") = 0, nb::arg("framework") = "numpy", nb::arg("bias0").none() = nb::none(),
        nb::arg("bias1").none() = nb::none(), nb::arg("use_logfmt") = false,
        nb::arg("wait_recv_cost_stats").none() = nb::none(), "-> (combined_x, hook)");
  }
  buffer.def(
      "low_latency_combine_buffer",
      [](nb::handle self, const LowLatencyHandle& handle, const std::string& framework) {
        PyBuffer& buffer_ref = nb::cast<PyBuffer&>(self);
        CallScope scope(buffer_ref);
        const TensorView view = buffer_ref.low_latency_combine_buffer(handle);
        // A view of the heap: the array keeps the Buffer alive.
        return to_python(Tensor::borrow(view), parse_output_style(framework), self);
      },
      nb::arg("handle"), nb::arg("framework") = "numpy",
      "bf16 [L, R * max, H]: the heap rows low_latency_combine(zero_copy=True) reads for `handle`'s "
      "dispatch");
  buffer.def(
      "symmetric_input",
      [](nb::handle self, int64_t num_tokens, int hidden, const std::string& framework) {
        PyBuffer& buffer_ref = nb::cast<PyBuffer&>(self);
        CallScope scope(buffer_ref);
        const TensorView view = buffer_ref.symmetric_input(num_tokens, hidden);
        return to_python(Tensor::borrow(view), parse_output_style(framework), self);
      },
      nb::arg("num_tokens"), nb::arg("hidden"), nb::arg("framework") = "numpy",
      "bf16 [num_tokens, hidden]: the heap-resident x that symmetric_dispatch reads in place");
  buffer.def(
      "symmetric_expert_output",
      [](nb::handle self, const LowLatencyHandle& handle, int hidden, const std::string& framework) {
        PyBuffer& buffer_ref = nb::cast<PyBuffer&>(self);
        CallScope scope(buffer_ref);
        const TensorView view = buffer_ref.symmetric_expert_output(handle, hidden);
        return to_python(Tensor::borrow(view), parse_output_style(framework), self);
      },
      nb::arg("handle"), nb::arg("hidden") = 0, nb::arg("framework") = "numpy",
      "bf16 [L, C, hidden]: the heap-resident expert outputs that symmetric_combine reads in place");
  buffer.def(
      "symmetric_receive",
      [](nb::handle self, int64_t expert_capacity, int hidden, const std::string& framework) {
        PyBuffer& buffer_ref = nb::cast<PyBuffer&>(self);
        CallScope scope(buffer_ref);
        const SymmetricReceiveViews views = buffer_ref.symmetric_receive(expert_capacity, hidden);
        const OutputStyle style = parse_output_style(framework);
        nb::object scales = nb::none();  // a bf16 area has none
        if (views.recv_x_scales.defined())
          scales = to_python(Tensor::borrow(views.recv_x_scales), style, self);
        return nb::make_tuple(to_python(Tensor::borrow(views.recv_x), style, self), scales);
      },
      nb::arg("expert_capacity"), nb::arg("hidden") = 0, nb::arg("framework") = "numpy",
      "(fp8 e4m3 [L, C, hidden], f32 [L, C, hidden / 128]), or (bf16 [L, C, hidden], None) for a bf16 area: "
      "the heap receive area, symmetric_dispatch's out_recv_x and out_recv_x_scales that every source writes "
      "into (the push)");
}

}  // namespace switchyard::python
