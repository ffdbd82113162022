#include "minimal_bound.hpp"

#include <algorithm>

namespace switchyard::bench {

MinimalBytes minimal_bytes(const Traffic& traffic) {
  MinimalBytes bytes;
  bytes.dispatch =
      traffic.routed_tokens * traffic.input_row_bytes + traffic.delivered_rows * traffic.dispatch_row_bytes;
  bytes.combine =
      traffic.delivered_rows * traffic.combine_row_bytes + traffic.source_tokens * traffic.combine_row_bytes;
  return bytes;
}

std::optional<double> minimal_seconds(int64_t memory_bytes, int64_t remote_bytes, const CopyBandwidth& copy) {
  if (!(copy.bytes_per_second > 0)) return std::nullopt;
  const double memory_seconds = static_cast<double>(memory_bytes) / copy.bytes_per_second;
  if (remote_bytes == 0) return memory_seconds;
  if (!copy.peer || !(copy.peer->all_pairs_bytes_per_second > 0)) return std::nullopt;
  return std::max(memory_seconds, static_cast<double>(remote_bytes) / copy.peer->all_pairs_bytes_per_second);
}

}  // namespace switchyard::bench
