// The CUDA engines with one process per rank (HeapSharing::processes: CUDA IPC handles), as they are
// deployed: `--ranks R [--ranks-per-node P] [--engine normal|low_latency|symmetric] [--heap-tensors on]`
// (default: one node, normal; --heap-tensors on, symmetric: every call's x and y through the heap-resident
// tensors, with the pull combine forced, which across processes reads only those, and the fp8 calls' outputs
// in the heap receive area (Buffer::symmetric_receive), which every source pushes into; then again on a
// buffer whose receive area takes bf16 rows, with bf16 calls pushed into it; normal, one node: x and the
// expert outputs through its heap-resident inputs, read in place, docs/normal-in-place.md). With P < R the
// ranks form R / P nodes: normal is the hierarchical engine and low_latency puts to other nodes, both over
// the loopback device transport on the IPC-mapped heaps, once with its delays and reordering off and once on;
// symmetric is refused (one load/store domain only). The round trips are cuda/process_round_trips.hpp, shared
// with the mpirun test (tests/mpi/cuda_engines_mpi_test.cpp). On one GPU this wants MPS (scripts/gpu-check.sh
// starts it); the symmetric engine needs it, since its kernels keep every block resident and barrier across
// ranks. The parent never touches CUDA (a CUDA context does not survive fork); it execs R children of this
// binary, which exchange their handles through files in a scratch directory, run round trips and compare them
// with the reference bit for bit. Child rank r runs on testing::device_for_rank (SWITCHYARD_TEST_DEVICES:
// default GPU 0 for every rank; "spread": GPU r % visible GPUs), which the children inherit through their
// environment. Exit 0 pass, 1 fail, 2 usage error (a refused topology included), 77 skipped (no GPU).
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "cuda/expert_major_round_trip.hpp"
#include "cuda/file_rendezvous.hpp"
#include "cuda/process_round_trips.hpp"
#include "cuda/rank_device.hpp"
#include "support/loopback_delays.hpp"
#include "support/test_seed.hpp"
#include "switchyard/errors.hpp"

namespace {

using namespace switchyard;

constexpr int kUsage = 2;
constexpr int kSkipped = 77;
constexpr double kRendezvousSeconds = 60;

// One pass on a fresh buffer: handles through files (named after the pass), the round trips, then a
// rendezvous before the buffer unmaps its peers.
void run_pass(const testing::ProcessPass& pass, int pass_index, int rank, const workload::Shape& shape,
              const std::string& dir, Engine engine, bool heap_tensors, DType receive_dtype,
              std::vector<std::string>* failures) {
  const int ranks = shape.topology.num_ranks;
  BufferOptions options;
  options.topology = shape.topology;
  options.rank = rank;
  options.backend = Backend::cuda;
  options.device = testing::device_for_rank(rank, ranks);
  options.sharing = HeapSharing::processes;
  options.sizing = testing::process_ranks_sizing(engine, shape, heap_tensors, receive_dtype);
  options.config.timeout_seconds = 20;
  if (heap_tensors && engine == Engine::symmetric) options.config.symmetric_combine = SymmetricCombine::pull;
  // The stream below is made on the current device: the rank's.
  testing::expert_major::check_cuda(cudaSetDevice(options.device), "cudaSetDevice");
  // Read by the buffer at its first call across nodes: alive until the pass is over.
  const testing::LoopbackDelays delays(pass.loopback_delays, testing::process_loopback_seed(engine));
  const std::string suffix = "." + std::to_string(pass_index);
  std::vector<std::string> mine;
  {
    Buffer buffer(options);
    testing::write_rank_file(testing::rank_file(dir, "handle" + suffix, rank), buffer.local_handle());
    buffer.connect(testing::gather_rank_files(dir, "handle" + suffix, ranks, kRendezvousSeconds));
    cudaStream_t stream;
    testing::expert_major::check_cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
                                      "cudaStreamCreateWithFlags");
    testing::run_process_round_trips(buffer, engine, shape, stream, &mine, heap_tensors, receive_dtype);
    cudaStreamDestroy(stream);
    // Keep this heap mapped until every peer is done writing into it.
    testing::write_rank_file(testing::rank_file(dir, "done" + suffix, rank), {1});
    testing::gather_rank_files(dir, "done" + suffix, ranks, kRendezvousSeconds);
  }
  for (const std::string& failure : mine)
    failures->push_back(pass.name + (receive_dtype == DType::bf16 ? " (bf16 receive area)" : "") + ": " +
                        failure);
}

