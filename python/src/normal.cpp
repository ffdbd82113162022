// The `normal` engine: layout, rank-major dispatch and combine (buffer.hpp).
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <optional>
#include <string>

#include "bindings.hpp"
#include "switchyard/errors.hpp"
#include "tensors.hpp"

namespace switchyard::python {

namespace {

Stream to_stream(uintptr_t stream) {
  return reinterpret_cast<Stream>(stream);
}

// Python passes a layout as the 4-tuple of its tensors (switchyard.DispatchLayout unpacks to it).
DispatchLayout to_layout(nb::handle layout, KeepAlive& keep, const Placement& placement) {
  nb::tuple parts = nb::cast<nb::tuple>(layout);
  if (parts.size() != 4) {
    throw InvalidArgument(
        "layout: expected (num_tokens_per_rank, num_tokens_per_node, num_tokens_per_expert, "
        "is_token_in_rank), got a tuple of " +
        std::to_string(parts.size()));
  }
  DispatchLayout result;
  result.num_tokens_per_rank =
      Tensor::borrow(to_view(parts[0], "layout.num_tokens_per_rank", keep, placement));
  result.num_tokens_per_node =
      Tensor::borrow(to_view(parts[1], "layout.num_tokens_per_node", keep, placement));
  result.num_tokens_per_expert =
      Tensor::borrow(to_view(parts[2], "layout.num_tokens_per_expert", keep, placement));
  result.is_token_in_rank = Tensor::borrow(to_view(parts[3], "layout.is_token_in_rank", keep, placement));
  return result;
}

namespace {

// `part` (of `storage`, DispatchLayout::storage) as a view of `flat`, the torch tensor of the storage's
// i32 words: a few torch view calls cost less host time than exporting each part by DLPack.
nb::object torch_part(const nb::object& flat, const Tensor& storage, const Tensor& part) {
  const int64_t offset = static_cast<const char*>(part.data()) - static_cast<const char*>(storage.data());
  const int64_t bytes = static_cast<int64_t>(part.nbytes());
  nb::object words = flat.attr("narrow")(0, offset / 4, (bytes + 3) / 4);
  nb::list shape;
  for (int dim = 0; dim < part.view().ndim; ++dim) shape.append(part.size(dim));
  if (part.dtype() == DType::i32) return words.attr("view")(nb::tuple(shape));
  // bool: the words' bytes, cut to the part's
  nb::object bytes_view =
      words.attr("view")(nb::module_::import_("torch").attr("bool")).attr("narrow")(0, 0, bytes);
  return bytes_view.attr("view")(nb::tuple(shape));
}

}  // namespace

nb::tuple get_dispatch_layout(PyBuffer& self, nb::handle topk_idx, int num_experts, uintptr_t stream,
                              const std::string& framework) {
  const OutputStyle style = parse_output_style(framework);
  CallScope scope(self);
  KeepAlive keep;
  const TensorView topk_idx_view = to_view(topk_idx, "topk_idx", keep, self.placement());
  DispatchLayout layout;
  {
    nb::gil_scoped_release release;
    layout = self.get_dispatch_layout(topk_idx_view, num_experts, to_stream(stream));
  }
  if (style.framework == OutputStyle::Framework::pytorch && layout.storage.defined()) {
    const nb::object flat = to_python(layout.storage, style);
    return nb::make_tuple(torch_part(flat, layout.storage, layout.num_tokens_per_rank),
                          torch_part(flat, layout.storage, layout.num_tokens_per_node),
                          torch_part(flat, layout.storage, layout.num_tokens_per_expert),
                          torch_part(flat, layout.storage, layout.is_token_in_rank));
  }
  return nb::make_tuple(
      to_python(layout.num_tokens_per_rank, style), to_python(layout.num_tokens_per_node, style),
      to_python(layout.num_tokens_per_expert, style), to_python(layout.is_token_in_rank, style));
}

// get_dispatch_layout into outputs that the caller allocated: switchyard.deep_ep's path for torch tensors,
// which allocates them with torch (as DeepEP's binding does) instead of converting the library's outputs
// (bench/NOTES.md, session 13). `counts` is i32 [R + R / ranks_per_node + num_experts]:
// num_tokens_per_rank, num_tokens_per_node and num_tokens_per_expert back to back (one memset on CUDA
// where the kernel needs one); `is_token_in_rank` bool [N, R]. Every tensor is checked as any other
// argument (a torch tensor on torch's current stream by its attributes, tensors.hpp).
void get_dispatch_layout_into(PyBuffer& self, nb::handle topk_idx, int num_experts, uintptr_t stream,
                              nb::handle counts, nb::handle is_token_in_rank) {
  CallScope scope(self);
  const Placement& placement = self.placement();
  KeepAlive keep;
  const TensorView topk_view = to_view(topk_idx, "topk_idx", keep, placement);
  const TensorView counts_view = to_view(counts, "counts", keep, placement, true);
  const int64_t ranks = self.topology().num_ranks;
  const int64_t nodes = self.topology().num_nodes();
  const int64_t expected = ranks + nodes + static_cast<int64_t>(num_experts);
  if (counts_view.dtype != DType::i32 || counts_view.ndim != 1 || num_experts < 1 ||
      counts_view.shape[0] != expected) {
    throw InvalidArgument("counts: expected an i32 tensor [num_ranks + num_nodes + num_experts] = [" +
                          std::to_string(expected) +
                          "] (num_tokens_per_rank, num_tokens_per_node and num_tokens_per_expert back to "
                          "back), got " +
                          counts_view.describe());
  }
  const DispatchLayoutOutputs out =
      layout_outputs_in(counts_view.as<int32_t>(), self.topology(), num_experts,
                        to_view(is_token_in_rank, "is_token_in_rank", keep, placement, true),
                        counts_view.device, counts_view.device_index);
  self.get_dispatch_layout(topk_view, num_experts, out, to_stream(stream));
}

nb::dict dispatch(PyBuffer& self, nb::handle x, nb::handle x_scales, nb::handle topk_idx,
                  nb::handle topk_weights, int num_experts, int expert_alignment, nb::handle layout,
                  std::optional<DispatchHandle> cached_handle, int64_t num_worst_tokens,
                  nb::handle out_recv_x, nb::handle out_recv_x_scales, nb::handle out_recv_topk_idx,
                  nb::handle out_recv_topk_weights, uintptr_t stream, const std::string& framework,
                  std::optional<CallTuning> tuning, bool device_counts, bool x_scales_column_major) {
  const OutputStyle style = parse_output_style(framework);
  CallScope scope(self);
  const Placement& placement = self.placement();
  KeepAlive keep;
  DispatchArgs args;
  args.x = to_view(x, "x", keep, placement);
  args.x_scales = to_view(x_scales, "x_scales", keep, placement);
  args.x_scales_column_major = x_scales_column_major;
  args.topk_idx = to_view(topk_idx, "topk_idx", keep, placement);
  args.topk_weights = to_view(topk_weights, "topk_weights", keep, placement);
  args.num_experts = num_experts;
  args.expert_alignment = expert_alignment;
  DispatchLayout layout_tensors;
  if (!layout.is_none()) {
    layout_tensors = to_layout(layout, keep, placement);
    args.layout = &layout_tensors;
  }
  if (cached_handle) args.cached_handle = &*cached_handle;
  args.num_worst_tokens = num_worst_tokens;
  if (tuning) args.tuning = *tuning;
  args.out_recv_x = to_view(out_recv_x, "out_recv_x", keep, placement, true);
  args.out_recv_x_scales = to_view(out_recv_x_scales, "out_recv_x_scales", keep, placement, true);
  args.out_recv_topk_idx = to_view(out_recv_topk_idx, "out_recv_topk_idx", keep, placement, true);
  args.out_recv_topk_weights = to_view(out_recv_topk_weights, "out_recv_topk_weights", keep, placement, true);
  args.stream = to_stream(stream);

  DispatchResult result;
  {
    nb::gil_scoped_release release;
    result = self.dispatch(args);
  }
  nb::dict out;
  out["recv_x"] = to_python(result.recv_x, style);
  out["recv_x_scales"] = to_python(result.recv_x_scales, style);
  out["recv_topk_idx"] = to_python(result.recv_topk_idx, style);
  out["recv_topk_weights"] = to_python(result.recv_topk_weights, style);
  out["num_recv_tokens"] = result.num_recv_tokens;
  out["num_recv_tokens_per_expert"] = nb::cast(result.num_recv_tokens_per_expert);
  // NOTES: each tensor handed to a framework costs about as much host time as a kernel launch
  // (bench/NOTES.md, session 13); callers that never read the device counts (switchyard.deep_ep) skip them.
  out["recv_expert_counts"] = device_counts ? to_python(result.recv_expert_counts, style) : nb::none();
  out["recv_token_count"] = device_counts ? to_python(result.recv_token_count, style) : nb::none();
  out["handle"] = nb::cast(result.handle);
  return out;
}

nb::tuple combine(PyBuffer& self, nb::handle x, nb::handle topk_weights, const DispatchHandle& handle,
                  nb::handle out_combined_x, nb::handle out_combined_topk_weights, uintptr_t stream,
                  const std::string& framework, nb::handle bias0, nb::handle bias1,
                  std::optional<CallTuning> tuning) {
  const OutputStyle style = parse_output_style(framework);
  CallScope scope(self);
  const Placement& placement = self.placement();
  KeepAlive keep;
  CombineArgs args;
  args.x = to_view(x, "x", keep, placement);
  args.topk_weights = to_view(topk_weights, "topk_weights", keep, placement);
  args.handle = &handle;
  if (tuning) args.tuning = *tuning;
  args.bias0 = to_view(bias0, "bias0", keep, placement);
  args.bias1 = to_view(bias1, "bias1", keep, placement);
  args.out_combined_x = to_view(out_combined_x, "out_combined_x", keep, placement, true);
  args.out_combined_topk_weights =
      to_view(out_combined_topk_weights, "out_combined_topk_weights", keep, placement, true);
  args.stream = to_stream(stream);
  CombineResult result;
  {
    nb::gil_scoped_release release;
    result = self.combine(args);
  }
  return nb::make_tuple(to_python(result.combined_x, style), to_python(result.combined_topk_weights, style));
}

}  // namespace

DispatchLayoutOutputs layout_outputs_in(int32_t* counts, const Topology& topology, int64_t num_experts,
                                        const TensorView& is_token_in_rank, Device device, int device_index) {
  const int64_t ranks = topology.num_ranks, nodes = topology.num_nodes();
  DispatchLayoutOutputs out;
  out.num_tokens_per_rank = TensorView(counts, DType::i32, {ranks}, device, device_index);
  out.num_tokens_per_node = TensorView(counts + ranks, DType::i32, {nodes}, device, device_index);
  out.num_tokens_per_expert =
      TensorView(counts + ranks + nodes, DType::i32, {num_experts}, device, device_index);
  out.is_token_in_rank = is_token_in_rank;
  return out;
}

void bind_normal(nb::module_&, BufferClass& buffer) {
  buffer
      .def("get_dispatch_layout", &get_dispatch_layout, nb::arg("topk_idx"), nb::arg("num_experts"),
           nb::arg("stream") = 0, nb::arg("framework") = "numpy",
           "-> (num_tokens_per_rank, num_tokens_per_node, num_tokens_per_expert, is_token_in_rank)")
      .def("get_dispatch_layout_into", &get_dispatch_layout_into, nb::arg("topk_idx"), nb::arg("num_experts"),
           nb::arg("stream"), nb::arg("counts"), nb::arg("is_token_in_rank"),
           "get_dispatch_layout into the caller's tensors: counts i32 [R + nodes + E] (per rank, per node, "
           "per "
           "expert, back to back) and is_token_in_rank bool [N, R]")
      .def("dispatch", &dispatch, nb::arg("x"), nb::arg("x_scales").none(), nb::arg("topk_idx").none(),
           nb::arg("topk_weights").none(), nb::arg("num_experts"), nb::arg("expert_alignment"),
           nb::arg("layout").none(), nb::arg("cached_handle").none(), nb::arg("num_worst_tokens"),
           nb::arg("out_recv_x").none(), nb::arg("out_recv_x_scales").none(),
           nb::arg("out_recv_topk_idx").none(), nb::arg("out_recv_topk_weights").none(), nb::arg("stream"),
           nb::arg("framework"), nb::arg("tuning").none() = nb::none(), nb::arg("device_counts") = true,
           nb::arg("x_scales_column_major") = false)
      .def("combine", &combine, nb::arg("x"), nb::arg("topk_weights").none(), nb::arg("handle"),
           nb::arg("out_combined_x").none(), nb::arg("out_combined_topk_weights").none(), nb::arg("stream"),
           nb::arg("framework"), nb::arg("bias0").none() = nb::none(), nb::arg("bias1").none() = nb::none(),
           nb::arg("tuning").none() = nb::none())
      .def(
          "normal_input",
          [](nb::handle self, int64_t num_tokens, int hidden, bool fp8, const std::string& framework) {
            PyBuffer& buffer_ref = nb::cast<PyBuffer&>(self);
            CallScope scope(buffer_ref);
            const NormalInputViews views =
                buffer_ref.normal_input(num_tokens, hidden, fp8 ? DType::fp8_e4m3 : DType::bf16);
            const OutputStyle style = parse_output_style(framework);
            // Views of the heap: each array keeps the Buffer alive.
            nb::object x = to_python(Tensor::borrow(views.x), style, self);
            if (!fp8) return nb::make_tuple(x, nb::none());
            return nb::make_tuple(x, to_python(Tensor::borrow(views.x_scales), style, self));
          },
          nb::arg("num_tokens"), nb::arg("hidden"), nb::arg("fp8") = false, nb::arg("framework") = "numpy",
          "(x, x_scales or None): the heap-resident dispatch input (bf16 [N, H], or fp8 e4m3 [N, H] with f32 "
          "[N, H / 128]) that every dispatch of a Buffer sized with normal_heap_input_tokens takes")
      .def(
          "normal_combine_input",
          [](nb::handle self, const DispatchHandle& handle, int hidden, const std::string& framework) {
            PyBuffer& buffer_ref = nb::cast<PyBuffer&>(self);
            CallScope scope(buffer_ref);
            const NormalCombineInputViews views = buffer_ref.normal_combine_input(handle, hidden);
            const OutputStyle style = parse_output_style(framework);
            nb::object x = to_python(Tensor::borrow(views.x), style, self);
            if (!views.topk_weights.defined()) return nb::make_tuple(x, nb::none());
            return nb::make_tuple(x, to_python(Tensor::borrow(views.topk_weights), style, self));
          },
          nb::arg("handle"), nb::arg("hidden") = 0, nb::arg("framework") = "numpy",
          "(x, topk_weights or None): the heap-resident combine input for `handle`'s dispatch (bf16 [rows, "
          "H], "
          "f32 [rows, K]) that every combine of a Buffer sized with normal_heap_combine_rows takes");
}

}  // namespace switchyard::python
