#include "core/carved_allocation.hpp"

#include <string>

#include "switchyard/errors.hpp"

namespace switchyard::detail {

size_t CarvedAllocation::reserve(DType dtype, int64_t elements) {
  if (elements < 0) {
    throw InvalidArgument("CarvedAllocation::reserve: elements: expected >= 0, got " +
                          std::to_string(elements));
  }
  const size_t offset = (bytes_ + kPartAlignment - 1) / kPartAlignment * kPartAlignment;
  size_t part = 0;
  if (__builtin_mul_overflow(static_cast<size_t>(elements), dtype_size(dtype), &part) ||
      __builtin_add_overflow(offset, part, &bytes_)) {
    throw InvalidArgument("CarvedAllocation::reserve: expected fewer than 2^64 bytes in all, got " +
                          std::to_string(elements) + " more elements of " + dtype_name(dtype));
  }
  return offset;
}

Tensor CarvedAllocation::allocate(Device device, int device_index, void* stream) const {
  // In whole parts' alignment (so at least one), as 8-byte words: every offset reserve() gave is a multiple
  // of any dtype's size.
  const size_t words = (bytes_ + kPartAlignment - 1) / kPartAlignment * kPartAlignment / sizeof(int64_t);
  return Tensor::empty(DType::i64,
                       {static_cast<int64_t>(words > 0 ? words : kPartAlignment / sizeof(int64_t))}, device,
                       device_index, stream);
}

}  // namespace switchyard::detail
