// switchyard._torch_ops: get_dispatch_layout, the cached dispatch and the combine for a torch caller at
// DeepEP's host cost. DeepEP's binding allocates its outputs with at::empty in C++ and reads its inputs
// as at::Tensors; from Python, the same allocations, the views and the reading of a tensor's attributes
// cost about twice its call (bench/NOTES.md, session 14). This module does what DeepEP's binding does and
// hands the addresses to switchyard._C through a capsule (python/src/layout_entry.h), so it needs torch's
// headers but none of switchyard's: it is built only where torch is installed (python/CMakeLists.txt,
// SWITCHYARD_TORCH_OPS), and switchyard.deep_ep uses it when it imports, else its Python paths.
//
// A plain CPython module of METH_FASTCALL functions: pybind11's argument machinery would cost more than
// the work it wraps. This file holds what the functions share; each lives with its engine's calls
// (layout_op.cpp, normal_ops.cpp).
#include <Python.h>
// clang-format off: torch's Python headers after Python.h
#include <torch/csrc/autograd/python_variable.h>
// clang-format on

#include <climits>

#include "torch_ops.hpp"

namespace switchyard_torch_ops {

const SwitchyardLayoutEntry* entry_of(PyObject* capsule) {
  const auto* entry =
      static_cast<const SwitchyardLayoutEntry*>(PyCapsule_GetPointer(capsule, SWITCHYARD_LAYOUT_ENTRY_NAME));
  if (entry == nullptr) return nullptr;  // PyCapsule_GetPointer named the wrong object
  if (entry->version != SWITCHYARD_LAYOUT_ENTRY_VERSION) {
    PyErr_Format(PyExc_RuntimeError,
                 "switchyard._torch_ops: expected layout entry version %d, got %u (rebuild switchyard)",
                 SWITCHYARD_LAYOUT_ENTRY_VERSION, entry->version);
    return nullptr;
  }
  return entry;
}

const at::Tensor* qualifying(const SwitchyardLayoutEntry& entry, PyObject* object, at::ScalarType dtype) {
  if (!entry.cuda || !THPVariable_Check(object)) return nullptr;
  const at::Tensor& tensor = THPVariable_Unpack(object);
  if (!tensor.is_cuda() || tensor.get_device() != entry.device || tensor.scalar_type() != dtype ||
      tensor.dim() != 2 || !tensor.is_contiguous()) {
    return nullptr;
  }
  return &tensor;
}

bool optional_qualifying(const SwitchyardLayoutEntry& entry, PyObject* object, at::ScalarType dtype,
                         const at::Tensor** tensor) {
  *tensor = object == Py_None ? nullptr : qualifying(entry, object, dtype);
  return object == Py_None || *tensor != nullptr;
}

bool int64_of(PyObject* object, int64_t& value) {
  if (!PyLong_CheckExact(object)) return false;
  const long long parsed = PyLong_AsLongLong(object);
  if (parsed == -1 && PyErr_Occurred()) {  // past int64: the general path says so
    PyErr_Clear();
    return false;
  }
  value = parsed;
  return true;
}

bool tuning_of(PyObject* object, SwitchyardCallTuning& tuning) {
  tuning = SwitchyardCallTuning{0, 0, 0};
  if (object == Py_None) return true;
  if (!PyTuple_CheckExact(object) || PyTuple_GET_SIZE(object) != 3) return false;
  int32_t* fields[3] = {&tuning.num_channels, &tuning.ring_slots, &tuning.chunk_tokens};
  for (Py_ssize_t i = 0; i < 3; ++i) {
    int64_t value = 0;
    if (!int64_of(PyTuple_GET_ITEM(object, i), value) || value < INT32_MIN || value > INT32_MAX) return false;
    *fields[i] = static_cast<int32_t>(value);
  }
  return true;
}

void* current_stream(const SwitchyardLayoutEntry& entry) {
  const cudaStream_t stream =
      c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(entry.device)).stream();
  // torch's default stream is the null stream, which to switchyard means "the Buffer's own stream" (not
  // ordered with the caller's work, and with plain, device-synchronising allocations): it is passed as the
  // legacy default stream it is, as the general path's framework_stream (_tensors.py) passes it.
  return stream != nullptr ? stream : cudaStreamLegacy;
}

PyObject* tuple_of(std::initializer_list<PyObject*> parts) {
  PyObject* tuple = PyTuple_New(static_cast<Py_ssize_t>(parts.size()));
  bool complete = tuple != nullptr;
  for (PyObject* part : parts) complete = complete && part != nullptr;
  if (!complete) {
    for (PyObject* part : parts) Py_XDECREF(part);
    Py_XDECREF(tuple);
    return nullptr;
  }
  Py_ssize_t index = 0;
  for (PyObject* part : parts) PyTuple_SET_ITEM(tuple, index++, part);  // steals each reference
  return tuple;
}

PyObject* wrap_or_none(const at::Tensor& tensor) {
  if (!tensor.defined()) Py_RETURN_NONE;
  return THPVariable_Wrap(tensor);
}

bool expect_arguments(Py_ssize_t nargs, Py_ssize_t expected, const char* signature) {
  if (nargs == expected) return true;
  PyErr_Format(PyExc_TypeError, "%s: expected %zd arguments, got %zd", signature, expected, nargs);
  return false;
}

namespace {

PyCFunction fastcall(PyObject* (*function)(PyObject*, PyObject* const*, Py_ssize_t)) {
  return reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(function));
}

PyMethodDef methods[] = {
    {"dispatch_layout", fastcall(&dispatch_layout), METH_FASTCALL,
     "dispatch_layout(entry, topk_idx, num_experts) -> (per rank, per node, per expert, is_token_in_rank) or "
     "None"},
    {"dispatch", fastcall(&dispatch), METH_FASTCALL,
     "dispatch(entry, x, x_scales, topk_idx, topk_weights, layout, num_experts, expert_alignment, "
     "num_worst_tokens, tuning) -> (recv_x or (recv_x, recv_x_scales), recv_topk_idx, recv_topk_weights or "
     "None, "
     "num_recv_tokens_per_expert, handle) or None"},
    {"cached_dispatch", fastcall(&cached_dispatch), METH_FASTCALL,
     "cached_dispatch(entry, x, x_scales, handle, num_worst_tokens, tuning) -> recv_x (bf16 x), "
     "(recv_x, recv_x_scales) (fp8 x with row-major scales), or None"},
    {"combine", fastcall(&combine), METH_FASTCALL,
     "combine(entry, x, handle, topk_weights, bias0, bias1, tuning) -> (combined_x, combined_topk_weights or "
     "None) or None"},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    "_torch_ops",
    "switchyard's torch-native entry points (get_dispatch_layout, the dispatch, fresh and cached, and the "
    "combine). Use switchyard.deep_ep.",
    -1,
    methods,
    nullptr,
    nullptr,
    nullptr,
    nullptr};

}  // namespace

}  // namespace switchyard_torch_ops

PyMODINIT_FUNC PyInit__torch_ops() {
  PyObject* m = PyModule_Create(&switchyard_torch_ops::module);
  if (m == nullptr) return nullptr;
  // The torch this module was compiled against: switchyard.deep_ep uses the module only under it.
  if (PyModule_AddStringConstant(m, "TORCH_VERSION", SWITCHYARD_TORCH_VERSION) != 0 ||
      PyModule_AddIntConstant(m, "ENTRY_VERSION", SWITCHYARD_LAYOUT_ENTRY_VERSION) != 0) {
    Py_DECREF(m);
    return nullptr;
  }
  return m;
}
