#pragma once
// How the process-per-rank test binaries' ranks meet without MPI: each rank writes a file per step
// into a scratch directory, atomically, and waits (bounded) for its peers' files.
#include <string>
#include <vector>

#include "switchyard/buffer.hpp"

namespace switchyard::testing {

// `dir`/`name`.`rank`
std::string rank_file(const std::string& dir, const std::string& name, int rank);
// Written to a temporary name, then renamed: a reader never sees half a file.
void write_rank_file(const std::string& path, const Bytes& bytes);
// The contents of `name` of every rank in `ranks`, in that order; TimeoutError naming the first
// rank whose file did not appear within `seconds`.
std::vector<Bytes> gather_rank_files(const std::string& dir, const std::string& name,
                                     const std::vector<int>& ranks, double seconds);
// Ranks 0 .. num_ranks - 1.
std::vector<Bytes> gather_rank_files(const std::string& dir, const std::string& name, int num_ranks,
                                     double seconds);

}  // namespace switchyard::testing
