#pragma once
// The round trips of the process-per-rank tests (one process per rank, CUDA IPC handles): the fork
// test (process_ranks_main.cpp, handles through files) and the mpirun test
// (tests/mpi/cuda_engines_mpi_test.cpp, handles through MPI_Allgatherv) run the same problem, the
// same seeds and the same bitwise comparisons; only how ranks start and meet differs.
#include <cuda_runtime.h>

#include <string>
#include <vector>

#include "switchyard/buffer.hpp"
#include "workload/workload.hpp"

namespace switchyard::testing {

// normal, low_latency or symmetric; throws InvalidArgument naming `what` for anything else.
Engine parse_process_engine(const std::string& text, const std::string& what);

// R ranks on one node, 128 tokens per rank, hidden 2048, top-8 of 8 experts per rank, bf16.
workload::Shape process_ranks_shape(int num_ranks);

// The buffer sizing `engine` needs for `shape` (the expert-major engines size only their own part).
BufferSizing process_ranks_sizing(Engine engine, const workload::Shape& shape);

// This rank's round trips of `engine` on a connected buffer, ordered on `stream` (of the rank's
// device), each compared bit for bit with the reference; appends one line per mismatch.
//   normal:      two round trips on one buffer;
//   low_latency: two bf16 calls in flight (both halves of the double buffer), two fp8 calls, and one
//                call split by its hooks;
//   symmetric:   two bf16 calls in flight (both barrier phases) and two fp8 calls.
// Every rank must call it with the same arguments: the inputs come from shared seeds.
void run_process_round_trips(Buffer& buffer, Engine engine, const workload::Shape& shape, cudaStream_t stream,
                             std::vector<std::string>* failures);

}  // namespace switchyard::testing
