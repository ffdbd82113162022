// switchyard._torch_ops: get_dispatch_layout for a torch caller at DeepEP's host cost. DeepEP's binding
// allocates its outputs with at::empty in C++ and reads its input as an at::Tensor; from Python, the
// same allocations, the views and the reading of a tensor's attributes cost about twice its call
// (bench/NOTES.md, session 14). This module does what DeepEP's binding does and hands the addresses to
// switchyard._C through a capsule (python/src/layout_entry.h), so it needs torch's headers but none of
// switchyard's: it is built only where torch is installed (python/CMakeLists.txt, SWITCHYARD_TORCH_OPS),
// and switchyard.deep_ep uses it when it imports, else its Python path.
//
// A plain CPython module with one METH_FASTCALL function: pybind11's argument machinery would cost
// more than the work it wraps.
#include <Python.h>
// clang-format off: torch's Python headers after Python.h
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/csrc/autograd/python_variable.h>
// clang-format on

#include <cstdint>
#include <exception>

#include "layout_entry.h"

namespace {

// The call's tensor, when this path applies: a contiguous int64 [N, K] tensor on the entry's CUDA device.
// Anything else (other devices, dtypes, strides, NumPy) goes to switchyard.deep_ep's general path,
// which converts it or names what is wrong.
const at::Tensor* qualifying_topk(const SwitchyardLayoutEntry& entry, PyObject* object) {
  if (!entry.cuda || !THPVariable_Check(object)) return nullptr;
  const at::Tensor& topk = THPVariable_Unpack(object);
  if (!topk.is_cuda() || topk.get_device() != entry.device || topk.scalar_type() != at::kLong ||
      topk.dim() != 2 || !topk.is_contiguous()) {
    return nullptr;
  }
  return &topk;
}

PyObject* wrap_all(const at::Tensor& counts, int64_t ranks, int64_t nodes, int64_t experts,
                   const at::Tensor& is_token_in_rank) {
  PyObject* parts[4] = {
      THPVariable_Wrap(counts.narrow(0, 0, ranks)), THPVariable_Wrap(counts.narrow(0, ranks, nodes)),
      THPVariable_Wrap(counts.narrow(0, ranks + nodes, experts)), THPVariable_Wrap(is_token_in_rank)};
  PyObject* tuple = PyTuple_New(4);
  for (int i = 0; i < 4; ++i) {
    if (parts[i] == nullptr || tuple == nullptr) {
      for (PyObject* part : parts) Py_XDECREF(part);
      Py_XDECREF(tuple);
      return nullptr;
    }
  }
  for (int i = 0; i < 4; ++i) PyTuple_SET_ITEM(tuple, i, parts[i]);  // steals each reference
  return tuple;
}

// dispatch_layout(entry, topk_idx, num_experts) -> (num_tokens_per_rank, num_tokens_per_node,
// num_tokens_per_expert, is_token_in_rank), enqueued on torch's current stream of the entry's device;
// None where this path does not apply (qualifying_topk, or a num_experts the call would refuse).
PyObject* dispatch_layout(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 3) {
    PyErr_Format(PyExc_TypeError,
                 "dispatch_layout(entry, topk_idx, num_experts): expected 3 arguments, got %zd", nargs);
    return nullptr;
  }
  const auto* entry =
      static_cast<const SwitchyardLayoutEntry*>(PyCapsule_GetPointer(args[0], SWITCHYARD_LAYOUT_ENTRY_NAME));
  if (entry == nullptr) return nullptr;  // PyCapsule_GetPointer named the wrong object
  if (entry->version != SWITCHYARD_LAYOUT_ENTRY_VERSION) {
    PyErr_Format(PyExc_RuntimeError,
                 "switchyard._torch_ops: expected layout entry version %d, got %u (rebuild switchyard)",
                 SWITCHYARD_LAYOUT_ENTRY_VERSION, entry->version);
    return nullptr;
  }
  if (!PyLong_CheckExact(args[2])) Py_RETURN_NONE;
  const long long experts = PyLong_AsLongLong(args[2]);
  if (experts == -1 && PyErr_Occurred()) {
    PyErr_Clear();
    Py_RETURN_NONE;
  }
  if (experts < 1 || experts > entry->max_num_experts) Py_RETURN_NONE;
  try {
    const at::Tensor* topk = qualifying_topk(*entry, args[1]);
    if (topk == nullptr) Py_RETURN_NONE;
    const int64_t tokens = topk->size(0), ranks = entry->num_ranks, nodes = entry->num_nodes;
    const at::TensorOptions options = topk->options();
    at::Tensor counts = at::empty({ranks + nodes + experts}, options.dtype(at::kInt));
    at::Tensor is_token_in_rank = at::empty({tokens, ranks}, options.dtype(at::kBool));
    SwitchyardLayoutCall call;
    call.topk_idx = topk->data_ptr<int64_t>();
    call.num_tokens = tokens;
    call.topk = topk->size(1);
    call.num_experts = experts;
    call.stream = c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(entry->device)).stream();
    call.counts = counts.data_ptr<int32_t>();
    call.is_token_in_rank = reinterpret_cast<uint8_t*>(is_token_in_rank.data_ptr<bool>());
    if (entry->layout_into(entry->buffer, &call) != 0) return nullptr;  // its exception is set
    return wrap_all(counts, ranks, nodes, experts, is_token_in_rank);
  } catch (const std::exception& error) {
    PyErr_SetString(PyExc_RuntimeError, error.what());
    return nullptr;
  }
}

PyMethodDef methods[] = {
    {"dispatch_layout", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&dispatch_layout)),
     METH_FASTCALL,
     "dispatch_layout(entry, topk_idx, num_experts) -> (per rank, per node, per expert, is_token_in_rank) or "
     "None"},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef module = {PyModuleDef_HEAD_INIT,
                      "_torch_ops",
                      "switchyard's torch-native entry points (get_dispatch_layout). Use switchyard.deep_ep.",
                      -1,
                      methods,
                      nullptr,
                      nullptr,
                      nullptr,
                      nullptr};

}  // namespace

PyMODINIT_FUNC PyInit__torch_ops() {
  PyObject* m = PyModule_Create(&module);
  if (m == nullptr) return nullptr;
  // The torch this module was compiled against: switchyard.deep_ep uses the module only under it.
  if (PyModule_AddStringConstant(m, "TORCH_VERSION", SWITCHYARD_TORCH_VERSION) != 0 ||
      PyModule_AddIntConstant(m, "ENTRY_VERSION", SWITCHYARD_LAYOUT_ENTRY_VERSION) != 0) {
    Py_DECREF(m);
    return nullptr;
  }
  return m;
}
