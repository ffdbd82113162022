#pragma once
// The round trips of the process-per-rank tests (one process per rank, CUDA IPC handles): the fork
// test (process_ranks_main.cpp, handles through files) and the mpirun test
// (tests/mpi/cuda_engines_mpi_test.cpp, handles through MPI_Allgatherv) run the same problem, the
// same seeds and the same bitwise comparisons; only how ranks start and meet differs.
#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <vector>

#include "switchyard/buffer.hpp"
#include "workload/workload.hpp"

namespace switchyard::testing {

// normal, low_latency or symmetric; throws InvalidArgument naming `what` for anything else.
Engine parse_process_engine(const std::string& text, const std::string& what);

// Refuses, naming `what` (the option that gave ranks_per_node), a topology the process tests cannot
// run: InvalidArgument unless 1 <= ranks_per_node <= num_ranks divides num_ranks; Unsupported for
// the symmetric engine across nodes (ranks_per_node < num_ranks), which the library refuses too: it
// pulls from and pushes into every peer's heap by address, so it needs one load/store domain.
void check_process_topology(Engine engine, int num_ranks, int ranks_per_node, const std::string& what);

// R ranks on R / ranks_per_node nodes (one node by default), 128 tokens per rank, hidden 2048, top-8
// of 8 experts per rank, bf16. Across nodes the normal engine is the hierarchical one and
// low_latency puts to other nodes, both through the loopback device transport over the IPC-mapped
// heaps.
workload::Shape process_ranks_shape(int num_ranks, int ranks_per_node);

// One buffer's worth of round trips. Across nodes a run makes two passes, the loopback transport's
// delays and reordering off, then on, as the thread suites run each case across nodes; each pass
// needs a buffer of its own, since a buffer reads the delays once, at its first call across nodes.
struct ProcessPass {
  bool loopback_delays = false;
  std::string name;  // for messages: "one node", "loopback delays off", "loopback delays 20 us"
};
std::vector<ProcessPass> process_passes(const workload::Shape& shape);

// The seed of a pass's loopback delays: the same in every process (the transport varies it per rank).
uint64_t process_loopback_seed(Engine engine);

// The buffer sizing `engine` needs for `shape` (the expert-major engines size only their own part);
// `heap_tensors` (symmetric only) adds the heap-resident input, expert outputs and receive area (the push's
// outputs, of `receive_dtype`: fp8_e4m3 or bf16) for every call.
BufferSizing process_ranks_sizing(Engine engine, const workload::Shape& shape, bool heap_tensors = false,
                                  DType receive_dtype = DType::fp8_e4m3);

// This rank's round trips of `engine` on a connected buffer, ordered on `stream` (of the rank's
// device), each compared bit for bit with the reference for the shape's topology (across nodes,
// normal's combine is the node-grouped reduction of DESIGN.md); appends one line per mismatch.
//   normal:      two round trips on one buffer (with `heap_tensors`, x and the expert outputs through the
//                heap-resident inputs, read in place; one node; process_ranks_sizing(..., true)); across
//                nodes of several ranks each, also a check that
//                the inputs tell the node-grouped combine from a one-node one (else a flat engine
//                would pass);
//   low_latency: two bf16 calls in flight (both halves of the double buffer), two fp8 calls, and one
//                call split by its hooks;
//   symmetric:   two bf16 calls in flight (both barrier phases) and two fp8 calls; with `heap_tensors`
//                each call's x and y go through the heap-resident tensors (Buffer::symmetric_input,
//                symmetric_expert_output; the buffer sized by process_ranks_sizing(..., true)), and the
//                calls of `receive_dtype` dispatch into the receive area (Buffer::symmetric_receive), which
//                every source pushes into across processes, one call at a time (each dispatch announcing
//                the push): the fp8 calls into an fp8 area; with a bf16 area, two bf16 calls into it alone.
// Every rank must call it with the same arguments: the inputs come from shared seeds.
void run_process_round_trips(Buffer& buffer, Engine engine, const workload::Shape& shape, cudaStream_t stream,
                             std::vector<std::string>* failures, bool heap_tensors = false,
                             DType receive_dtype = DType::fp8_e4m3);

}  // namespace switchyard::testing
