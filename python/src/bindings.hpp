#pragma once
// switchyard._C: the nanobind bindings, one translation unit per concern. Each engine adds a
// bind_<engine>() that puts its methods on the Buffer class (normal.cpp today; low_latency and
// symmetric join the same way).
#include <nanobind/nanobind.h>

#include "switchyard/buffer.hpp"

namespace switchyard::python {

namespace nb = nanobind;

using BufferClass = nb::class_<Buffer>;

void bind_errors(nb::module_& m);
BufferClass bind_buffer(nb::module_& m);
void bind_normal(nb::module_& m, BufferClass& buffer);

}  // namespace switchyard::python
