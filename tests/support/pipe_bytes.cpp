#include "support/pipe_bytes.hpp"

#include <unistd.h>

namespace switchyard::testing {

bool write_all(int fd, const void* data, size_t bytes) {
  const auto* at = static_cast<const uint8_t*>(data);
  while (bytes > 0) {
    const ssize_t written = write(fd, at, bytes);
    if (written <= 0) return false;
    at += written;
    bytes -= static_cast<size_t>(written);
  }
  return true;
}

bool read_all(int fd, void* data, size_t bytes) {
  auto* at = static_cast<uint8_t*>(data);
  while (bytes > 0) {
    const ssize_t got = read(fd, at, bytes);
    if (got <= 0) return false;
    at += got;
    bytes -= static_cast<size_t>(got);
  }
  return true;
}

bool send_bytes(int fd, const Bytes& bytes) {
  const uint64_t size = bytes.size();
  return write_all(fd, &size, sizeof(size)) && write_all(fd, bytes.data(), bytes.size());
}

bool receive_bytes(int fd, Bytes* bytes, uint64_t max_bytes) {
  uint64_t size = 0;
  if (!read_all(fd, &size, sizeof(size)) || size > max_bytes) return false;
  bytes->resize(size);
  return read_all(fd, bytes->data(), size);
}

}  // namespace switchyard::testing
