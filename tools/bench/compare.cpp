#include "compare.hpp"

#include "transfer.hpp"
#include "workload/workload.hpp"

namespace switchyard::bench {

const char* stage_name(Stage stage) {
  switch (stage) {
    case Stage::layout:
      return "layout";
    case Stage::dispatch:
      return "dispatch";
    case Stage::combine:
      return "combine";
  }
  return "?";
}

TensorView i32_view(const std::vector<int>& values) {
  static_assert(sizeof(int) == 4, "i32 views of std::vector<int>");
  return TensorView(const_cast<int*>(values.data()), DType::i32, {static_cast<int64_t>(values.size())});
}

void Comparison::fail(const std::string& what) {
  if (difference_.found()) return;
  difference_.stage = stage_;
  difference_.what = what;
}

void Comparison::tensor(const std::string& name, const TensorView& actual, const TensorView& expected) {
  if (difference_.found() || (!actual.defined() && !expected.defined())) return;
  if (!actual.defined()) return fail(name + ": not returned; expected " + expected.describe());
  if (!expected.defined()) return fail(name + ": expected none, got " + actual.describe());
  std::string why;
  if (!workload::bitwise_equal(to_host(actual, stream_), expected, &why)) fail(name + ": " + why);
}

void Comparison::ints(const std::string& name, const std::vector<int>& actual,
                      const std::vector<int>& expected) {
  tensor(name, i32_view(actual), i32_view(expected));
}

void Comparison::integer(const std::string& name, int64_t actual, int64_t expected) {
  if (actual != expected)
    fail(name + ": expected " + std::to_string(expected) + ", got " + std::to_string(actual));
}

void Comparison::in_place(const std::string& name, const TensorView& returned,
                          const TensorView& preallocated) {
  if (!preallocated.defined() || returned.data == preallocated.data) return;
  fail(name + ": the result is not in the preallocated output passed for it");
}

}  // namespace switchyard::bench
