#pragma once
// The caller's allgather of DESIGN.md (Memory): every rank's Buffer::local_handle() bytes, through
// MPI_Allgather of the sizes and MPI_Allgatherv of the bytes, in rank order, for Buffer::connect.
#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "switchyard/buffer.hpp"

namespace switchyard::testing {

inline std::vector<Bytes> mpi_allgather(const Bytes& mine, MPI_Comm comm) {
  int size = 0;
  MPI_Comm_size(comm, &size);
  const int my_bytes = static_cast<int>(mine.size());
  std::vector<int> bytes(size), offsets(size);
  MPI_Allgather(&my_bytes, 1, MPI_INT, bytes.data(), 1, MPI_INT, comm);
  int total = 0;
  for (int rank = 0; rank < size; ++rank) {
    offsets[rank] = total;
    total += bytes[rank];
  }
  std::vector<uint8_t> all(static_cast<size_t>(std::max(total, 1)));
  MPI_Allgatherv(mine.data(), my_bytes, MPI_BYTE, all.data(), bytes.data(), offsets.data(), MPI_BYTE, comm);
  std::vector<Bytes> handles(size);
  for (int rank = 0; rank < size; ++rank) {
    handles[rank].assign(all.begin() + offsets[rank], all.begin() + offsets[rank] + bytes[rank]);
  }
  return handles;
}

}  // namespace switchyard::testing
