// The MoE layer (switchyard/moe.hpp): switchyard._C.MoeLayer over a Buffer, and the reference layer for
// the tests (switchyard._C._testing.moe_reference).
#include "switchyard/moe.hpp"

#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "bindings.hpp"
#include "switchyard/errors.hpp"
#include "switchyard/reference.hpp"
#include "tensors.hpp"

namespace switchyard::python {

namespace {

// A MoeLayer with what it reads in place: the weights' arrays and the Buffer's Python object, kept
// alive as long as the layer (the library holds views and a reference, not copies).
class PyMoeLayer {
 public:
  PyMoeLayer(nb::handle buffer_object, nb::handle w1, nb::handle w2, nb::handle w1_scales,
             nb::handle w2_scales, const MoeLayerOptions& options, const std::string& gate_up)
      : buffer_object_(nb::borrow(buffer_object)) {
    PyBuffer& buffer = nb::cast<PyBuffer&>(buffer_object);
    CallScope scope(buffer);
    MoeWeights weights;
    weights.w1 = to_view(w1, "w1", weights_alive_, buffer.placement());
    weights.w2 = to_view(w2, "w2", weights_alive_, buffer.placement());
    weights.w1_scales = to_view(w1_scales, "w1_scales", weights_alive_, buffer.placement());
    weights.w2_scales = to_view(w2_scales, "w2_scales", weights_alive_, buffer.placement());
    if (gate_up == "halves") {
      weights.gate_up = MoeGateUp::halves;
    } else if (gate_up == "interleaved") {
      weights.gate_up = MoeGateUp::interleaved;
    } else {
      throw InvalidArgument("gate_up: expected 'halves' or 'interleaved', got '" + gate_up + "'");
    }
    layer_ = std::make_unique<MoeLayer>(buffer, weights, options);
  }

  nb::object forward(nb::handle x, nb::handle topk_idx, nb::handle topk_weights, nb::handle x_scales,
                     nb::handle out, uintptr_t stream, const std::string& framework) {
    PyBuffer& buffer = nb::cast<PyBuffer&>(buffer_object_);
    const OutputStyle style = parse_output_style(framework);
    CallScope scope(buffer);
    KeepAlive keep;
    MoeArgs args;
    args.x = to_view(x, "x", keep, buffer.placement());
    args.x_scales = to_view(x_scales, "x_scales", keep, buffer.placement());
    args.topk_idx = to_view(topk_idx, "topk_idx", keep, buffer.placement());
    args.topk_weights = to_view(topk_weights, "topk_weights", keep, buffer.placement());
    args.out_y = to_view(out, "out", keep, buffer.placement(), true);
    args.stream = reinterpret_cast<Stream>(stream);
    MoeResult result;
    {
      nb::gil_scoped_release release;
      result = layer_->forward(args);
    }
    return to_python(result.y, style);
  }

  const MoeLayer& layer() const { return *layer_; }

