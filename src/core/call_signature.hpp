#pragma once
// A digest of what every rank's call must agree on (hidden size, dtype, expert count, ...). Each
// rank publishes its own next to the data it sends; a receiver that finds a peer's digest different
// from its own refuses the call with an InvalidArgument, instead of reading rows laid out for
// another shape or waiting for signals the peer never sends.
#include <cstdint>
#include <initializer_list>

namespace switchyard::detail {

constexpr uint64_t call_signature_step(uint64_t hash, int64_t value) {
  for (int i = 0; i < 8; ++i) {
    hash ^= static_cast<uint64_t>(value >> (8 * i)) & 0xffu;
    hash *= 1099511628211ull;  // FNV-1a
  }
  return hash;
}

template <typename... Values>
constexpr uint64_t call_signature(Values... values) {
  uint64_t hash = 14695981039346656037ull;
  for (int64_t value : {static_cast<int64_t>(values)...}) hash = call_signature_step(hash, value);
  return hash | 1;  // never 0, so a zeroed heap never matches
}

}  // namespace switchyard::detail
