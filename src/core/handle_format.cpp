#include "core/handle_format.hpp"

#include <cstring>

#include "switchyard/errors.hpp"

namespace switchyard::detail {

namespace {
constexpr char kMagic[8] = {'S', 'W', 'Y', 'D', 'H', 'D', 'L', '\0'};
}

Bytes pack_handle(const HandleHeader& header_in, const Bytes& payload) {
  HandleHeader header = header_in;
  std::memcpy(header.magic, kMagic, sizeof(kMagic));
  header.version = kHandleVersion;
  header.payload_bytes = payload.size();
  Bytes bytes(sizeof(HandleHeader) + payload.size());
  std::memcpy(bytes.data(), &header, sizeof(header));
  if (!payload.empty()) std::memcpy(bytes.data() + sizeof(header), payload.data(), payload.size());
  return bytes;
}

HandleHeader unpack_handle_header(const Bytes& bytes, const std::string& which) {
  HandleHeader header{};
  if (bytes.size() < sizeof(HandleHeader)) {
    throw InvalidArgument(which + ": expected a switchyard handle of at least " +
                          std::to_string(sizeof(HandleHeader)) + " bytes, got " +
                          std::to_string(bytes.size()));
  }
  std::memcpy(&header, bytes.data(), sizeof(header));
  if (std::memcmp(header.magic, kMagic, sizeof(kMagic)) != 0) {
    throw InvalidArgument(which +
                          ": expected bytes from Buffer::local_handle(), got something else (bad magic)");
  }
  if (header.version != kHandleVersion) {
    throw InvalidArgument(which + ": expected handle version " + std::to_string(kHandleVersion) + ", got " +
                          std::to_string(header.version));
  }
  if (bytes.size() != sizeof(HandleHeader) + header.payload_bytes) {
    throw InvalidArgument(which + ": expected " +
                          std::to_string(sizeof(HandleHeader) + header.payload_bytes) + " bytes, got " +
                          std::to_string(bytes.size()) + " (truncated handle)");
  }
  return header;
}

Bytes handle_payload(const Bytes& bytes) {
  return Bytes(bytes.begin() + sizeof(HandleHeader), bytes.end());
}

}  // namespace switchyard::detail
