#include "tensors.hpp"

#include <nanobind/stl/string.h>

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

// torch's dtypes that switchyard takes, looked up once torch is loaded (the order of `dtypes` below).
struct TorchDtypes {
  nb::object tensor_type;
  nb::object bfloat16, float8_e4m3fn, uint16, uint8, float32, int32, int64, boolean;
  // torch's import of a DLPack capsule (torch._C._from_dlpack, else torch.utils.dlpack.from_dlpack).
  nb::object from_dlpack_capsule;
};

// torch.Tensor and its dtypes, or nullptr while torch is not imported (nothing then can be a torch tensor).
const TorchDtypes* torch_dtypes() {
  static const TorchDtypes* loaded = nullptr;
  if (loaded) return loaded;
  nb::dict modules = nb::borrow<nb::dict>(PySys_GetObject("modules"));  // cheap: no import
  if (!modules.contains("torch")) return nullptr;
  nb::object torch = modules["torch"];
  auto* dtypes = new TorchDtypes();  // lives as long as the module: torch is never unloaded
  dtypes->tensor_type = torch.attr("Tensor");
  const auto maybe = [&](const char* name) {
    return nb::hasattr(torch, name) ? torch.attr(name) : nb::none();
  };
  dtypes->bfloat16 = torch.attr("bfloat16");
  dtypes->float8_e4m3fn = maybe("float8_e4m3fn");
  dtypes->uint16 = maybe("uint16");
  dtypes->uint8 = torch.attr("uint8");
  dtypes->float32 = torch.attr("float32");
  dtypes->int32 = torch.attr("int32");
  dtypes->int64 = torch.attr("int64");
  dtypes->boolean = torch.attr("bool");
  nb::object torch_c = torch.attr("_C");
  dtypes->from_dlpack_capsule = nb::hasattr(torch_c, "_from_dlpack")
                                    ? torch_c.attr("_from_dlpack")
                                    : nb::module_::import_("torch.utils.dlpack").attr("from_dlpack");
  loaded = dtypes;
  return loaded;
}

// A torch tensor of the memory, imported from a bare DLPack capsule. NOTES: nanobind's torch export hands
// torch an object with __dlpack__, for which torch.utils.dlpack.from_dlpack asks torch.cuda.current_stream
// for every CUDA tensor (a few us each, several outputs a call) only to pass it to a __dlpack__ that
// ignores it: nanobind tracks no producer stream. The outputs are ready in the call's stream order either
// way (the caller's current stream, or the stream it named), so the capsule, imported directly, gives the
// same tensor without the query.
nb::object export_torch(void* data, size_t ndim, const size_t* shape, nb::handle owner, dl::dtype dtype,
                        int device_type, int device_id) {
  const TorchDtypes* torch = torch_dtypes();
  if (torch == nullptr) {  // torch not imported: nanobind's export imports it
    return export_as<nb::pytorch>(data, ndim, shape, owner, dtype, device_type, device_id);
  }
  nb::ndarray<> array(data, ndim, shape, owner, nullptr, dtype, device_type, device_id);
  return torch->from_dlpack_capsule(array.cast(nb::rv_policy::reference));
}

// A torch tensor read by its attributes (data_ptr, shape, dtype, device), without DLPack: its export
// and import cost several times the rest of a call's host time at decode sizes (bench/NOTES.md, session
// 13). switchyard._tensors.exported passes torch CUDA tensors through as they are only when the call
// runs on torch's current stream, where DLPack's stream argument would order nothing. Returns false for
// anything that is not exactly a torch.Tensor (subclasses go by DLPack).
bool torch_view(nb::handle object, const char* name, TensorView& view) {
  const TorchDtypes* torch = torch_dtypes();
  if (!torch || !object.type().is(torch->tensor_type)) return false;
  nb::object dtype = object.attr("dtype");
  const std::pair<const nb::object*, DType> known[] = {
      {&torch->bfloat16, DType::bf16}, {&torch->float8_e4m3fn, DType::fp8_e4m3},
      {&torch->uint16, DType::bf16},   {&torch->uint8, DType::fp8_e4m3},
      {&torch->float32, DType::f32},   {&torch->int32, DType::i32},
      {&torch->int64, DType::i64},     {&torch->boolean, DType::boolean}};
  bool found = false;
  for (const auto& [candidate, type] : known) {
    if (!candidate->is_none() && dtype.is(*candidate)) {
      view.dtype = type;
      found = true;
      break;
    }
  }
  if (!found) {
    throw InvalidArgument(
        std::string(name) +
        ": expected dtype bf16 (bfloat16, or its bits as uint16), fp8_e4m3 (float8_e4m3fn, or "
        "its bits as uint8), float32, int32, int64 or bool, got torch." +
        nb::cast<std::string>(nb::str(dtype)).substr(6));
  }
  nb::object shape = object.attr("shape");
  const size_t ndim = nb::len(shape);
  if (ndim > static_cast<size_t>(kMaxTensorDims)) {
    throw InvalidArgument(std::string(name) + ": expected at most " + std::to_string(kMaxTensorDims) +
                          " dimensions, got " + std::to_string(ndim));
  }
  view.ndim = static_cast<int>(ndim);
  for (size_t dim = 0; dim < ndim; ++dim) view.shape[dim] = nb::cast<int64_t>(shape[dim]);
  if (!nb::cast<bool>(object.attr("is_contiguous")())) {
    throw InvalidArgument(std::string(name) +
                          ": expected a row-major contiguous tensor, got strides that are not (call "
                          ".contiguous() / numpy.ascontiguousarray first)");
  }
  nb::object device = object.attr("device");
  const std::string device_type = nb::cast<std::string>(device.attr("type"));
  if (device_type == "cuda") {
    view.device = Device::cuda;
    view.device_index = nb::cast<int>(device.attr("index"));
  } else if (device_type == "cpu") {
    view.device = Device::cpu;
    view.device_index = 0;
  } else {
    throw InvalidArgument(std::string(name) + ": expected a tensor on the CPU or a CUDA device, got one on " +
                          device_type);
  }
  view.data = reinterpret_cast<void*>(nb::cast<uintptr_t>(object.attr("data_ptr")()));
  return true;
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
  if (torch_view(object, name, view)) {
    if (placement.cuda && view.device == Device::cuda && view.device_index != placement.device) {
      throw InvalidArgument(std::string(name) +
                            ": expected a tensor on cuda:" + std::to_string(placement.device) +
                            " (the Buffer's device), got " + view.describe());
    }
    keep.objects.push_back(nb::borrow<nb::object>(object));
    return view;
  }
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
  keep.arrays.push_back(std::move(array));
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
    nb::object bits =
        export_torch(view.data, ndim, shape, owner, nb::dtype<uint8_t>(), device_type, view.device_index);
    return bits.attr("view")(nb::module_::import_("torch").attr("float8_e4m3fn"));
  }
  switch (style.framework) {
    case F::numpy:
      return export_as<nb::numpy>(view.data, ndim, shape, owner, dtype, device_type, view.device_index);
    case F::pytorch:
      return export_torch(view.data, ndim, shape, owner, dtype, device_type, view.device_index);
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
