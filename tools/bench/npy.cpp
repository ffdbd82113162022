#include "npy.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <stdexcept>

namespace switchyard::bench {
namespace {

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "npy.cpp writes the host's bytes as little endian"
#endif

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicBytes = 6;
// NOTES: NumPy pads the header so that the data starts at a multiple of 64 bytes.
constexpr size_t kHeaderAlignment = 64;
constexpr size_t kPreambleBytes = kMagicBytes + 2 + 2;  // magic, version 1.0, uint16 header length

std::string shape_tuple(const TensorView& tensor) {
  std::string tuple = "(";
  for (int dim = 0; dim < tensor.ndim; ++dim) tuple += std::to_string(tensor.shape[dim]) + ", ";
  if (tensor.ndim > 1) tuple.resize(tuple.size() - 2);  // "(a, b)"; one dimension keeps "(a,)"
  if (tensor.ndim == 1) tuple.resize(tuple.size() - 1);
  return tuple + ")";
}

struct FileCloser {
  void operator()(std::FILE* file) const { std::fclose(file); }
};

}  // namespace

const char* npy_descr(DType dtype) {
  switch (dtype) {
    case DType::bf16:
      return "<u2";
    case DType::fp8_e4m3:
      return "|u1";
    case DType::f32:
      return "<f4";
    case DType::i32:
      return "<i4";
    case DType::i64:
      return "<i8";
    case DType::boolean:
      return "|b1";
  }
  return "|u1";
}

const char* numpy_dtype_name(DType dtype) {
  switch (dtype) {
    case DType::bf16:
      return "bfloat16";
    case DType::fp8_e4m3:
      return "float8_e4m3fn";
    case DType::f32:
      return "float32";
    case DType::i32:
      return "int32";
    case DType::i64:
      return "int64";
    case DType::boolean:
      return "bool";
  }
  return "uint8";
}

void write_npy(const std::string& path, const TensorView& tensor) {
  std::string header = std::string("{'descr': '") + npy_descr(tensor.dtype) +
                       "', 'fortran_order': False, 'shape': " + shape_tuple(tensor) + ", }";
  size_t unpadded = kPreambleBytes + header.size() + 1;  // + the closing newline
  header.append((kHeaderAlignment - unpadded % kHeaderAlignment) % kHeaderAlignment, ' ');
  header += '\n';
  if (header.size() > 0xffff) throw std::runtime_error(path + ": .npy header too long for format 1.0");

  std::unique_ptr<std::FILE, FileCloser> file(std::fopen(path.c_str(), "wb"));
  if (!file) throw std::runtime_error("cannot write " + path + ": " + std::strerror(errno));
  const uint8_t version[2] = {1, 0};
  const uint8_t header_length[2] = {static_cast<uint8_t>(header.size() & 0xff),
                                    static_cast<uint8_t>(header.size() >> 8)};
  size_t data_bytes = tensor.nbytes();
  bool ok = std::fwrite(kMagic, 1, kMagicBytes, file.get()) == kMagicBytes &&
            std::fwrite(version, 1, 2, file.get()) == 2 &&
            std::fwrite(header_length, 1, 2, file.get()) == 2 &&
            std::fwrite(header.data(), 1, header.size(), file.get()) == header.size() &&
            (data_bytes == 0 || std::fwrite(tensor.data, 1, data_bytes, file.get()) == data_bytes);
  if (!ok || std::fclose(file.release()) != 0) {
    throw std::runtime_error("cannot write " + path + ": " + std::strerror(errno));
  }
}

}  // namespace switchyard::bench
