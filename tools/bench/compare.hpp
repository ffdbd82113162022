#pragma once
// Compares one rank's outputs with the reference, bit for bit, and keeps the first difference.
#include <cstdint>
#include <string>
#include <vector>

#include "switchyard/buffer.hpp"
#include "switchyard/tensor.hpp"

namespace switchyard::bench {

// Outputs are compared in pipeline order; a difference in an earlier stage explains the later ones,
// on any rank, so the runner reports the earliest stage first.
enum class Stage { layout, dispatch, combine };
const char* stage_name(Stage stage);

struct Difference {
  Stage stage = Stage::layout;
  std::string what;  // "recv_x: row 3, ..."; empty when everything matched
  bool found() const { return !what.empty(); }
};

class Comparison {
 public:
  // Device tensors are copied to the host on `stream` (the rank's), after the work queued there.
  explicit Comparison(Stream stream = nullptr) : stream_(stream) {}
  void begin(Stage stage) { stage_ = stage; }
  // `actual` may live on any device; `expected` is a host tensor.
  void tensor(const std::string& name, const TensorView& actual, const TensorView& expected);
  void ints(const std::string& name, const std::vector<int>& actual, const std::vector<int>& expected);
  void integer(const std::string& name, int64_t actual, int64_t expected);
  // The result must be the preallocated output the caller passed (when it passed one).
  void in_place(const std::string& name, const TensorView& returned, const TensorView& preallocated);
  const Difference& result() const { return difference_; }

 private:
  void fail(const std::string& what);
  Stream stream_ = nullptr;
  Stage stage_ = Stage::layout;
  Difference difference_;
};

// A host view of a std::vector<int> as i32 [n].
TensorView i32_view(const std::vector<int>& values);

}  // namespace switchyard::bench
