#pragma once
// Element types that cross the switchyard API.
#include <cstddef>
#include <cstdint>

namespace switchyard {

enum class DType : uint8_t { bf16, fp8_e4m3, f32, i32, i64, boolean };

constexpr size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::bf16:
      return 2;
    case DType::fp8_e4m3:
      return 1;
    case DType::f32:
      return 4;
    case DType::i32:
      return 4;
    case DType::i64:
      return 8;
    case DType::boolean:
      return 1;
  }
  return 0;
}

constexpr const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::bf16:
      return "bf16";
    case DType::fp8_e4m3:
      return "fp8_e4m3";
    case DType::f32:
      return "f32";
    case DType::i32:
      return "i32";
    case DType::i64:
      return "i64";
    case DType::boolean:
      return "bool";
  }
  return "?";
}

}  // namespace switchyard
