#pragma once
// One test case run by every MPI rank, and its verdict: what each rank found, printed with the
// case's context, then reduced over all ranks so that every process agrees on pass or fail.
#include <mpi.h>

#include <cstdint>
#include <cstdio>
#include <exception>
#include <functional>
#include <string>
#include <vector>

namespace switchyard::testing {

// A seed as the failure messages print it (pass it back through SWITCHYARD_TEST_SEED).
inline std::string hex_seed(uint64_t seed) {
  char text[32];
  std::snprintf(text, sizeof(text), "0x%llx", static_cast<unsigned long long>(seed));
  return text;
}

// Runs `run` (this rank's mismatches) and prints them under `context`. An exception ends the whole
// job: peers may be waiting on this rank forever. Rank 0 prints one line per case. Returns true
// when every rank passed.
inline bool mpi_case_passed(const std::string& name, const std::string& context,
                            const std::function<std::vector<std::string>()>& run) {
  int rank = 0, num_ranks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &num_ranks);
  std::vector<std::string> failures;
  try {
    failures = run();
  } catch (const std::exception& error) {
    std::fprintf(stderr, "[rank %d] FAILED %s: exception: %s\n", rank, context.c_str(), error.what());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  for (const std::string& failure : failures) {
    std::fprintf(stderr, "[rank %d] FAILED %s: %s\n", rank, context.c_str(), failure.c_str());
  }
  int mine = failures.empty() ? 0 : 1, any = 0;
  MPI_Allreduce(&mine, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (rank == 0) std::printf("[%s] %s on %d ranks\n", any ? "FAILED" : "passed", name.c_str(), num_ranks);
  return any == 0;
}

}  // namespace switchyard::testing
