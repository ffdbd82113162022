#pragma once
// The bytes of Buffer::local_handle(): a fixed header that core checks in connect(), then the
// backend's own payload (a pointer and pid, a shared-memory name, a CUDA IPC handle).
#include <cstdint>
#include <vector>

#include "switchyard/buffer.hpp"

namespace switchyard::detail {

struct HandleHeader {
  char magic[8];  // "SWYDHDL\0"
  uint32_t version;
  uint32_t backend;
  int32_t rank;
  int32_t num_ranks;
  int32_t ranks_per_node;
  uint32_t sharing;
  uint64_t heap_bytes;
  uint64_t payload_bytes;
};

constexpr uint32_t kHandleVersion = 1;

Bytes pack_handle(const HandleHeader& header, const Bytes& payload);
// Throws InvalidArgument naming `which` (e.g. "all_handles[3]") when the bytes are not a handle.
HandleHeader unpack_handle_header(const Bytes& bytes, const std::string& which);
Bytes handle_payload(const Bytes& bytes);

}  // namespace switchyard::detail
