#pragma once
// NumPy .npy files, format version 1.0: little endian, C order. NumPy has no bf16 or fp8 e4m3, so
// they are stored as their raw bits ('<u2', '|u1') and the dump's meta.json names the real dtype.
#include <string>

#include "switchyard/tensor.hpp"

namespace switchyard::bench {

// The NumPy descr a dtype is stored as: bf16 '<u2', fp8_e4m3 '|u1', f32 '<f4', i32 '<i4',
// i64 '<i8', bool '|b1'.
const char* npy_descr(DType dtype);

// The real element type, as NumPy (or ml_dtypes) spells it: "bfloat16", "float8_e4m3fn", ...
const char* numpy_dtype_name(DType dtype);

// Writes a host tensor to `path`. Throws std::runtime_error naming the path when it cannot.
void write_npy(const std::string& path, const TensorView& tensor);

}  // namespace switchyard::bench
