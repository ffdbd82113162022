#pragma once
// The nccl baseline's routing, as types shared by its host code and its kernels: what each rank
// sends where, and where each (token, destination rank) row sits in the send buffer.
#include <cstdint>

#include "common/host_device.hpp"

namespace switchyard::bench {

// What a rank tells each destination before the rows: the rows it sends there, then, per local
// expert of that destination, the (token, slot) pairs with that expert (DeepEP's per-expert count,
// summed by the destination into num_recv_tokens_per_expert). int32 [num_ranks, 1 + experts_per_rank];
// one row per destination on the sender, one per source on the receiver.
struct NcclCounts {
  int num_ranks = 0;
  int experts_per_rank = 0;

  SY_HD int stride() const { return 1 + experts_per_rank; }
  SY_HD int size() const { return num_ranks * stride(); }
  SY_HD int rows_index(int rank) const { return rank * stride(); }
  SY_HD int expert_index(int rank, int local_expert) const { return rank * stride() + 1 + local_expert; }
};

// Which rows go where: for token t and destination rank d, t's index among the tokens sent to d
// (tokens ascending), or -1 when t has no expert on d. int32 [num_tokens, num_ranks]. The send
// buffer holds destination 0's rows, then destination 1's, ...: row = offset(d) + slot(t, d). The
// combine's returned rows come back in the same places.
struct NcclRouteTable {
  int32_t* slots = nullptr;
  int64_t num_tokens = 0;
  int num_ranks = 0;

  SY_HD int32_t& slot(int64_t token, int rank) const { return slots[token * num_ranks + rank]; }
};

// The sender's rows per destination, as `counts` holds them, turned into the first row of each
// destination's segment: the rows of all lower destinations.
SY_HD int64_t segment_offset(const int32_t* counts, const NcclCounts& layout, int destination) {
  int64_t offset = 0;
  for (int rank = 0; rank < destination; ++rank) offset += counts[layout.rows_index(rank)];
  return offset;
}

}  // namespace switchyard::bench
