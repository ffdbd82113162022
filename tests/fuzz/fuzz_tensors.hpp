#pragma once
// Tensor arguments drawn from a fuzzer's input. Most are what a valid call would pass, so that the
// calls get past the first check; the rest are wrong in one way: undefined, another dtype, another
// rank, a size off by a little or by a lot, on cuda, one element off the allocation's alignment, or
// a shape with no data behind it. Memory is only ever claimed where it exists: a view with data
// covers exactly its allocation (ASan sees one byte past it), and a shape larger than the input's
// budget comes with a null pointer, which the library must refuse before reading.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <vector>

#include "switchyard/tensor.hpp"

namespace switchyard::fuzz {

// NOTES: tensor memory of one input is capped so that an input runs in milliseconds, and far below
// libFuzzer's default 2 GiB malloc limit.
constexpr size_t kMaxTensorBytesPerInput = size_t{4} << 20;

// What the elements of an argument hold.
struct Fill {
  enum Kind { bits, expert_ids, weights } kind = bits;
  int num_experts = 0;  // expert_ids: mostly in [-1, num_experts), sometimes any int64
};

class TensorDraw {
 public:
  explicit TensorDraw(FuzzedDataProvider& input) : input_(input) {}
  TensorDraw(const TensorDraw&) = delete;
  TensorDraw& operator=(const TensorDraw&) = delete;

  // A size that is mostly `usual`, sometimes one off, 0, small, or any int64.
  int64_t size(int64_t usual);
  // An argument: mostly `dtype` of `dims` over fresh memory filled as `fill` says.
  TensorView argument(DType dtype, std::initializer_list<int64_t> dims, Fill fill = {});
  // An optional argument: undefined half the time, else as argument().
  TensorView optional(DType dtype, std::initializer_list<int64_t> dims, Fill fill = {});
  // A preallocated output: mostly undefined, else as argument() and filled with a poison that
  // unwritten() checks.
  TensorView output(DType dtype, std::initializer_list<int64_t> dims);
  // How many outputs were drawn so far; unwritten(mark) checks those drawn after it.
  size_t outputs_drawn() const { return poisoned_.size(); }
  // True when no output drawn since `mark` was written (what a call refused with InvalidArgument owes).
  bool unwritten(size_t mark) const;

 private:
  TensorView view_over_memory(DType dtype, int ndim, const std::array<int64_t, kMaxTensorDims>& shape,
                              Fill fill, bool poisoned);
  // `bytes`: the view's, counted here (numel() of a zero-element shape may overflow on the way to 0).
  void fill_elements(const TensorView& view, size_t bytes, Fill fill);

  // Exactly `bytes` (ASan's redzone starts right after them), aligned as a framework's allocator aligns.
  class Allocation {
   public:
    explicit Allocation(size_t bytes);
    ~Allocation();
    Allocation(const Allocation&) = delete;
    Allocation& operator=(const Allocation&) = delete;
    uint8_t* base() const { return base_; }

   private:
    uint8_t* base_;
  };
  struct Poisoned {
    const uint8_t* data;
    size_t bytes;
  };
  FuzzedDataProvider& input_;
  std::vector<std::unique_ptr<Allocation>> allocations_;
  std::vector<Poisoned> poisoned_;
  size_t bytes_left_ = kMaxTensorBytesPerInput;
};

}  // namespace switchyard::fuzz
