#pragma once
// Bytes across a pipe between forked rank processes (the killed-rank tests, switchyard-soak's ranks
// as processes): whole writes and reads, and length-prefixed messages. Each returns false when the
// other end went away (or a message is longer than `max_bytes`), never blocks past that.
#include <cstddef>
#include <cstdint>

#include "switchyard/buffer.hpp"

namespace switchyard::testing {

bool write_all(int fd, const void* data, size_t bytes);
bool read_all(int fd, void* data, size_t bytes);
bool send_bytes(int fd, const Bytes& bytes);
bool receive_bytes(int fd, Bytes* bytes, uint64_t max_bytes);

}  // namespace switchyard::testing
