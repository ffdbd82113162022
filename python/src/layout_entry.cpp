// The capsule behind switchyard._torch_ops (layout_entry.h): get_dispatch_layout into addresses that
// _torch_ops took from tensors it allocated with at::empty and checked itself (dtype, shape, device,
// contiguity), so that a torch caller pays for neither DLPack nor reading tensor attributes from Python.
// The capsule holds the Buffer's Python object: the entry's Buffer lives while anyone holds the capsule.
#include "layout_entry.h"

#include <cstdint>
#include <exception>
#include <string>

#include "bindings.hpp"
#include "core/plan_context.hpp"
#include "switchyard/errors.hpp"

namespace switchyard::python {

namespace {

struct OwnedEntry {
  SwitchyardLayoutEntry entry;
  PyObject* owner;  // a strong reference to the PyBuffer's Python object
};

int layout_into(void* buffer, const SwitchyardLayoutCall* call) {
  try {
    PyBuffer& self = *static_cast<PyBuffer*>(buffer);
    CallScope scope(self);
    const Placement& placement = self.placement();
    const Device device = placement.cuda ? Device::cuda : Device::cpu;
    const int index = placement.cuda ? placement.device : 0;
    if (call->num_experts < 1 || call->num_experts > INT32_MAX) {
      throw InvalidArgument("num_experts: expected a positive 32-bit count, got " +
                            std::to_string(call->num_experts));
    }
    const TensorView topk(const_cast<int64_t*>(call->topk_idx), DType::i64, {call->num_tokens, call->topk},
                          device, index);
    const TensorView is_token_in_rank(call->is_token_in_rank, DType::boolean,
                                      {call->num_tokens, self.topology().num_ranks}, device, index);
    const DispatchLayoutOutputs out =
        layout_outputs_in(call->counts, self.topology(), call->num_experts, is_token_in_rank, device, index);
    self.get_dispatch_layout(topk, static_cast<int>(call->num_experts), out,
                             static_cast<Stream>(call->stream));
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
        owned->owner = object.inc_ref().ptr();
        return nb::capsule(owned, SWITCHYARD_LAYOUT_ENTRY_NAME, &release);
      },
      "A capsule (layout_entry.h) through which switchyard._torch_ops runs get_dispatch_layout into "
      "tensors it allocates; it keeps this Buffer alive.");
}

}  // namespace switchyard::python
