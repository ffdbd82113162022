#pragma once
// switchyard._C: the nanobind bindings, one translation unit per concern. Each engine adds a
// bind_<engine>() that puts its methods on the Buffer class (normal.cpp; low_latency.cpp for
// low_latency and symmetric).
#include <nanobind/nanobind.h>

#include <exception>

#include "caller_device.hpp"
#include "switchyard/buffer.hpp"
#include "tensors.hpp"

namespace switchyard::python {

namespace nb = nanobind;

// The Buffer Python holds: the library's Buffer, plus where its tensors must be (checked before
// each call), with the caller's current CUDA device put back after its constructor and destructor.
// NOTES: CallerDevice is the first base, so it is built before the Buffer and destroyed after it.
class PyBuffer : private CallerDevice, public Buffer {
 public:
  explicit PyBuffer(const BufferOptions& options);
  ~PyBuffer();
  const Placement& placement() const { return placement_; }
  bool is_cuda() const { return placement_.cuda; }
  // The stream of the last call, made through the package or through switchyard._torch_ops's entry
  // (layout_entry.cpp): what synchronize() without a stream waits for. Kept here so both ways agree.
  uintptr_t last_stream = 0;

 private:
  Placement placement_;
};

using BufferClass = nb::class_<PyBuffer>;

// Around every call into a Buffer: the caller's current CUDA device is kept.
class CallScope : public CallerDevice {
 public:
  explicit CallScope(const PyBuffer& buffer) : CallerDevice(buffer.is_cuda()) {}
};

void bind_errors(nb::module_& m);
// Sets the Python exception of a switchyard error (its class from switchyard/_errors.py, its message);
// rethrows any other exception (nanobind's own translators take those).
void raise_as_python(const std::exception_ptr& thrown);
// As raise_as_python, and anything else becomes MemoryError or RuntimeError: for C entry points, from
// which no C++ exception may escape (layout_entry.h).
void raise_any_as_python(const std::exception_ptr& thrown) noexcept;
// get_dispatch_layout's outputs in one i32 buffer of num_ranks + num_nodes + num_experts counts, back to
// back (per rank, per node, per expert), beside is_token_in_rank: the format of get_dispatch_layout_into
// (normal.cpp) and of switchyard._torch_ops's entry (layout_entry.cpp).
DispatchLayoutOutputs layout_outputs_in(int32_t* counts, const Topology& topology, int64_t num_experts,
                                        const TensorView& is_token_in_rank, Device device, int device_index);
// The capsule of switchyard._torch_ops's get_dispatch_layout (layout_entry.h, layout_entry.cpp).
void bind_layout_entry(BufferClass& buffer);
BufferClass bind_buffer(nb::module_& m);
void bind_normal(nb::module_& m, BufferClass& buffer);
// The expert-major engines: low_latency and symmetric (low_latency.cpp).
void bind_low_latency(nb::module_& m, BufferClass& buffer);
// switchyard._C._testing: what the tests need to see through the bindings (testing.cpp).
void bind_testing(nb::module_& m);
// The MoE layer (moe.cpp), after bind_testing: it adds the reference layer to _testing.
void bind_moe(nb::module_& m);

}  // namespace switchyard::python