 private:
  nb::object buffer_object_;  // first: the layer below refers to its Buffer
  KeepAlive weights_alive_;
  std::unique_ptr<MoeLayer> layer_;
};

// The views of the `name` list's arrays (one per rank), kept alive in `keep`.
std::vector<TensorView> views_of(const std::vector<nb::object>& arrays, const char* name, KeepAlive& keep) {
  std::vector<TensorView> views;
  for (const nb::object& array : arrays) views.push_back(to_view(array, name, keep, Placement{}));
  return views;
}

// MoeLayerOptions::expert_output by its Python name.
MoeExpertOutput expert_output_named(const std::string& name) {
  if (name == "local") return MoeExpertOutput::local;
  if (name == "home") return MoeExpertOutput::home;
  throw InvalidArgument("expert_output: expected 'local' or 'home', got '" + name + "'");
}

}  // namespace

void bind_moe(nb::module_& m) {
  nb::class_<MoeLayerOptions>(m, "MoeLayerOptions")
      .def(
          "__init__",
          [](MoeLayerOptions* self, int num_experts, int64_t max_tokens_per_rank, int64_t expert_capacity,
             float activation_clamp, const std::string& expert_output) {
            new (self) MoeLayerOptions{num_experts, max_tokens_per_rank, expert_capacity, activation_clamp,
                                       expert_output_named(expert_output)};
          },
          nb::arg("num_experts"), nb::arg("max_tokens_per_rank"), nb::arg("expert_capacity") = 0,
          nb::arg("activation_clamp") = 0.0f, nb::arg("expert_output") = "local")
      .def_rw("num_experts", &MoeLayerOptions::num_experts)
      .def_rw("max_tokens_per_rank", &MoeLayerOptions::max_tokens_per_rank)
      .def_rw("expert_capacity", &MoeLayerOptions::expert_capacity)
      .def_rw("activation_clamp", &MoeLayerOptions::activation_clamp)
      .def_prop_rw(
          "expert_output",
          [](const MoeLayerOptions& self) {
            return std::string(self.expert_output == MoeExpertOutput::home ? "home" : "local");
          },
          [](MoeLayerOptions& self, const std::string& name) {
            self.expert_output = expert_output_named(name);
          });

  nb::class_<PyMoeLayer>(m, "MoeLayer",
                         "The MoE layer over a Buffer's symmetric region (switchyard/moe.hpp).")
      .def(
          "__init__",
          [](PyMoeLayer* self, nb::handle buffer, nb::handle w1, nb::handle w2, nb::handle w1_scales,
             nb::handle w2_scales, const MoeLayerOptions& options, const std::string& gate_up) {
            new (self) PyMoeLayer(buffer, w1, w2, w1_scales, w2_scales, options, gate_up);
          },
          nb::arg("buffer"), nb::arg("w1"), nb::arg("w2"), nb::arg("w1_scales").none(),
          nb::arg("w2_scales").none(), nb::arg("options"), nb::arg("gate_up") = "halves")
      .def("forward", &PyMoeLayer::forward, nb::arg("x"), nb::arg("topk_idx"), nb::arg("topk_weights"),
           nb::arg("x_scales").none(), nb::arg("out").none(), nb::arg("stream") = 0,
           nb::arg("framework") = "numpy", "-> y, bf16 [N, H]")
      .def_prop_ro("hidden", [](const PyMoeLayer& self) { return self.layer().hidden(); })
      .def_prop_ro("intermediate", [](const PyMoeLayer& self) { return self.layer().intermediate(); })
      .def_prop_ro("local_experts", [](const PyMoeLayer& self) { return self.layer().local_experts(); })
      .def_prop_ro("expert_capacity", [](const PyMoeLayer& self) { return self.layer().expert_capacity(); })
      .def_prop_ro("weight_dtype", [](const PyMoeLayer& self) {
        return std::string(dtype_name(self.layer().weight_dtype()));
      });

  nb::module_ testing = nb::borrow<nb::module_>(m.attr("_testing"));
  testing.def(
      "moe_reference",
      [](const std::vector<nb::object>& xs, const std::vector<nb::object>& topk_idxs,
         const std::vector<nb::object>& topk_weights, const std::vector<nb::object>& w1s,
         const std::vector<nb::object>& w2s, const std::vector<nb::object>& w1_scales,
         const std::vector<nb::object>& w2_scales, int num_experts, float activation_clamp,
         const std::vector<nb::object>& x_scales) {
        KeepAlive keep;
        const std::vector<TensorView> xs_scales = views_of(x_scales, "x_scales", keep);
        const std::vector<TensorView> x = views_of(xs, "xs", keep),
                                      ids = views_of(topk_idxs, "topk_idxs", keep),
                                      gates = views_of(topk_weights, "topk_weights", keep),
                                      w1 = views_of(w1s, "w1s", keep), w2 = views_of(w2s, "w2s", keep),
                                      s1 = views_of(w1_scales, "w1_scales", keep),
                                      s2 = views_of(w2_scales, "w2_scales", keep);
        const size_t ranks = x.size();
        if (ids.size() != ranks || gates.size() != ranks || w1.size() != ranks || w2.size() != ranks ||
            (!s1.empty() && s1.size() != ranks) || (!s2.empty() && s2.size() != ranks) ||
            (!xs_scales.empty() && xs_scales.size() != ranks)) {
          throw InvalidArgument("moe_reference: expected one of each per rank (" + std::to_string(ranks) +
                                ")");
        }
        std::vector<reference::RankInputs> inputs(ranks);
        std::vector<MoeWeights> weights(ranks);
        for (size_t r = 0; r < ranks; ++r) {
          inputs[r].x = x[r];
          if (!xs_scales.empty()) inputs[r].x_scales = xs_scales[r];  // fp8 x: the caller's scales
          inputs[r].topk_idx = ids[r];
          inputs[r].topk_weights = gates[r];
          weights[r] = {w1[r], s1.empty() ? TensorView() : s1[r], w2[r], s2.empty() ? TensorView() : s2[r]};
        }
        const std::vector<Tensor> ys = reference::moe_layer(
            inputs, weights, num_experts, Topology::single_node(static_cast<int>(ranks)), activation_clamp);
        nb::list out;
        for (const Tensor& y : ys) out.append(to_python(y, parse_output_style("numpy")));
        return out;
      },
      nb::arg("xs"), nb::arg("topk_idxs"), nb::arg("topk_weights"), nb::arg("w1s"), nb::arg("w2s"),
      nb::arg("w1_scales"), nb::arg("w2_scales"), nb::arg("num_experts"), nb::arg("activation_clamp") = 0.0f,
      nb::arg("x_scales") = std::vector<nb::object>(),
      "-> [y per rank] (numpy bf16 bits): reference::moe_layer on every rank's inputs (fp8 x with x_scales, "
      "one per rank, or none) and weights");
}

}  // namespace switchyard::python
