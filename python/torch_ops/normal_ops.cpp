// switchyard._torch_ops.dispatch, .cached_dispatch and .combine: the normal engine's calls, into tensors
// allocated here (module.cpp says why), as DeepEP's binding does. A fresh dispatch's rows come from the call
// (its allocator, once the counts are known), a replayed handle's from the handle (the entry's handle_shape);
// switchyard's Buffer checks the rest as it checks every call.
#include <Python.h>
// clang-format off: torch's Python headers after Python.h
#include <ATen/ops/empty.h>
#include <torch/csrc/autograd/python_variable.h>
// clang-format on

#include <cstdint>
#include <exception>

#include "torch_ops.hpp"

namespace switchyard_torch_ops {

namespace {

// fp8 rows carry one f32 scale per this many channels (switchyard's and DeepEP's block).
constexpr int64_t kScaleBlock = 128;

// The fp8 scales this path takes: f32 [num_tokens, hidden / 128] on the entry's device, row-major, or
// column-major as DeepEP's users make them (`x_scales.T.contiguous().T`: strides (1, num_tokens), read in
// place through DispatchArgs::x_scales_column_major). nullptr for anything else (the general path's).
struct Scales {
  const at::Tensor* tensor = nullptr;
  bool column_major = false;
};

Scales qualifying_scales(const SwitchyardLayoutEntry& entry, PyObject* object, const at::Tensor& x) {
  if (x.size(1) % kScaleBlock != 0 || !THPVariable_Check(object)) return {};
  const at::Tensor& scales = THPVariable_Unpack(object);
  if (scales.dim() != 2 || scales.size(0) != x.size(0) || scales.size(1) != x.size(1) / kScaleBlock)
    return {};
  if (qualifying(entry, object, at::kFloat) != nullptr) return {&scales, false};
  // The transpose's checks are qualifying's: device, dtype, and contiguous in its own (row-major) order.
  const bool transposed_contiguous = scales.stride(0) == 1 && scales.stride(1) == scales.size(0);
  if (!entry.cuda || !scales.is_cuda() || scales.get_device() != entry.device ||
      scales.scalar_type() != at::kFloat || !transposed_contiguous) {
    return {};
  }
  return {&scales, true};
}

// The rows of a cached dispatch's outputs: the call's num_worst_tokens, else what the handle received; -1
// where the handle never learnt it (the general path names that).
int64_t cached_dispatch_rows(const SwitchyardHandleShape& shape, int64_t num_worst_tokens) {
  return num_worst_tokens > 0 ? num_worst_tokens : shape.num_recv_tokens;
}

// Biases this path takes: bf16 [num_tokens, hidden] of the handle's tokens, or None.
bool qualifying_bias(const at::Tensor* bias, int64_t num_tokens, int64_t hidden) {
  return bias == nullptr || (bias->size(0) == num_tokens && bias->size(1) == hidden);
}

}  // namespace

// cached_dispatch(entry, x, x_scales, handle, num_worst_tokens, tuning) -> recv_x for bf16 x,
// (recv_x, recv_x_scales) for fp8 x (float8_e4m3fn) with f32 scales (row- or column-major, as
// qualifying_scales takes them); None where the call does
// not qualify. handle: the dispatch's switchyard._C.DispatchHandle; tuning: as tuning_of takes it.
// Enqueued on torch's current stream of the entry's device.
PyObject* cached_dispatch(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (!expect_arguments(nargs, 6, "cached_dispatch(entry, x, x_scales, handle, num_worst_tokens, tuning)")) {
    return nullptr;
  }
  const SwitchyardLayoutEntry* entry = entry_of(args[0]);
  if (entry == nullptr) return nullptr;
  SwitchyardCachedDispatchCall call{};
  if (!int64_of(args[4], call.num_worst_tokens) || !tuning_of(args[5], call.tuning)) Py_RETURN_NONE;
  try {
    const bool fp8 = args[2] != Py_None;
    const at::Tensor* x = qualifying(*entry, args[1], fp8 ? at::kFloat8_e4m3fn : at::kBFloat16);
    if (x == nullptr) Py_RETURN_NONE;
    const Scales read = fp8 ? qualifying_scales(*entry, args[2], *x) : Scales{};
    const at::Tensor* scales = read.tensor;
    if (fp8 && scales == nullptr) Py_RETURN_NONE;
    SwitchyardHandleShape shape;
    if (entry->handle_shape(args[3], &shape) != 0) return nullptr;  // its exception is set
    const int64_t rows = cached_dispatch_rows(shape, call.num_worst_tokens);
    if (rows < 0) Py_RETURN_NONE;
    const int64_t hidden = x->size(1);
    at::Tensor recv_x = at::empty({rows, hidden}, x->options());
    at::Tensor recv_x_scales =
        fp8 ? at::empty({rows, hidden / kScaleBlock}, scales->options()) : at::Tensor();
    call.handle = args[3];
    call.x = x->const_data_ptr();
    call.x_dtype = fp8 ? SWITCHYARD_ENTRY_DTYPE_FP8_E4M3 : SWITCHYARD_ENTRY_DTYPE_BF16;
    call.x_scales_column_major = read.column_major ? 1 : 0;
    call.x_scales = fp8 ? scales->const_data_ptr<float>() : nullptr;
    call.num_tokens = x->size(0);
    call.hidden = hidden;
    call.stream = current_stream(*entry);
    call.recv_x = recv_x.mutable_data_ptr();
    call.recv_x_scales = fp8 ? recv_x_scales.mutable_data_ptr<float>() : nullptr;
    call.num_recv_rows = rows;
    if (entry->cached_dispatch_into(entry->buffer, &call) != 0) return nullptr;  // its exception is set
    if (!fp8) return THPVariable_Wrap(recv_x);
    return tuple_of({THPVariable_Wrap(recv_x), THPVariable_Wrap(recv_x_scales)});
  } catch (const std::exception& error) {
    PyErr_SetString(PyExc_RuntimeError, error.what());
    return nullptr;
  }
}

namespace {

// What dispatch's allocator makes (SwitchyardDispatchCall::allocate): the outputs, with x's, the scales' and
// topk's options (device, and dtype where it is theirs), allocated by torch's caching allocator on its
// current stream, the call's.
struct FreshOutputs {
  at::TensorOptions x_options, scales_options, idx_options, weights_options;
  int64_t hidden = 0, topk = 0;
  bool fp8 = false, weights = false;
  at::Tensor recv_x, recv_x_scales, recv_topk_idx, recv_topk_weights;
};

// Called by the entry without the GIL (torch's allocator needs none); never throws across the C boundary.
int allocate_fresh_outputs(void* context, int64_t rows, SwitchyardDispatchOutputs* outputs) {
  auto& made = *static_cast<FreshOutputs*>(context);
  try {
    made.recv_x = at::empty({rows, made.hidden}, made.x_options);
    outputs->recv_x = made.recv_x.mutable_data_ptr();
    if (made.fp8) {
      made.recv_x_scales = at::empty({rows, made.hidden / kScaleBlock}, made.scales_options);
      outputs->recv_x_scales = made.recv_x_scales.mutable_data_ptr<float>();
    }
    made.recv_topk_idx = at::empty({rows, made.topk}, made.idx_options);
    outputs->recv_topk_idx = made.recv_topk_idx.mutable_data_ptr<int64_t>();
    if (made.weights) {
      made.recv_topk_weights = at::empty({rows, made.topk}, made.weights_options);
      outputs->recv_topk_weights = made.recv_topk_weights.mutable_data_ptr<float>();
    }
    return 0;
  } catch (const std::exception&) {
    made.recv_x = made.recv_x_scales = made.recv_topk_idx = made.recv_topk_weights = at::Tensor();
    return -1;
  }
}

// A 1-D int32 tensor of `count` elements this path takes (as qualifying takes 2-D ones); nullptr otherwise.
const at::Tensor* qualifying_counts(const SwitchyardLayoutEntry& entry, PyObject* object, int64_t count) {
  if (!entry.cuda || !THPVariable_Check(object)) return nullptr;
  const at::Tensor& tensor = THPVariable_Unpack(object);
  if (!tensor.is_cuda() || tensor.get_device() != entry.device || tensor.scalar_type() != at::kInt ||
      tensor.dim() != 1 || tensor.size(0) != count || !tensor.is_contiguous()) {
    return nullptr;
  }
  return &tensor;
}

// The layout deep_ep passes: None, or (per rank, per node, per expert, is_token_in_rank) of this call's
// tokens; false where it is neither.
bool qualifying_layout(const SwitchyardLayoutEntry& entry, PyObject* object, int64_t tokens, int64_t experts,
                       SwitchyardDispatchCall& call) {
  if (object == Py_None) return true;
  if (!PyTuple_CheckExact(object) || PyTuple_GET_SIZE(object) != 4) return false;
  const at::Tensor* per_rank = qualifying_counts(entry, PyTuple_GET_ITEM(object, 0), entry.num_ranks);
  const at::Tensor* per_node = qualifying_counts(entry, PyTuple_GET_ITEM(object, 1), entry.num_nodes);
  const at::Tensor* per_expert = qualifying_counts(entry, PyTuple_GET_ITEM(object, 2), experts);
  const at::Tensor* in_rank = qualifying(entry, PyTuple_GET_ITEM(object, 3), at::kBool);
  if (per_rank == nullptr || per_node == nullptr || per_expert == nullptr || in_rank == nullptr ||
      in_rank->size(0) != tokens || in_rank->size(1) != entry.num_ranks) {
    return false;
  }
  call.num_tokens_per_rank = per_rank->const_data_ptr<int32_t>();
  call.num_tokens_per_node = per_node->const_data_ptr<int32_t>();
  call.num_tokens_per_expert = per_expert->const_data_ptr<int32_t>();
  call.is_token_in_rank = reinterpret_cast<const uint8_t*>(in_rank->const_data_ptr<bool>());
  return true;
}

}  // namespace

// dispatch(entry, x, x_scales, topk_idx, topk_weights, layout, num_experts, expert_alignment,
// num_worst_tokens, tuning) -> (recv_x, or (recv_x, recv_x_scales) for fp8 x, recv_topk_idx,
// recv_topk_weights or None, num_recv_tokens_per_expert (a list), handle (switchyard._C.DispatchHandle));
// None where the call does not qualify. A fresh dispatch (no handle) whose outputs torch allocates here once
// the call knows their rows, as DeepEP's binding does. x: bf16 [N, H], or float8_e4m3fn with f32 scales as
// qualifying_scales takes them; topk_idx: int64 [N, K]; topk_weights: f32 [N, K] or None; layout: None or the
// four tensors of get_dispatch_layout on topk_idx (counts 1-D int32). Enqueued on torch's current stream of
// the entry's device.
PyObject* dispatch(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (!expect_arguments(nargs, 10,
                        "dispatch(entry, x, x_scales, topk_idx, topk_weights, layout, num_experts, "
                        "expert_alignment, num_worst_tokens, tuning)")) {
    return nullptr;
  }
  const SwitchyardLayoutEntry* entry = entry_of(args[0]);
  if (entry == nullptr) return nullptr;
  SwitchyardDispatchCall call{};
  if (!int64_of(args[6], call.num_experts) || !int64_of(args[7], call.expert_alignment) ||
      !int64_of(args[8], call.num_worst_tokens) || !tuning_of(args[9], call.tuning)) {
    Py_RETURN_NONE;
  }
  if (call.num_experts < 1 || call.num_experts > entry->max_num_experts) Py_RETURN_NONE;
  try {
    const bool fp8 = args[2] != Py_None;
    const at::Tensor* x = qualifying(*entry, args[1], fp8 ? at::kFloat8_e4m3fn : at::kBFloat16);
    if (x == nullptr) Py_RETURN_NONE;
    const Scales read = fp8 ? qualifying_scales(*entry, args[2], *x) : Scales{};
    if (fp8 && read.tensor == nullptr) Py_RETURN_NONE;
    const at::Tensor* topk_idx = qualifying(*entry, args[3], at::kLong);
    const at::Tensor* weights = nullptr;
    if (topk_idx == nullptr || topk_idx->size(0) != x->size(0) || topk_idx->size(1) < 1 ||
        !optional_qualifying(*entry, args[4], at::kFloat, &weights) ||
        (weights != nullptr && (weights->size(0) != x->size(0) || weights->size(1) != topk_idx->size(1))) ||
        !qualifying_layout(*entry, args[5], x->size(0), call.num_experts, call)) {
      Py_RETURN_NONE;
    }
    FreshOutputs made;
    made.x_options = x->options();
    made.scales_options = fp8 ? read.tensor->options() : at::TensorOptions();
    made.idx_options = topk_idx->options();
    made.weights_options = weights != nullptr ? weights->options() : at::TensorOptions();
    made.hidden = x->size(1);
    made.topk = topk_idx->size(1);
    made.fp8 = fp8;
    made.weights = weights != nullptr;
    call.x = x->const_data_ptr();
    call.x_dtype = fp8 ? SWITCHYARD_ENTRY_DTYPE_FP8_E4M3 : SWITCHYARD_ENTRY_DTYPE_BF16;
    call.x_scales_column_major = read.column_major ? 1 : 0;
    call.x_scales = fp8 ? read.tensor->const_data_ptr<float>() : nullptr;
    call.num_tokens = x->size(0);
    call.hidden = x->size(1);
    call.topk_idx = topk_idx->const_data_ptr<int64_t>();
    call.topk_weights = weights != nullptr ? weights->const_data_ptr<float>() : nullptr;
    call.topk = topk_idx->size(1);
    call.stream = current_stream(*entry);
    call.allocate = &allocate_fresh_outputs;
    call.allocate_context = &made;
    if (entry->dispatch_into(entry->buffer, &call) != 0) return nullptr;  // its exception is set
    PyObject* recv_x = fp8 ? tuple_of({THPVariable_Wrap(made.recv_x), THPVariable_Wrap(made.recv_x_scales)})
                           : THPVariable_Wrap(made.recv_x);
    return tuple_of({recv_x, THPVariable_Wrap(made.recv_topk_idx), wrap_or_none(made.recv_topk_weights),
                     call.num_recv_tokens_per_expert, call.handle});
  } catch (const std::exception& error) {
    Py_XDECREF(call.handle);
    Py_XDECREF(call.num_recv_tokens_per_expert);
    PyErr_SetString(PyExc_RuntimeError, error.what());
    return nullptr;
  }
}

// combine(entry, x, handle, topk_weights, bias0, bias1, tuning) -> (combined_x, combined_topk_weights, or
// None without topk_weights); None where the call does not qualify. x: bf16 [M, H]; topk_weights: f32
// [M, K] or None; bias0, bias1: bf16 [N, H] or None (switchyard.deep_ep._unpack_bias made them).
// Enqueued on torch's current stream of the entry's device.
PyObject* combine(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (!expect_arguments(nargs, 7, "combine(entry, x, handle, topk_weights, bias0, bias1, tuning)")) {
    return nullptr;
  }
  const SwitchyardLayoutEntry* entry = entry_of(args[0]);
  if (entry == nullptr) return nullptr;
  SwitchyardCombineCall call{};
  if (!tuning_of(args[6], call.tuning)) Py_RETURN_NONE;
  try {
    const at::Tensor* x = qualifying(*entry, args[1], at::kBFloat16);
    const at::Tensor *weights = nullptr, *bias0 = nullptr, *bias1 = nullptr;
    if (x == nullptr || !optional_qualifying(*entry, args[3], at::kFloat, &weights) ||
        !optional_qualifying(*entry, args[4], at::kBFloat16, &bias0) ||
        !optional_qualifying(*entry, args[5], at::kBFloat16, &bias1)) {
      Py_RETURN_NONE;
    }
    const int64_t rows = x->size(0), hidden = x->size(1);
    if (weights != nullptr && (weights->size(0) != rows || weights->size(1) < 1)) Py_RETURN_NONE;
    SwitchyardHandleShape shape;
    if (entry->handle_shape(args[2], &shape) != 0) return nullptr;  // its exception is set
    const int64_t tokens = shape.num_tokens;
    if (!qualifying_bias(bias0, tokens, hidden) || !qualifying_bias(bias1, tokens, hidden)) Py_RETURN_NONE;
    at::Tensor combined_x = at::empty({tokens, hidden}, x->options());
    at::Tensor combined_topk_weights =
        weights != nullptr ? at::empty({tokens, weights->size(1)}, weights->options()) : at::Tensor();
    call.handle = args[2];
    call.x = static_cast<const uint16_t*>(x->const_data_ptr());
    call.num_rows = rows;
    call.hidden = hidden;
    call.topk_weights = weights != nullptr ? weights->const_data_ptr<float>() : nullptr;
    call.topk = weights != nullptr ? weights->size(1) : 0;
    call.bias0 = bias0 != nullptr ? static_cast<const uint16_t*>(bias0->const_data_ptr()) : nullptr;
    call.bias1 = bias1 != nullptr ? static_cast<const uint16_t*>(bias1->const_data_ptr()) : nullptr;
    call.has_bias0 = bias0 != nullptr;
    call.has_bias1 = bias1 != nullptr;
    call.num_tokens = tokens;
    call.stream = current_stream(*entry);
    call.combined_x = static_cast<uint16_t*>(combined_x.mutable_data_ptr());
    call.combined_topk_weights =
        weights != nullptr ? combined_topk_weights.mutable_data_ptr<float>() : nullptr;
    if (entry->combine_into(entry->buffer, &call) != 0) return nullptr;  // its exception is set
    return tuple_of({THPVariable_Wrap(combined_x), wrap_or_none(combined_topk_weights)});
  } catch (const std::exception& error) {
    PyErr_SetString(PyExc_RuntimeError, error.what());
    return nullptr;
  }
}

}  // namespace switchyard_torch_ops
