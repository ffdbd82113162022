#pragma once
// Tensors cross by DLPack without copies: inputs are views of the caller's memory, outputs are
// switchyard Tensors handed to the caller's framework (the Tensor lives as long as the array).
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <string>
#include <vector>

#include "switchyard/tensor.hpp"

namespace switchyard::python {

namespace nb = nanobind;

// How outputs go back to Python: the caller's framework, and whether bf16/fp8 keep their own DLPack
// dtypes (torch, jax, cupy) or travel as their bits (numpy has neither: uint16 and uint8).
struct OutputStyle {
  enum class Framework { numpy, pytorch, jax, cupy, dlpack } framework = Framework::numpy;
  bool native_low_precision = false;
};
// "numpy", "torch", "jax", "cupy" or "dlpack" (an array-API object with __dlpack__, for other frameworks).
OutputStyle parse_output_style(const std::string& framework);

// Where a Buffer's tensors must be. The library checks cpu against cuda; the CUDA device ordinal is
// checked here, before the library sees a pointer it would use on the wrong device.
struct Placement {
  bool cuda = false;
  int device = 0;  // the Buffer's CUDA device
};

// The arrays a call's views point into; they must outlive the call.
// DLPack imports, and the torch tensors read by their attributes (to_view), held for as long as the
// library may read them: the call, or until its hook has run, or (MoE weights) the layer's life.
struct KeepAlive {
  std::vector<nb::ndarray<nb::ro>> arrays;
  std::vector<nb::object> objects;
};

// A view of `object` (None gives an undefined view): any __dlpack__ object, a DLPack capsule, or a
// buffer-protocol object. Raises InvalidArgument naming `name` for an object that is not a tensor,
// an unsupported dtype or device, a CUDA tensor on another device than `placement`'s, more than 4
// dimensions, or strides that are not row-major contiguous.
TensorView to_view(nb::handle object, const char* name, KeepAlive& keep, const Placement& placement,
                   bool writable = false);

// The tensor in the caller's framework, sharing its storage; None when undefined. `also_keep`, when
// given, lives as long as the array (e.g. the Buffer whose heap a borrowed view points into).
nb::object to_python(const Tensor& tensor, const OutputStyle& style, nb::handle also_keep = nb::handle());

}  // namespace switchyard::python
