#include "core/staged_heap_input.hpp"

#include "switchyard/errors.hpp"

namespace switchyard::detail {

namespace {

bool overlaps(const TensorView& given, const uint8_t* view) {
  const auto* from = static_cast<const uint8_t*>(given.data);
  const size_t bytes = given.nbytes();
  return from < view + bytes && view < from + bytes;
}

void add(StagedHeapInput& staged, const StagedCopy& copy, const char* name) {
  // A call stages a tensor and its scales (or weights) at most: more is a bug here, not the caller's.
  if (staged.count == static_cast<int>(staged.copies.size())) {
    throw Error(std::string("internal: ") + name + " would be a third staged input of one call");
  }
  staged.copies[staged.count++] = copy;
}

}  // namespace

void stage_unless_view(const TensorView& given, const char* name, const char* view_name,
                       const uint8_t* heap_base, size_t heap_offset, StagedHeapInput& staged) {
  const uint8_t* view = heap_base + heap_offset;
  if (given.data == view || given.nbytes() == 0) return;
  if (overlaps(given, view)) {
    throw InvalidArgument(
        std::string(name) + ": expected " + view_name +
        " or a tensor apart from it (a tensor anywhere else is copied into it first), got " +
        given.describe() + " overlapping it");
  }
  add(staged, StagedCopy{heap_offset, given.data, given.nbytes(), {}}, name);
}

void stage_column_major_scales(const TensorView& given, const common::ScalesLayout& layout,
                               const uint8_t* heap_base, size_t heap_offset, StagedHeapInput& staged) {
  if (given.nbytes() == 0) return;
  if (overlaps(given, heap_base + heap_offset)) {
    throw InvalidArgument(
        "x_scales: expected column-major scales apart from Buffer::normal_input's x_scales view (it is "
        "row-major: column-major scales are transposed into it), got " +
        given.describe() + " overlapping it");
  }
  add(staged, StagedCopy{heap_offset, given.data, given.nbytes(), layout}, "x_scales");
}

}  // namespace switchyard::detail
