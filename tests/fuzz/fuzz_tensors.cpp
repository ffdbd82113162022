#include "fuzz_tensors.hpp"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>
#include <new>

namespace switchyard::fuzz {

namespace {

// NOTES: 64 bytes, as a framework's allocator gives; one element off it is drawn separately.
constexpr std::align_val_t kAllocationAlignment{64};
constexpr uint8_t kPoison = 0xA5;

float special_weight(FuzzedDataProvider& input) {
  switch (input.ConsumeIntegralInRange<int>(0, 7)) {
    case 0:
      return std::numeric_limits<float>::quiet_NaN();
    case 1:
      return -std::numeric_limits<float>::infinity();
    case 2:
      return std::numeric_limits<float>::infinity();
    case 3:
      return -0.0f;
    case 4:
      return FLT_TRUE_MIN;
    case 5:
      return FLT_MAX;
    case 6:
      return -FLT_MAX;
    default: {
      const uint32_t bits = input.ConsumeIntegral<uint32_t>();
      float value;
      std::memcpy(&value, &bits, sizeof(value));
      return value;
    }
  }
}

}  // namespace

TensorDraw::Allocation::Allocation(size_t bytes)
    : base_(static_cast<uint8_t*>(::operator new[](bytes, kAllocationAlignment))) {}

TensorDraw::Allocation::~Allocation() {
  ::operator delete[](base_, kAllocationAlignment);
}

int64_t TensorDraw::size(int64_t usual) {
  const uint8_t choice = input_.ConsumeIntegral<uint8_t>();
  if (choice < 200) return usual;
  // Wrapping, since `usual` may itself have been drawn from the whole int64 range.
  if (choice < 215) return static_cast<int64_t>(static_cast<uint64_t>(usual) + 1);
  if (choice < 230) return static_cast<int64_t>(static_cast<uint64_t>(usual) - 1);
  if (choice < 238) return 0;
  if (choice < 250) return input_.ConsumeIntegralInRange<int64_t>(0, 64);
  return input_.ConsumeIntegral<int64_t>();
}

TensorView TensorDraw::argument(DType dtype, std::initializer_list<int64_t> dims, Fill fill) {
  const uint8_t mode = input_.ConsumeIntegral<uint8_t>();
  if (mode >= 252) return TensorView{};
  DType drawn = dtype;
  if (mode >= 244) drawn = static_cast<DType>(input_.ConsumeIntegralInRange<int>(0, 5));
  int ndim = static_cast<int>(dims.size());
  if (mode >= 238 && mode < 244) ndim = input_.ConsumeIntegralInRange<int>(0, kMaxTensorDims);
  std::array<int64_t, kMaxTensorDims> shape{};
  const int64_t* usual = dims.begin();
  for (int i = 0; i < ndim; ++i) shape[i] = size(i < static_cast<int>(dims.size()) ? usual[i] : 1);
  if (drawn != dtype) fill = Fill{};
  TensorView view = view_over_memory(drawn, ndim, shape, fill, false);
  if (mode >= 234 && mode < 238) view.device = Device::cuda;
  if (mode >= 230 && mode < 234) {
    // A rank the struct cannot hold, with no data: the library must refuse it before indexing shape.
    view.ndim = input_.ConsumeBool() ? kMaxTensorDims + 1 : input_.ConsumeIntegral<int>();
    view.data = nullptr;
  }
  return view;
}

TensorView TensorDraw::optional(DType dtype, std::initializer_list<int64_t> dims, Fill fill) {
  if (input_.ConsumeBool()) return TensorView{};
  return argument(dtype, dims, fill);
}

TensorView TensorDraw::output(DType dtype, std::initializer_list<int64_t> dims) {
  if (input_.ConsumeIntegral<uint8_t>() < 160) return TensorView{};
  const uint8_t mode = input_.ConsumeIntegral<uint8_t>();
  DType drawn = mode >= 240 ? static_cast<DType>(input_.ConsumeIntegralInRange<int>(0, 5)) : dtype;
  std::array<int64_t, kMaxTensorDims> shape{};
  const int ndim = static_cast<int>(dims.size());
  const int64_t* usual = dims.begin();
  for (int i = 0; i < ndim; ++i) shape[i] = size(usual[i]);
  return view_over_memory(drawn, ndim, shape, Fill{}, true);
}

bool TensorDraw::unwritten(size_t mark) const {
  for (size_t i = mark; i < poisoned_.size(); ++i) {
    for (size_t byte = 0; byte < poisoned_[i].bytes; ++byte) {
      if (poisoned_[i].data[byte] != kPoison) return false;
    }
  }
  return true;
}

TensorView TensorDraw::view_over_memory(DType dtype, int ndim,
                                        const std::array<int64_t, kMaxTensorDims>& shape, Fill fill,
                                        bool poisoned) {
  TensorView view;
  view.dtype = dtype;
  view.ndim = ndim;
  view.shape = shape;
  size_t elements = 1;
  bool fits = true;
  for (int i = 0; i < ndim && fits; ++i) {
    fits = shape[i] >= 0 && !__builtin_mul_overflow(elements, static_cast<size_t>(shape[i]), &elements);
  }
  size_t bytes = 0;
  fits = fits && !__builtin_mul_overflow(elements, dtype_size(dtype), &bytes) && bytes <= bytes_left_;
  if (!fits) return view;  // a shape with no memory behind it: data stays null
  bytes_left_ -= bytes;
  // Sometimes one element past the alignment, as a view into a larger allocation would be.
  const size_t offset = input_.ConsumeIntegral<uint8_t>() < 16 ? dtype_size(dtype) : 0;
  allocations_.push_back(std::make_unique<Allocation>(bytes + offset));
  view.data = allocations_.back()->base() + offset;
  if (poisoned) {
    std::memset(view.data, kPoison, bytes);
    poisoned_.push_back({static_cast<const uint8_t*>(view.data), bytes});
  } else {
    std::memset(view.data, 0, bytes);
    fill_elements(view, bytes, fill);
  }
  return view;
}

void TensorDraw::fill_elements(const TensorView& view, size_t bytes, Fill fill) {
  const size_t elements = bytes / dtype_size(view.dtype);
  if (fill.kind == Fill::expert_ids && view.dtype == DType::i64) {
    auto* ids = view.as<int64_t>();
    const int64_t choices = std::max<int64_t>(fill.num_experts, 0) + 1;  // -1 and each expert
    for (size_t i = 0; i < elements && input_.remaining_bytes() > 0; ++i) {
      const uint8_t choice = input_.ConsumeIntegral<uint8_t>();
      ids[i] = choice < 240 ? choice % choices - 1 : input_.ConsumeIntegral<int64_t>();
    }
  } else if (fill.kind == Fill::weights && view.dtype == DType::f32) {
    auto* weights = view.as<float>();
    for (size_t i = 0; i < elements && input_.remaining_bytes() > 0; ++i) {
      const uint8_t choice = input_.ConsumeIntegral<uint8_t>();
      weights[i] = choice < 224 ? static_cast<float>(choice) / 64.0f - 1.0f : special_weight(input_);
    }
  } else {
    const std::vector<uint8_t> bits = input_.ConsumeBytes<uint8_t>(bytes);
    if (!bits.empty()) std::memcpy(view.data, bits.data(), bits.size());
  }
}

}  // namespace switchyard::fuzz
