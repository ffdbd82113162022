#pragma once
// switchyard._C: the nanobind bindings, one translation unit per concern. Each engine adds a
// bind_<engine>() that puts its methods on the Buffer class (normal.cpp; low_latency.cpp for
// low_latency and symmetric).
#include <nanobind/nanobind.h>

#include "switchyard/buffer.hpp"

namespace switchyard::python {

namespace nb = nanobind;

using BufferClass = nb::class_<Buffer>;

void bind_errors(nb::module_& m);
BufferClass bind_buffer(nb::module_& m);
void bind_normal(nb::module_& m, BufferClass& buffer);
// The expert-major engines: low_latency and symmetric (low_latency.cpp).
void bind_low_latency(nb::module_& m, BufferClass& buffer);

}  // namespace switchyard::python
