// switchyard._C._testing: lets the tests check the bindings' promises that Python alone cannot see:
// inputs are read where the caller's framework keeps them, outputs are the library's own memory, and
// a CUDA tensor on another device than the Buffer's is refused before the library sees it.
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "bindings.hpp"
#include "common/logfmt.hpp"
#include "switchyard/errors.hpp"
#if SWITCHYARD_WITH_CUDA
#include "cuda/timing/gpu_timer.hpp"
#endif

namespace switchyard::python {

namespace {

DType parse_dtype(const std::string& name) {
  for (DType dtype : {DType::bf16, DType::fp8_e4m3, DType::f32, DType::i32, DType::i64, DType::boolean}) {
    if (name == dtype_name(dtype)) return dtype;
  }
  throw InvalidArgument("dtype: expected bf16, fp8_e4m3, f32, i32, i64 or bool, got '" + name + "'");
}

nb::dict describe(const TensorView& view) {
  nb::dict out;
  out["data"] = reinterpret_cast<uintptr_t>(view.data);
  out["device"] = view.device == Device::cuda ? "cuda" : "cpu";
  out["device_index"] = view.device_index;
  out["dtype"] = dtype_name(view.dtype);
  out["shape"] = std::vector<int64_t>(view.shape.begin(), view.shape.begin() + view.ndim);
  return out;
}

}  // namespace

void bind_testing(nb::module_& m) {
  nb::module_ testing = m.def_submodule("_testing", "For switchyard's tests only.");
  testing.def(
      "logfmt_round_trip",
      [](nb::ndarray<const uint16_t, nb::ndim<1>, nb::c_contig, nb::device::cpu> row) {
        const int hidden = static_cast<int>(row.shape(0));
        if (hidden % common::kLogfmtBlock != 0) {
          throw InvalidArgument("row: expected a length that is a multiple of " +
                                std::to_string(common::kLogfmtBlock) + ", got " + std::to_string(hidden));
        }
        auto* values = new float[static_cast<size_t>(hidden)];
        nb::capsule owner(values, [](void* p) noexcept { delete[] static_cast<float*>(p); });
        common::logfmt_round_trip_row(row.data(), hidden, values);
        return nb::ndarray<nb::numpy, float, nb::ndim<1>>(values, {static_cast<size_t>(hidden)}, owner);
      },
      nb::arg("row"),
      "bf16 bits [H] -> f32 [H]: the row as the LogFMT-10 combine accumulates it (src/common/logfmt.hpp)");
  // The side by side's start on the GPU's clock (tools/peer/deepep_side_by_side.py, --start timer).
  testing.def(
      "gpu_timer_ns",
      []() -> uint64_t {
#if SWITCHYARD_WITH_CUDA
        return cuda::gpu_timer_now_ns();
#else
        throw Unsupported("gpu_timer_ns: this build has no CUDA backend");
#endif
      },
      "-> the current CUDA device's %globaltimer, ns (one clock for every process on that GPU)");
  testing.def(
      "wait_for_gpu_timer",
      [](uintptr_t stream, uint64_t until_ns, uint64_t limit_ns, uintptr_t marks) {
#if SWITCHYARD_WITH_CUDA
        cuda::enqueue_gpu_timer_wait(reinterpret_cast<cudaStream_t>(stream), until_ns, limit_ns,
                                     reinterpret_cast<uint64_t*>(marks));
#else
        (void)stream, (void)until_ns, (void)limit_ns, (void)marks;
        throw Unsupported("wait_for_gpu_timer: this build has no CUDA backend");
#endif
      },
      nb::arg("stream"), nb::arg("until_ns"), nb::arg("limit_ns"), nb::arg("marks") = 0,
      "Holds CUDA stream `stream` (its handle as an int) until the GPU's %globaltimer reaches `until_ns`, "
      "at most `limit_ns` after the wait starts. `marks`, when not 0: the address of two zeroed 64-bit words "
      "the "
      "device can write (a pinned host tensor's data_ptr), where the wait writes its first and its last "
      "reading "
      "of the clock as it lets the stream go (a nonzero second word: released)");
  testing.def(
      "mark_gpu_timer",
      [](uintptr_t stream, uintptr_t word) {
#if SWITCHYARD_WITH_CUDA
        if (word == 0)
          throw InvalidArgument("mark_gpu_timer: word: expected the address of a 64-bit word, got 0");
        cuda::enqueue_gpu_timer_mark(reinterpret_cast<cudaStream_t>(stream),
                                     reinterpret_cast<uint64_t*>(word));
#else
        (void)stream, (void)word;
        throw Unsupported("mark_gpu_timer: this build has no CUDA backend");
#endif
      },
      nb::arg("stream"), nb::arg("word"),
      "Writes the GPU's %globaltimer to the 64-bit word at `word` (device-writable: a pinned host tensor's "
      "data_ptr) when CUDA stream `stream` (its handle as an int) reaches it: the end of a phase timed from "
      "wait_for_gpu_timer's release");
  testing.def(
      "view_of",
      [](nb::handle tensor) {
        KeepAlive keep;
        return describe(to_view(tensor, "tensor", keep, Placement{}));
      },
      nb::arg("tensor"), "-> dict(data, device, device_index, dtype, shape): the view the library would get");
  testing.def(
      "empty",
      [](const std::string& framework, const std::string& dtype, const std::vector<int64_t>& shape, bool cuda,
         int device_index) {
        if (shape.empty() || shape.size() > static_cast<size_t>(kMaxTensorDims)) {
          throw InvalidArgument("shape: expected 1 to " + std::to_string(kMaxTensorDims) + " dimensions");
        }
        std::array<int64_t, kMaxTensorDims> dims{};
        std::copy(shape.begin(), shape.end(), dims.begin());
        const Tensor tensor =
            Tensor::empty_like_shape(parse_dtype(dtype), dims, static_cast<int>(shape.size()),
                                     cuda ? Device::cuda : Device::cpu, device_index);
        return nb::make_tuple(to_python(tensor, parse_output_style(framework)),
                              reinterpret_cast<uintptr_t>(tensor.data()));
      },
      nb::arg("framework"), nb::arg("dtype"), nb::arg("shape"), nb::arg("cuda") = false,
      nb::arg("device_index") = 0,
      "-> (tensor, data): a library-allocated Tensor handed to `framework`, and its address as the library "
      "has it");
  testing.def(
      "view_for_buffer",
      [](nb::handle tensor, const std::string& name, bool cuda, int device) {
        KeepAlive keep;
        return describe(to_view(tensor, name.c_str(), keep, Placement{cuda, device}));
      },
      nb::arg("tensor"), nb::arg("name"), nb::arg("cuda"), nb::arg("device"),
      "-> the view the library would get for argument `name` of a call on a Buffer placed on cuda:`device` "
      "(or "
      "the CPU), raising the call's InvalidArgument where the tensor is elsewhere");
  testing.def(
      "relabelled",
      [](nb::handle tensor, int device_index) {
        KeepAlive keep;
        const TensorView view = to_view(tensor, "tensor", keep, Placement{});
        size_t shape[kMaxTensorDims] = {};
        for (int dim = 0; dim < view.ndim; ++dim) shape[dim] = static_cast<size_t>(view.shape[dim]);
        // The same memory and dtype bits, claiming to be on CUDA device `device_index`; `tensor` stays alive.
        if (keep.arrays.empty())
          throw InvalidArgument("tensor: expected a DLPack export (a capsule or a numpy array)");
        const nb::dlpack::dtype dtype = keep.arrays.front().dtype();
        nb::ndarray<nb::array_api> relabelled(view.data, static_cast<size_t>(view.ndim), shape, tensor,
                                              nullptr, dtype, nb::device::cuda::value, device_index);
        return relabelled.cast(nb::rv_policy::reference);
      },
      nb::arg("tensor"), nb::arg("device_index"),
      "A __dlpack__ object viewing `tensor`'s memory but saying it is on cuda:`device_index` (never "
      "dereference it "
      "there unless it is)");
}

}  // namespace switchyard::python
