#include "tensors.hpp"

#include <cstdint>
#include <string>

#include "switchyard/errors.hpp"

namespace switchyard::python {

namespace {

namespace dl = nb::dlpack;

std::string describe_dtype(const dl::dtype& dtype) {
  const char* code = "code?";
  switch (static_cast<dl::dtype_code>(dtype.code)) {
    case dl::dtype_code::Int:
      code = "int";
      break;
    case dl::dtype_code::UInt:
      code = "uint";
      break;
    case dl::dtype_code::Float:
      code = "float";
      break;
    case dl::dtype_code::Bfloat:
      code = "bfloat";
      break;
    case dl::dtype_code::Complex:
      code = "complex";
      break;
    case dl::dtype_code::Bool:
      code = "bool";
      break;
    default:
      return "DLPack dtype code " + std::to_string(dtype.code) + " (" + std::to_string(dtype.bits) + " bits)";
  }
  return std::string(code) + std::to_string(dtype.bits);
}

// bf16 and fp8 arrive with their own DLPack codes (torch.bfloat16, torch.float8_e4m3fn) or as their
// bits (uint16, uint8: numpy has no such dtypes). uint8 is read as fp8 bits, never as bool.
bool to_dtype(const dl::dtype& dtype, DType& out) {
  if (dtype.lanes != 1) return false;
  const auto code = static_cast<dl::dtype_code>(dtype.code);
  const auto is = [&](dl::dtype_code c, int bits) { return code == c && dtype.bits == bits; };
  if (is(dl::dtype_code::Bfloat, 16) || is(dl::dtype_code::UInt, 16))
    out = DType::bf16;
  else if (is(dl::dtype_code::Float8_E4M3FN, 8) || is(dl::dtype_code::UInt, 8))
    out = DType::fp8_e4m3;
  else if (is(dl::dtype_code::Float, 32))
    out = DType::f32;
  else if (is(dl::dtype_code::Int, 32))
    out = DType::i32;
  else if (is(dl::dtype_code::Int, 64))
    out = DType::i64;
  else if (is(dl::dtype_code::Bool, 8))
    out = DType::boolean;
  else
    return false;
  return true;
}

dl::dtype to_dlpack(DType dtype, bool native_low_precision) {
  switch (dtype) {
    case DType::bf16:
      return native_low_precision ? dl::dtype{static_cast<uint8_t>(dl::dtype_code::Bfloat), 16, 1}
                                  : nb::dtype<uint16_t>();
    case DType::fp8_e4m3:
      return native_low_precision ? dl::dtype{static_cast<uint8_t>(dl::dtype_code::Float8_E4M3FN), 8, 1}
                                  : nb::dtype<uint8_t>();
    case DType::f32:
      return nb::dtype<float>();
    case DType::i32:
      return nb::dtype<int32_t>();
    case DType::i64:
      return nb::dtype<int64_t>();
    case DType::boolean:
      return nb::dtype<bool>();
  }
  return nb::dtype<uint8_t>();
}

template <typename Framework>
nb::object export_as(void* data, size_t ndim, const size_t* shape, nb::handle owner, dl::dtype dtype,
                     int device_type, int device_id) {
  nb::ndarray<Framework> array(data, ndim, shape, owner, nullptr, dtype, device_type, device_id);
  return array.cast(nb::rv_policy::reference);
}

}  // namespace

OutputStyle parse_output_style(const std::string& framework) {
  using F = OutputStyle::Framework;
  if (framework == "numpy") return {F::numpy, false};
  if (framework == "torch") return {F::pytorch, true};
  if (framework == "jax") return {F::jax, true};
  if (framework == "cupy") return {F::cupy, false};  // cupy has no bfloat16 (nor fp8) dtype
  if (framework == "dlpack") return {F::dlpack, true};
  throw InvalidArgument("framework: expected numpy, torch, jax, cupy or dlpack, got '" + framework + "'");
}

TensorView to_view(nb::handle object, const char* name, KeepAlive& keep, const Placement& placement,
                   bool writable) {
  TensorView view;
  if (object.is_none()) return view;
  nb::ndarray<nb::ro> array;
  if (!nb::try_cast(object, array, false)) {
    // NOTES: torch refuses to export a tensor that requires grad; say so rather than "not a tensor".
    const bool has_dlpack = nb::hasattr(object, "__dlpack__");
    throw InvalidArgument(
        std::string(name) + ": expected a tensor (an object with __dlpack__ or the buffer " +
        "protocol), got " + nb::inst_name(object).c_str() +
        (has_dlpack ? " whose __dlpack__ export failed (a torch tensor that requires grad needs "
                      ".detach())"
                    : ""));
  }
  if (writable && nb::hasattr(object, "flags") && nb::hasattr(object.attr("flags"), "writeable") &&
      !nb::cast<bool>(object.attr("flags").attr("writeable"))) {
    throw InvalidArgument(std::string(name) + ": expected a writable array (an output), got a read-only one");
  }
  if (!to_dtype(array.dtype(), view.dtype)) {
    throw InvalidArgument(std::string(name) +
                          ": expected dtype bf16 (bfloat16, or its bits as uint16), fp8_e4m3 " +
                          "(float8_e4m3fn, or its bits as uint8), float32, int32, int64 or bool, got " +
                          describe_dtype(array.dtype()));
  }
  if (array.ndim() > static_cast<size_t>(kMaxTensorDims)) {
    throw InvalidArgument(std::string(name) + ": expected at most " + std::to_string(kMaxTensorDims) +
                          " dimensions, got " + std::to_string(array.ndim()));
  }
  view.ndim = static_cast<int>(array.ndim());
  int64_t expected_stride = 1;
  bool empty = false;
  for (int dim = view.ndim - 1; dim >= 0; --dim) {
    view.shape[dim] = static_cast<int64_t>(array.shape(dim));
    if (view.shape[dim] == 0) empty = true;
  }
  for (int dim = view.ndim - 1; dim >= 0 && !empty; --dim) {
    if (view.shape[dim] != 1 && array.stride(dim) != expected_stride) {
      throw InvalidArgument(std::string(name) +
                            ": expected a row-major contiguous tensor, got strides that are " +
                            "not (call .contiguous() / numpy.ascontiguousarray first)");
    }
    expected_stride *= view.shape[dim];
  }
  switch (array.device_type()) {
    case nb::device::cpu::value:
      view.device = Device::cpu;
      break;
    case nb::device::cuda::value:
      view.device = Device::cuda;
      break;
    default:
      throw InvalidArgument(std::string(name) +
                            ": expected a tensor on the CPU or a CUDA device, got DLPack device " + "type " +
                            std::to_string(array.device_type()));
  }
  view.device_index = static_cast<int>(array.device_id());
  view.data = const_cast<void*>(array.data());
  if (placement.cuda && view.device == Device::cuda && view.device_index != placement.device) {
    throw InvalidArgument(std::string(name) +
                          ": expected a tensor on cuda:" + std::to_string(placement.device) +
                          " (the Buffer's device), got " + view.describe());
  }
  keep.push_back(std::move(array));
  return view;
}

namespace {
// An array's owner: a reference to the Tensor's storage, and optionally a Python object to keep.
struct Owned {
  Tensor tensor;
  PyObject* kept = nullptr;
  ~Owned() { Py_XDECREF(kept); }  // capsule destructors run with the GIL held
};
}  // namespace

nb::object to_python(const Tensor& tensor, const OutputStyle& style, nb::handle also_keep) {
  if (!tensor.defined()) return nb::none();
  const TensorView& view = tensor.view();
  size_t shape[kMaxTensorDims] = {};
  for (int dim = 0; dim < view.ndim; ++dim) shape[dim] = static_cast<size_t>(view.shape[dim]);
  // The array owns a copy of the Tensor: a reference to the same storage.
  auto* owned = new Owned{tensor, also_keep.ptr()};
  Py_XINCREF(owned->kept);
  nb::capsule owner(owned, [](void* pointer) noexcept { delete static_cast<Owned*>(pointer); });
  const dl::dtype dtype = to_dlpack(view.dtype, style.native_low_precision);
  const int device_type = view.device == Device::cuda ? nb::device::cuda::value : nb::device::cpu::value;
  const size_t ndim = static_cast<size_t>(view.ndim);
  using F = OutputStyle::Framework;
  if (style.framework == F::pytorch && view.dtype == DType::fp8_e4m3) {
    // NOTES: fp8 leaves as its bits and becomes float8_e4m3fn by a view, because torch builds
    // without fp8 in their DLPack import would refuse the DLPack fp8 code.
    nb::object bits = export_as<nb::pytorch>(view.data, ndim, shape, owner, nb::dtype<uint8_t>(), device_type,
                                             view.device_index);
    return bits.attr("view")(nb::module_::import_("torch").attr("float8_e4m3fn"));
  }
  switch (style.framework) {
    case F::numpy:
      return export_as<nb::numpy>(view.data, ndim, shape, owner, dtype, device_type, view.device_index);
    case F::pytorch:
      return export_as<nb::pytorch>(view.data, ndim, shape, owner, dtype, device_type, view.device_index);
    case F::jax:
      return export_as<nb::jax>(view.data, ndim, shape, owner, dtype, device_type, view.device_index);
    case F::cupy:
      return export_as<nb::cupy>(view.data, ndim, shape, owner, dtype, device_type, view.device_index);
    case F::dlpack:
      break;
  }
  return export_as<nb::array_api>(view.data, ndim, shape, owner, dtype, device_type, view.device_index);
}

}  // namespace switchyard::python
