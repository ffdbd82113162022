#pragma once
// A caller's input copied into the Buffer's heap-resident input before a call that reads it in place
// (docs/normal-in-place.md, "Staged inputs"): on a Buffer sized with normal_heap_input_tokens (or
// normal_heap_combine_rows) a dispatch's x and scales (a combine's expert outputs and weights) may be the
// Buffer's views, read where they are, or any other tensor of the call's shape, which the backend first
// copies into the view's bytes of its own heap, in stream order, before the call's first barrier. The
// receivers then read the copy as they read a view: one local copy per row instead of the rings' two extra
// passes. Safe for the same reason a caller's write into the view is: every call that reads a heap input
// in place ends with a barrier after its reads, so no peer still reads the previous call's.
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "common/scales_layout.hpp"
#include "switchyard/tensor.hpp"

namespace switchyard::detail {

// One copy to the heap's base + `heap_offset`: `bytes` from the caller's `from`, contiguous; or, with
// `scales.column_major`, DeepEP's column-major fp8 scales (the memory of [B, N] f32) written row-major [N, B]
// as the view holds them (the backend transposes).
struct StagedCopy {
  size_t heap_offset = 0;
  const void* from = nullptr;
  size_t bytes = 0;
  common::ScalesLayout scales{};
};

// The copies a call makes before it starts (at most a tensor and its scales or weights).
struct StagedHeapInput {
  std::array<StagedCopy, 2> copies{};
  int count = 0;

  bool empty() const { return count == 0; }
  const StagedCopy* begin() const { return copies.data(); }
  const StagedCopy* end() const { return copies.data() + count; }
};

// `given` (defined, of the call's shape) against its view, the `given.nbytes()` bytes at `heap_offset` of the
// heap at `heap_base`: the view itself takes nothing; a tensor apart from those bytes is added to `staged`;
// one that overlaps them without being the view is refused (InvalidArgument naming `name` and `view_name`:
// the copy would read what it overwrites).
void stage_unless_view(const TensorView& given, const char* name, const char* view_name,
                       const uint8_t* heap_base, size_t heap_offset, StagedHeapInput& staged);

// Column-major fp8 scales (`layout`: N tokens, B blocks, column_major) for the row-major view at
// `heap_offset`: always staged, transposed; refused where they overlap the view's bytes (the view itself
// included: it is row-major).
void stage_column_major_scales(const TensorView& given, const common::ScalesLayout& layout,
                               const uint8_t* heap_base, size_t heap_offset, StagedHeapInput& staged);

}  // namespace switchyard::detail