int child(int rank, int ranks, int ranks_per_node, const std::string& dir, Engine engine, bool heap_tensors) {
  if (!cuda_available()) return kSkipped;
  const workload::Shape shape = testing::process_ranks_shape(ranks, ranks_per_node);
  std::vector<std::string> failures;
  const std::vector<testing::ProcessPass> passes = testing::process_passes(shape);
  // With heap tensors, symmetric: a second buffer per pass whose receive area takes bf16 rows (the bf16
  // push).
  std::vector<DType> receive_dtypes = {DType::fp8_e4m3};
  if (heap_tensors && engine == Engine::symmetric) receive_dtypes.push_back(DType::bf16);
  int index = 0;
  for (const testing::ProcessPass& pass : passes) {
    for (DType receive_dtype : receive_dtypes) {
      run_pass(pass, index++, rank, shape, dir, engine, heap_tensors, receive_dtype, &failures);
    }
  }
  for (const auto& failure : failures) std::cerr << "rank " << rank << ": " << failure << "\n";
  if (!failures.empty()) {
    std::cerr << "rank " << rank << ": " << shape.describe()
              << ", inputs from SWITCHYARD_TEST_SEED=" << testing::base_seed() << "\n";
  }
  return failures.empty() ? 0 : 1;
}

int parent(int ranks, int ranks_per_node, Engine engine, bool heap_tensors) {
  // The children are this very binary.
  char path[4096];
  ssize_t length = readlink("/proc/self/exe", path, sizeof(path) - 1);
  if (length <= 0) {
    std::perror("readlink");
    return 1;
  }
  path[length] = '\0';
  const std::string self_path = path;
  char pattern[] = "/tmp/switchyard-ranks-XXXXXX";
  const char* dir = mkdtemp(pattern);
  if (!dir) {
    std::perror("mkdtemp");
    return 1;
  }
  std::vector<pid_t> children;
  for (int rank = 0; rank < ranks; ++rank) {
    pid_t pid = fork();
    if (pid == 0) {
      std::string rank_text = std::to_string(rank), ranks_text = std::to_string(ranks);
      std::string per_node_text = std::to_string(ranks_per_node);
      execl(self_path.c_str(), self_path.c_str(), "--child", rank_text.c_str(), ranks_text.c_str(),
            per_node_text.c_str(), dir, engine_name(engine), heap_tensors ? "on" : "off",
            static_cast<char*>(nullptr));
      std::perror("execl");
      _exit(1);
    }
    children.push_back(pid);
  }
  int result = 0;
  bool skipped = false;
  for (int rank = 0; rank < ranks; ++rank) {
    int status = 0;
    waitpid(children[rank], &status, 0);
    int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (code == kSkipped)
      skipped = true;
    else if (code != 0) {
      std::cerr << "rank " << rank << " failed with status " << code << "\n";
      result = 1;
    }
  }
  std::string cleanup = std::string("rm -rf ") + dir;
  if (std::system(cleanup.c_str()) != 0) std::cerr << "could not remove " << dir << "\n";
  if (result == 0 && skipped) {
    std::cout << "skipped: no CUDA device\n";
    return kSkipped;
  }
  std::cout << (result == 0 ? "pass" : "FAIL") << ": " << ranks << " processes (" << ranks / ranks_per_node
            << " nodes x " << ranks_per_node << " ranks), " << engine_name(engine) << " engine"
            << (heap_tensors
                    ? ", heap-resident tensors, the pull combine and the fp8 push into the receive views"
                    : "")
            << "\n";
  return result;
}

