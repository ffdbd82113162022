// switchyard._torch_ops.dispatch_layout: get_dispatch_layout into tensors allocated here (module.cpp says
// why), as DeepEP's binding does.
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

PyObject* wrap_all(const at::Tensor& counts, int64_t ranks, int64_t nodes, int64_t experts,
                   const at::Tensor& is_token_in_rank) {
  return tuple_of(
      {THPVariable_Wrap(counts.narrow(0, 0, ranks)), THPVariable_Wrap(counts.narrow(0, ranks, nodes)),
       THPVariable_Wrap(counts.narrow(0, ranks + nodes, experts)), THPVariable_Wrap(is_token_in_rank)});
}

}  // namespace

// dispatch_layout(entry, topk_idx, num_experts) -> (num_tokens_per_rank, num_tokens_per_node,
// num_tokens_per_expert, is_token_in_rank), enqueued on torch's current stream of the entry's device;
// None where this path does not apply (topk_idx not int64 [N, K] as `qualifying` takes it, or a num_experts
// the call would refuse).
PyObject* dispatch_layout(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (!expect_arguments(nargs, 3, "dispatch_layout(entry, topk_idx, num_experts)")) return nullptr;
  const SwitchyardLayoutEntry* entry = entry_of(args[0]);
  if (entry == nullptr) return nullptr;
  int64_t experts = 0;
  if (!int64_of(args[2], experts) || experts < 1 || experts > entry->max_num_experts) Py_RETURN_NONE;
  try {
    const at::Tensor* topk = qualifying(*entry, args[1], at::kLong);
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
    call.stream = current_stream(*entry);
    call.counts = counts.data_ptr<int32_t>();
    call.is_token_in_rank = reinterpret_cast<uint8_t*>(is_token_in_rank.data_ptr<bool>());
    if (entry->layout_into(entry->buffer, &call) != 0) return nullptr;  // its exception is set
    return wrap_all(counts, ranks, nodes, experts, is_token_in_rank);
  } catch (const std::exception& error) {
    PyErr_SetString(PyExc_RuntimeError, error.what());
    return nullptr;
  }
}

}  // namespace switchyard_torch_ops
