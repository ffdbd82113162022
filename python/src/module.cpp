#include "bindings.hpp"
#include "layout_entry.h"
#include "switchyard/version.hpp"

NB_MODULE(_C, m) {
  namespace py = switchyard::python;
  m.doc() = "switchyard's C++ library, bound with nanobind. Use the `switchyard` package, not this module.";
  m.attr("__version__") = SWITCHYARD_VERSION_STRING;
  // The entry version Buffer.layout_entry() makes: switchyard._torch_ops is used only where its own matches
  // (a module left over from an older build falls back to the general path instead of failing its calls).
  m.attr("LAYOUT_ENTRY_VERSION") = SWITCHYARD_LAYOUT_ENTRY_VERSION;
  py::bind_errors(m);
  auto buffer = py::bind_buffer(m);
  py::bind_normal(m, buffer);
  py::bind_layout_entry(buffer);
  py::bind_low_latency(m, buffer);
  py::bind_testing(m);
  py::bind_moe(m);
}