struct Arguments {
  int ranks = 0;
  int ranks_per_node = 0;  // 0: every rank on one node
  Engine engine = Engine::normal;
  bool heap_tensors = false;
};

// A whole number for `name`, or InvalidArgument naming it.
int parse_count(const char* text, const std::string& name) {
  char* end = nullptr;
  const long value = std::strtol(text, &end, 10);
  if (end == text || *end != '\0' || value < 1 || value > 1 << 20) {
    throw InvalidArgument(name + ": expected a positive integer, got '" + text + "'");
  }
  return static_cast<int>(value);
}

// on or off for `name`, or InvalidArgument naming it.
bool parse_switch(const char* text, const std::string& name) {
  if (std::strcmp(text, "on") == 0) return true;
  if (std::strcmp(text, "off") == 0) return false;
  throw InvalidArgument(name + ": expected on or off, got '" + text + "'");
}

// --ranks R [--ranks-per-node P] [--engine E] [--heap-tensors on|off], in any order; throws InvalidArgument
// (or Unsupported for a topology the engine cannot run) naming the option.
Arguments parse_arguments(int argc, char** argv) {
  Arguments arguments;
  for (int i = 1; i < argc; ++i) {
    const std::string option = argv[i];
    if (i + 1 >= argc) throw InvalidArgument(option + ": expected a value after it, got none");
    const char* value = argv[++i];
    if (option == "--ranks") {
      arguments.ranks = parse_count(value, "--ranks");
    } else if (option == "--ranks-per-node") {
      arguments.ranks_per_node = parse_count(value, "--ranks-per-node");
    } else if (option == "--engine") {
      arguments.engine = testing::parse_process_engine(value, "--engine");
    } else if (option == "--heap-tensors") {
      arguments.heap_tensors = parse_switch(value, "--heap-tensors");
    } else {
      throw InvalidArgument("argument " + std::to_string(i - 1) +
                            ": expected --ranks, --ranks-per-node, --engine or --heap-tensors, got '" +
                            option + "'");
    }
  }
  if (arguments.heap_tensors && arguments.engine == Engine::low_latency) {
    throw InvalidArgument(
        std::string("--heap-tensors: expected it with --engine symmetric or normal, got --engine ") +
        engine_name(arguments.engine));
  }
  if (arguments.ranks == 0) throw InvalidArgument("--ranks: expected the number of ranks, got no --ranks");
  if (arguments.ranks_per_node == 0) arguments.ranks_per_node = arguments.ranks;
  testing::check_process_topology(arguments.engine, arguments.ranks, arguments.ranks_per_node,
                                  "--ranks-per-node");
  return arguments;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 8 && std::strcmp(argv[1], "--child") == 0) {
    try {
      return child(std::atoi(argv[2]), std::atoi(argv[3]), std::atoi(argv[4]), argv[5],
                   testing::parse_process_engine(argv[6], "--child engine"),
                   parse_switch(argv[7], "--child heap tensors"));
    } catch (const std::exception& error) {
      std::cerr << "rank " << argv[2] << ": error: " << error.what() << "\n";
      return 1;
    }
  }
  Arguments arguments;
  try {
    arguments = parse_arguments(argc, argv);
  } catch (const std::exception& error) {
    std::cerr
        << "error: " << error.what() << "\n"
        << "usage: " << argv[0]
        << " --ranks R [--ranks-per-node P] [--engine normal|low_latency|symmetric] [--heap-tensors on|off]"
           "   (P divides R; default P = R, one node; symmetric only with P = R; heap tensors with "
           "symmetric only)\n";
    return kUsage;
  }
  try {
    return parent(arguments.ranks, arguments.ranks_per_node, arguments.engine, arguments.heap_tensors);
  } catch (const std::exception& error) {
    std::cerr << "error: " << error.what() << "\n";
    return 1;
  }
}
