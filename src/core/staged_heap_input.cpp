#include "core/staged_heap_input.hpp"

#include "switchyard/errors.hpp"

namespace switchyard::detail {

void stage_unless_view(const TensorView& given, const char* name, const char* view_name,
                       const uint8_t* heap_base, size_t heap_offset, StagedHeapInput& staged) {
  const uint8_t* view = heap_base + heap_offset;
  const auto* from = static_cast<const uint8_t*>(given.data);
  const size_t bytes = given.nbytes();
  if (from == view || bytes == 0) return;
  if (from < view + bytes && view < from + bytes) {
    throw InvalidArgument(
        std::string(name) + ": expected " + view_name +
        " or a tensor apart from it (a tensor anywhere else is copied into it first), got " +
        given.describe() + " overlapping it");
  }
  // A call stages a tensor and its scales (or weights) at most: more is a bug of the caller here.
  if (staged.count == static_cast<int>(staged.copies.size())) {
    throw Error(std::string("internal: ") + name + " would be a third staged input of one call");
  }
  staged.copies[staged.count++] = StagedCopy{heap_offset, given.data, bytes};
}

}  // namespace switchyard::detail
