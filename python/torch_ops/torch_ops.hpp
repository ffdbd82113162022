#pragma once
// switchyard._torch_ops, shared by its functions (module.cpp): the entry they call into switchyard._C
// (layout_entry.h) and the checks that decide whether a call takes this path. A call that does not is
// answered None, and switchyard.deep_ep's general path takes it: that path converts what it can and names
// what is wrong, so these checks never raise.
#include <Python.h>
// clang-format off: torch's Python headers after Python.h
#include <ATen/core/Tensor.h>
#include <c10/cuda/CUDAStream.h>
// clang-format on

#include <cstdint>
#include <initializer_list>

#include "layout_entry.h"

namespace switchyard_torch_ops {

// The entry in `capsule`; nullptr with a Python exception set where it is not one, or of another version.
const SwitchyardLayoutEntry* entry_of(PyObject* capsule);

// `object` as a tensor this path takes: a torch tensor of `dtype`, 2-D and contiguous, on the entry's CUDA
// device; nullptr for anything else (other devices, dtypes, strides, NumPy, None).
const at::Tensor* qualifying(const SwitchyardLayoutEntry& entry, PyObject* object, at::ScalarType dtype);

// An optional tensor: true with *tensor = nullptr for None, true with the tensor where `qualifying` takes
// it, false otherwise.
bool optional_qualifying(const SwitchyardLayoutEntry& entry, PyObject* object, at::ScalarType dtype,
                         const at::Tensor** tensor);

// An exact Python int that fits int64_t; false (no exception set) for anything else.
bool int64_of(PyObject* object, int64_t& value);

// The tuning switchyard.deep_ep passes: None (the Buffer's, all 0) or (num_channels, ring_slots,
// chunk_tokens) as ints; false for anything else.
bool tuning_of(PyObject* object, SwitchyardCallTuning& tuning);

// torch's current stream of the entry's device: where the general path's calls run too. Never NULL (the
// Buffer's own stream in layout_entry.h): torch's default stream is passed as cudaStreamLegacy.
void* current_stream(const SwitchyardLayoutEntry& entry);

// A tuple of `parts`, whose references it steals; nullptr (with every part released) where a part is
// nullptr (its exception set) or the tuple cannot be made.
PyObject* tuple_of(std::initializer_list<PyObject*> parts);

// A new reference to `tensor` as a torch.Tensor, or to None where it is undefined.
PyObject* wrap_or_none(const at::Tensor& tensor);

// True where `nargs` is `expected`; else false with a TypeError naming `signature`.
bool expect_arguments(Py_ssize_t nargs, Py_ssize_t expected, const char* signature);

// The module's functions (METH_FASTCALL): each returns None where its call does not qualify.
// layout_op.cpp
PyObject* dispatch_layout(PyObject*, PyObject* const* args, Py_ssize_t nargs);
// normal_ops.cpp
PyObject* dispatch(PyObject*, PyObject* const* args, Py_ssize_t nargs);
PyObject* cached_dispatch(PyObject*, PyObject* const* args, Py_ssize_t nargs);
PyObject* combine(PyObject*, PyObject* const* args, Py_ssize_t nargs);

}  // namespace switchyard_torch_ops
