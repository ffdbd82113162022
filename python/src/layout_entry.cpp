// The capsule behind switchyard._torch_ops (layout_entry.h): get_dispatch_layout, the dispatch (fresh, its
// outputs allocated by _torch_ops once the rows are known, and cached) and
// the combine into addresses that _torch_ops took from tensors it allocated with at::empty and checked
// itself (dtype, shape, device, contiguity), so that a torch caller pays for neither DLPack nor reading
// tensor attributes from Python. The Buffer checks every call as it checks the bindings' (normal.cpp).
// The capsule holds the Buffer's Python object: the entry's Buffer lives while anyone holds the capsule.
#include "layout_entry.h"

#include <nanobind/stl/vector.h>

#include <cstdint>
#include <exception>
#include <functional>
#include <string>

#include "bindings.hpp"
#include "common/normal_protocol.hpp"
#include "core/normal_handle.hpp"
#include "core/plan_context.hpp"
#include "switchyard/errors.hpp"

namespace switchyard::python {

namespace {

struct OwnedEntry {
  SwitchyardLayoutEntry entry;
  PyObject* owner;  // a strong reference to the PyBuffer's Python object
};

// Where the entry's tensors live: the Buffer's CUDA device, or the host.
struct EntryDevice {
  Device device;
  int index;
};

EntryDevice device_of(const PyBuffer& self) {
  const Placement& placement = self.placement();
  return placement.cuda ? EntryDevice{Device::cuda, placement.device} : EntryDevice{Device::cpu, 0};
}

TensorView view_of(const void* data, DType dtype, int64_t rows, int64_t cols, const EntryDevice& where) {
  return TensorView(const_cast<void*>(data), dtype, {rows, cols}, where.device, where.index);
}

CallTuning tuning_of(const SwitchyardCallTuning& tuning) {
  return CallTuning{tuning.num_channels, tuning.ring_slots, tuning.chunk_tokens};
}

// The handle a call replays: a borrowed switchyard._C.DispatchHandle, unpacked by nanobind (the GIL is held).
const DispatchHandle& handle_of(PyObject* object) {
  if (object == nullptr || !nb::isinstance<DispatchHandle>(nb::handle(object))) {
    throw InvalidArgument(
        std::string("handle: expected a switchyard._C.DispatchHandle (a dispatch's handle), got ") +
        (object == nullptr ? "NULL" : nb::inst_name(nb::handle(object)).c_str()));
  }
  return nb::cast<const DispatchHandle&>(nb::handle(object));
}

DType x_dtype_of(int32_t code) {
  if (code == SWITCHYARD_ENTRY_DTYPE_BF16) return DType::bf16;
  if (code == SWITCHYARD_ENTRY_DTYPE_FP8_E4M3) return DType::fp8_e4m3;
  throw InvalidArgument(
      "x_dtype: expected SWITCHYARD_ENTRY_DTYPE_BF16 or SWITCHYARD_ENTRY_DTYPE_FP8_E4M3, got " +
      std::to_string(code));
}

int layout_into(void* buffer, const SwitchyardLayoutCall* call) {
  try {
    PyBuffer& self = *static_cast<PyBuffer*>(buffer);
    CallScope scope(self);
    const EntryDevice where = device_of(self);
    if (call->num_experts < 1 || call->num_experts > INT32_MAX) {
      throw InvalidArgument("num_experts: expected a positive 32-bit count, got " +
                            std::to_string(call->num_experts));
    }
    const TensorView topk(const_cast<int64_t*>(call->topk_idx), DType::i64, {call->num_tokens, call->topk},
                          where.device, where.index);
    const TensorView is_token_in_rank(call->is_token_in_rank, DType::boolean,
                                      {call->num_tokens, self.topology().num_ranks}, where.device,
                                      where.index);
    const DispatchLayoutOutputs out = layout_outputs_in(call->counts, self.topology(), call->num_experts,
                                                        is_token_in_rank, where.device, where.index);
    self.last_stream = reinterpret_cast<uintptr_t>(call->stream);
    self.get_dispatch_layout(topk, static_cast<int>(call->num_experts), out,
                             static_cast<Stream>(call->stream));
    return 0;
  } catch (...) {
    raise_any_as_python(std::current_exception());
    return -1;
  }
}

int handle_shape(PyObject* object, SwitchyardHandleShape* shape) {
  try {
    const DispatchHandle& handle = handle_of(object);
    if (!handle.valid()) throw InvalidArgument("handle: expected a handle from dispatch, got an empty one");
    shape->num_tokens = handle.num_tokens();
    shape->num_recv_tokens = handle.num_recv_tokens();
    shape->num_worst_tokens = handle.data().num_worst_tokens;
    return 0;
  } catch (...) {
    raise_any_as_python(std::current_exception());
    return -1;
  }
}

// The fp8 scales as the call gives them: row-major [num_tokens, hidden / 128], or their row-major
// transpose (DispatchArgs::x_scales_column_major).
TensorView x_scales_of(const SwitchyardCachedDispatchCall& call, const EntryDevice& where) {
  const int64_t blocks = call.hidden / common::kScaleBlock;
  if (call.x_scales_column_major == 0)
    return view_of(call.x_scales, DType::f32, call.num_tokens, blocks, where);
  if (call.x_scales_column_major == 1)
    return view_of(call.x_scales, DType::f32, blocks, call.num_tokens, where);
  throw InvalidArgument("x_scales_column_major: expected 0 (row-major scales) or 1 (their transpose), got " +
                        std::to_string(call.x_scales_column_major));
}

int cached_dispatch_into(void* buffer, const SwitchyardCachedDispatchCall* call) {
  try {
    PyBuffer& self = *static_cast<PyBuffer*>(buffer);
    const DispatchHandle& handle = handle_of(call->handle);
    CallScope scope(self);
    const EntryDevice where = device_of(self);
    const DType dtype = x_dtype_of(call->x_dtype);
    const bool fp8 = dtype == DType::fp8_e4m3;
    DispatchArgs args;
    args.x = view_of(call->x, dtype, call->num_tokens, call->hidden, where);
    if (fp8) {
      args.x_scales = x_scales_of(*call, where);
      args.x_scales_column_major = call->x_scales_column_major == 1;
    }
    args.cached_handle = &handle;
    args.num_worst_tokens = call->num_worst_tokens;
    args.tuning = tuning_of(call->tuning);
    args.out_recv_x = view_of(call->recv_x, dtype, call->num_recv_rows, call->hidden, where);
    if (fp8)
      args.out_recv_x_scales = view_of(call->recv_x_scales, DType::f32, call->num_recv_rows,
                                       call->hidden / common::kScaleBlock, where);
    args.stream = static_cast<Stream>(call->stream);
    self.last_stream = reinterpret_cast<uintptr_t>(call->stream);
    nb::gil_scoped_release release;  // as the binding: ranks as threads of this process run meanwhile
    self.dispatch(args);
    return 0;
  } catch (...) {
    raise_any_as_python(std::current_exception());
    return -1;
  }
}

// The caller's allocator (SwitchyardDispatchCall::allocate) as DispatchArgs::allocate_outputs takes it: the
// addresses it fills, as views of the call's shapes (the Buffer checks them as it checks out_recv_*).
std::function<DispatchOutputs(int64_t)> allocator_of(const SwitchyardDispatchCall& call, DType dtype,
                                                     bool fp8, const EntryDevice& where) {
  return [&call, dtype, fp8, where](int64_t rows) {
    SwitchyardDispatchOutputs made{};
    if (call.allocate(call.allocate_context, rows, &made) != 0) {
      throw Error("allocate: the caller's allocator could not make the outputs for " + std::to_string(rows) +
                  " rows");
    }
    DispatchOutputs outputs;
    outputs.recv_x = view_of(made.recv_x, dtype, rows, call.hidden, where);
    if (fp8) {
      outputs.recv_x_scales =
          view_of(made.recv_x_scales, DType::f32, rows, call.hidden / common::kScaleBlock, where);
    }
    outputs.recv_topk_idx = view_of(made.recv_topk_idx, DType::i64, rows, call.topk, where);
    if (call.topk_weights != nullptr) {
      outputs.recv_topk_weights = view_of(made.recv_topk_weights, DType::f32, rows, call.topk, where);
    }
    return outputs;
  };
}

int dispatch_into(void* buffer, SwitchyardDispatchCall* call) {
  try {
    PyBuffer& self = *static_cast<PyBuffer*>(buffer);
    CallScope scope(self);
    const EntryDevice where = device_of(self);
    const DType dtype = x_dtype_of(call->x_dtype);
    const bool fp8 = dtype == DType::fp8_e4m3;
    if (call->allocate == nullptr)
      throw InvalidArgument("allocate: expected the caller's allocator, got NULL");
    if (call->num_experts < 1 || call->num_experts > INT32_MAX || call->expert_alignment < 1 ||
        call->expert_alignment > INT32_MAX) {
      throw InvalidArgument("num_experts, expert_alignment: expected positive 32-bit counts, got " +
                            std::to_string(call->num_experts) + ", " +
                            std::to_string(call->expert_alignment));
    }
    DispatchArgs args;
    args.x = view_of(call->x, dtype, call->num_tokens, call->hidden, where);
    if (fp8) {
      SwitchyardCachedDispatchCall scales{};
      scales.x_scales = call->x_scales;
      scales.x_scales_column_major = call->x_scales_column_major;
      scales.num_tokens = call->num_tokens;
      scales.hidden = call->hidden;
      args.x_scales = x_scales_of(scales, where);
      args.x_scales_column_major = call->x_scales_column_major == 1;
    }
    args.topk_idx = view_of(call->topk_idx, DType::i64, call->num_tokens, call->topk, where);
    if (call->topk_weights != nullptr) {
      args.topk_weights = view_of(call->topk_weights, DType::f32, call->num_tokens, call->topk, where);
    }
    args.num_experts = static_cast<int>(call->num_experts);
    args.expert_alignment = static_cast<int>(call->expert_alignment);
    const Topology& topology = self.topology();
    DispatchLayout layout;
    if (call->is_token_in_rank != nullptr) {
      const auto counts = [&](const int32_t* data, int64_t count) {
        return Tensor::borrow(
            TensorView(const_cast<int32_t*>(data), DType::i32, {count}, where.device, where.index));
      };
      layout.num_tokens_per_rank = counts(call->num_tokens_per_rank, topology.num_ranks);
      layout.num_tokens_per_node = counts(call->num_tokens_per_node, topology.num_nodes());
      layout.num_tokens_per_expert = counts(call->num_tokens_per_expert, call->num_experts);
      layout.is_token_in_rank = Tensor::borrow(
          view_of(call->is_token_in_rank, DType::boolean, call->num_tokens, topology.num_ranks, where));
      args.layout = &layout;
    }
    args.num_worst_tokens = call->num_worst_tokens;
    args.tuning = tuning_of(call->tuning);
    args.allocate_outputs = allocator_of(*call, dtype, fp8, where);
    args.stream = static_cast<Stream>(call->stream);
    self.last_stream = reinterpret_cast<uintptr_t>(call->stream);
    DispatchResult result;
    {
      nb::gil_scoped_release release;  // as the binding: ranks as threads of this process run meanwhile
      result = self.dispatch(args);
    }
    nb::object counts = nb::cast(result.num_recv_tokens_per_expert);
    call->handle = nb::cast(std::move(result.handle)).release().ptr();
    call->num_recv_tokens_per_expert = counts.release().ptr();
    return 0;
  } catch (...) {
    raise_any_as_python(std::current_exception());
    return -1;
  }
}

int combine_into(void* buffer, const SwitchyardCombineCall* call) {
  try {
    PyBuffer& self = *static_cast<PyBuffer*>(buffer);
    const DispatchHandle& handle = handle_of(call->handle);
    CallScope scope(self);
    const EntryDevice where = device_of(self);
    CombineArgs args;
    args.x = view_of(call->x, DType::bf16, call->num_rows, call->hidden, where);
    args.handle = &handle;
    args.tuning = tuning_of(call->tuning);
    if (call->has_bias0)
      args.bias0 = view_of(call->bias0, DType::bf16, call->num_tokens, call->hidden, where);
    if (call->has_bias1)
      args.bias1 = view_of(call->bias1, DType::bf16, call->num_tokens, call->hidden, where);
    args.out_combined_x = view_of(call->combined_x, DType::bf16, call->num_tokens, call->hidden, where);
    if (call->topk > 0) {
      args.topk_weights = view_of(call->topk_weights, DType::f32, call->num_rows, call->topk, where);
      args.out_combined_topk_weights =
          view_of(call->combined_topk_weights, DType::f32, call->num_tokens, call->topk, where);
    }
    args.stream = static_cast<Stream>(call->stream);
    self.last_stream = reinterpret_cast<uintptr_t>(call->stream);
    nb::gil_scoped_release release;  // as the binding: ranks as threads of this process run meanwhile
    self.combine(args);
    return 0;
  } catch (...) {
    raise_any_as_python(std::current_exception());
    return -1;
  }
}

void release(void* pointer) noexcept {
  auto* owned = static_cast<OwnedEntry*>(pointer);
  Py_XDECREF(owned->owner);
  delete owned;
}

}  // namespace

void bind_layout_entry(BufferClass& buffer) {
  buffer.def(
      "layout_entry",
      [](nb::handle object) {
        PyBuffer& self = nb::cast<PyBuffer&>(object);
        auto* owned = new OwnedEntry{};
        owned->entry.version = SWITCHYARD_LAYOUT_ENTRY_VERSION;
        owned->entry.cuda = self.is_cuda() ? 1 : 0;
        owned->entry.device = self.placement().device;
        owned->entry.num_ranks = self.topology().num_ranks;
        owned->entry.num_nodes = self.topology().num_nodes();
        owned->entry.max_num_experts = detail::kMaxExperts;
        owned->entry.buffer = &self;
        owned->entry.layout_into = &layout_into;
        owned->entry.handle_shape = &handle_shape;
        owned->entry.cached_dispatch_into = &cached_dispatch_into;
        owned->entry.combine_into = &combine_into;
        owned->entry.dispatch_into = &dispatch_into;
        owned->owner = object.inc_ref().ptr();
        return nb::capsule(owned, SWITCHYARD_LAYOUT_ENTRY_NAME, &release);
      },
      "A capsule (layout_entry.h) through which switchyard._torch_ops runs get_dispatch_layout, the dispatch "
      "(fresh and cached) and the combine into tensors it allocates; it keeps this Buffer alive.");
}

}  // namespace switchyard::python
