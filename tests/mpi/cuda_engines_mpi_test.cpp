// The CUDA engines with one process per GPU under mpirun, as they are deployed (issue 8): each MPI
// rank is one switchyard rank (HeapSharing::processes), its CUDA IPC handle goes to the others through
// MPI_Allgatherv (the caller's allgather, DESIGN.md), and peers on other GPUs are reached by peer
// access (NVLink where the GPUs have it). Runs the round trips of cuda/process_round_trips.hpp (the
// ones the fork-based process test runs) and compares every rank's outputs with the reference bit
// for bit; fails on any mismatch on any rank. Each engine (and, across nodes, each pass: loopback
// delays off, then on) is one case of mpi_case_verdict.hpp.
//
//   mpirun -np <GPUs> cuda_engines_mpi_test [--engine normal|low_latency|symmetric|all]
//                                           [--ranks-per-node P] [--allow-shared-gpu]
//
// --ranks-per-node P (a divisor of the ranks; default all of them, one node): the ranks form
// np / P nodes, emulated with the loopback device transport over the IPC-mapped heaps (the
// hierarchical normal engine, low_latency across nodes). The symmetric engine needs one node: asked
// for by name across nodes it is a usage error; `all` leaves it out there, and says so.
//
// Placement: device = node-local rank % visible GPUs (the local rank from
// MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)). Two ranks on one physical GPU are an error unless asked
// for (--allow-shared-gpu or SWITCHYARD_ALLOW_SHARED_GPU=1), since without MPS their kernels
// time-slice and the engines' spin-waits crawl or time out (GPU.md). Every rank must be on one host
// (the nodes of --ranks-per-node are emulated there).
// Exit 0 pass, 1 mismatch, 2 usage or placement error (or an exception on some rank: MPI_Abort), 77
// skipped (no CUDA device).
#include <cuda_runtime.h>
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "cuda/expert_major_round_trip.hpp"
#include "cuda/process_round_trips.hpp"
#include "cuda/rank_device.hpp"
#include "mpi_allgather.hpp"
#include "mpi_case_verdict.hpp"
#include "support/loopback_delays.hpp"
#include "support/test_seed.hpp"
#include "switchyard/errors.hpp"

namespace {

using namespace switchyard;

constexpr int kMismatch = 1;
constexpr int kUsage = 2;
constexpr int kSkipped = 77;
// NOTES: a lost peer should fail the run long before the caller's timeout (the script gives each
// engine 120 s), yet one GPU shared by 8 ranks under MPS must never trip it.
constexpr double kTimeoutSeconds = 20.0;
constexpr const char* kAllowSharedVariable = "SWITCHYARD_ALLOW_SHARED_GPU";
constexpr size_t kUuidBytes = sizeof(cudaUUID_t::bytes);

struct Options {
  std::vector<Engine> engines;
  int ranks_per_node = 0;  // every rank on one node
  bool allow_shared_gpu = false;
  std::string note;  // what `all` left out, for rank 0 to print
};

// Throws InvalidArgument (Unsupported for a topology the engine cannot run) naming the argument.
Options parse_options(int argc, char** argv, int num_ranks) {
  Options options;
  std::string engine = "all";
  options.ranks_per_node = num_ranks;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--engine" && i + 1 < argc) {
      engine = argv[++i];
    } else if (arg == "--ranks-per-node" && i + 1 < argc) {
      const std::string text = argv[++i];
      char* end = nullptr;
      const long value = std::strtol(text.c_str(), &end, 10);
      if (text.empty() || *end != '\0' || value < 1 || value > num_ranks) {
        throw InvalidArgument("--ranks-per-node: expected a divisor of the ranks (" +
                              std::to_string(num_ranks) + "), got '" + text + "'");
      }
      options.ranks_per_node = static_cast<int>(value);
    } else if (arg == "--allow-shared-gpu") {
      options.allow_shared_gpu = true;
    } else {
      throw InvalidArgument("argument " + std::to_string(i) +
                            ": expected --engine normal|low_latency|symmetric|all, --ranks-per-node P or "
                            "--allow-shared-gpu, got '" +
                            arg + "'");
    }
  }
  if (engine == "all") {
    options.engines = {Engine::normal, Engine::low_latency};
    if (options.ranks_per_node == num_ranks)
      options.engines.push_back(Engine::symmetric);
    else
      options.note = "symmetric engine: not run (it needs one node, ranks_per_node == num_ranks)";
  } else {
    options.engines = {testing::parse_process_engine(engine, "--engine")};
  }
  for (Engine chosen : options.engines) {
    testing::check_process_topology(chosen, num_ranks, options.ranks_per_node, "--ranks-per-node");
  }
  const char* shared = std::getenv(kAllowSharedVariable);
  if (shared != nullptr && std::string(shared) == "1") options.allow_shared_gpu = true;
  return options;
}

std::string pci_bus_id(int device) {
  char text[32] = {};
  if (cudaDeviceGetPCIBusId(text, sizeof(text), device) != cudaSuccess) {
    cudaGetLastError();
    return "unknown PCI bus";
  }
  return text;
}

std::vector<uint8_t> device_uuid(int device) {
  cudaDeviceProp properties{};
  testing::expert_major::check_cuda(cudaGetDeviceProperties(&properties, device), "cudaGetDeviceProperties");
  return std::vector<uint8_t>(properties.uuid.bytes, properties.uuid.bytes + kUuidBytes);
}

// Where this rank runs, and whether that is allowed; collective over MPI_COMM_WORLD.
struct Placement {
  int device = -1;
  std::string error;  // empty when the placement is fine
};

Placement place_rank(const Options& options, int rank, int num_ranks) {
  Placement placement;
  MPI_Comm node;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
  int local_rank = 0, local_size = 1;
  MPI_Comm_rank(node, &local_rank);
  MPI_Comm_size(node, &local_size);
  MPI_Comm_free(&node);
  int visible = 0;
  testing::expert_major::check_cuda(cudaGetDeviceCount(&visible), "cudaGetDeviceCount");
  placement.device = local_rank % visible;

  // Every rank's GPU by identity (UUID), not by ordinal: CUDA_VISIBLE_DEVICES may differ per rank.
  const std::vector<uint8_t> mine = device_uuid(placement.device);
  std::vector<uint8_t> all(kUuidBytes * num_ranks);
  MPI_Allgather(mine.data(), static_cast<int>(kUuidBytes), MPI_BYTE, all.data(), static_cast<int>(kUuidBytes),
                MPI_BYTE, MPI_COMM_WORLD);
  auto uuid_of = [&](int peer) {
    return std::vector<uint8_t>(all.begin() + kUuidBytes * peer, all.begin() + kUuidBytes * (peer + 1));
  };

  const std::string where = "rank " + std::to_string(rank) + " (local rank " + std::to_string(local_rank) +
                            " of " + std::to_string(local_size) + ", GPU " +
                            std::to_string(placement.device) + " of " + std::to_string(visible) +
                            " visible, " + pci_bus_id(placement.device) + ")";
  if (local_size != num_ranks) {
    placement.error = where + ": expected every rank on one node (CUDA IPC), got " +
                      std::to_string(local_size) + " of " + std::to_string(num_ranks) + " ranks on this node";
    return placement;
  }
  // The GPU tests' helpers place ranks by SWITCHYARD_TEST_DEVICES (cuda/rank_device.hpp); "spread"
  // is rank % visible GPUs, which on one node is this very rule. Both must agree.
  const char* devices_rule = std::getenv(testing::kTestDevicesVariable);
  if (devices_rule != nullptr && std::string(devices_rule) != "spread") {
    placement.error = where + ": expected " + testing::kTestDevicesVariable + " unset or \"spread\", got \"" +
                      devices_rule + "\"";
    return placement;
  }
  setenv(testing::kTestDevicesVariable, "spread", 1);
  if (testing::device_for_rank(rank, num_ranks) != placement.device) {
    placement.error = where + ": expected the test helpers to place this rank on GPU " +
                      std::to_string(placement.device) + ", got GPU " +
                      std::to_string(testing::device_for_rank(rank, num_ranks));
    return placement;
  }

  for (int peer = 0; peer < num_ranks; ++peer) {
    if (peer == rank) continue;
    const std::vector<uint8_t> theirs = uuid_of(peer);
    if (theirs == mine) {
      if (!options.allow_shared_gpu) {
        placement.error = where + ": expected one rank per GPU, got rank " + std::to_string(peer) +
                          " on the same GPU (" + std::to_string(num_ranks) + " ranks, " +
                          std::to_string(visible) +
                          " visible GPUs); several ranks per GPU only on purpose, under MPS: pass "
                          "--allow-shared-gpu or set " +
                          kAllowSharedVariable + "=1";
        return placement;
      }
      continue;
    }
    // The peer's GPU as this process numbers it; CUDA IPC and peer access need it visible here.
    int peer_device = -1;
    for (int device = 0; device < visible && peer_device < 0; ++device) {
      if (device_uuid(device) == theirs) peer_device = device;
    }
    if (peer_device < 0) {
      placement.error =
          where + ": expected rank " + std::to_string(peer) +
          "'s GPU to be visible here (CUDA IPC between GPUs), got it hidden (CUDA_VISIBLE_DEVICES=" +
          (std::getenv("CUDA_VISIBLE_DEVICES") ? std::getenv("CUDA_VISIBLE_DEVICES") : "unset") + ")";
      return placement;
    }
    int can_access = 0;
    testing::expert_major::check_cuda(cudaDeviceCanAccessPeer(&can_access, placement.device, peer_device),
                                      "cudaDeviceCanAccessPeer");
    if (!can_access) {
      placement.error = where + ": expected peer access to rank " + std::to_string(peer) + "'s GPU " +
                        std::to_string(peer_device) + " (" + pci_bus_id(peer_device) +
                        "; NVLink or PCIe peer-to-peer), got none";
      return placement;
    }
  }
  return placement;
}

// This rank's mismatches for one pass of one engine, on a buffer of its own.
std::vector<std::string> run_pass(Engine engine, const workload::Shape& shape,
                                  const testing::ProcessPass& pass, int rank, int device) {
  BufferOptions options;
  options.topology = shape.topology;
  options.rank = rank;
  options.backend = Backend::cuda;
  options.device = device;
  options.sharing = HeapSharing::processes;
  options.sizing = testing::process_ranks_sizing(engine, shape);
  options.config.timeout_seconds = kTimeoutSeconds;
  // The stream below is made on the current device: the rank's.
  testing::expert_major::check_cuda(cudaSetDevice(device), "cudaSetDevice");
  // Read by the buffer at its first call across nodes: alive until the pass is over.
  const testing::LoopbackDelays delays(pass.loopback_delays, testing::process_loopback_seed(engine));
  std::vector<std::string> failures;
  Buffer buffer(options);
  buffer.connect(testing::mpi_allgather(buffer.local_handle(), MPI_COMM_WORLD));
  cudaStream_t stream = nullptr;
  testing::expert_major::check_cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
                                    "cudaStreamCreateWithFlags");
  testing::run_process_round_trips(buffer, engine, shape, stream, &failures);
  testing::expert_major::check_cuda(cudaStreamDestroy(stream), "cudaStreamDestroy");
  // No process unmaps its heap while a peer may still write into it.
  MPI_Barrier(MPI_COMM_WORLD);
  return failures;
}

// Whether any rank says yes.
bool any_rank(bool mine) {
  int local = mine ? 1 : 0, any = 0;
  MPI_Allreduce(&local, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return any != 0;
}

int run(int argc, char** argv, int rank, int num_ranks) {
  Options options;
  std::string usage_error;
  try {
    options = parse_options(argc, argv, num_ranks);
  } catch (const std::exception& error) {
    usage_error = error.what();
  }
  if (!usage_error.empty()) {  // every rank parses the same arguments
    if (rank == 0) {
      std::fprintf(stderr,
                   "error: %s\nusage: mpirun -np <GPUs> %s [--engine normal|low_latency|symmetric|all] "
                   "[--ranks-per-node P] [--allow-shared-gpu]\n",
                   usage_error.c_str(), argv[0]);
    }
    return kUsage;
  }
  if (any_rank(!cuda_available())) {
    if (rank == 0) std::printf("skipped: no CUDA device visible to every rank\n");
    return kSkipped;
  }

  Placement placement;
  try {
    placement = place_rank(options, rank, num_ranks);
  } catch (const std::exception& error) {
    placement.error = "rank " + std::to_string(rank) + ": " + error.what();
  }
  if (!placement.error.empty()) std::fprintf(stderr, "error: %s\n", placement.error.c_str());
  if (any_rank(!placement.error.empty())) return kUsage;
  std::vector<int> devices(num_ranks);
  MPI_Gather(&placement.device, 1, MPI_INT, devices.data(), 1, MPI_INT, 0, MPI_COMM_WORLD);
  const workload::Shape shape = testing::process_ranks_shape(num_ranks, options.ranks_per_node);
  if (rank == 0) {
    std::string mapping;
    for (int peer = 0; peer < num_ranks; ++peer)
      mapping += (peer ? ", " : "") + std::to_string(devices[peer]);
    std::printf("%d processes (%d nodes x %d ranks), rank -> GPU: %s%s\n", num_ranks,
                shape.topology.num_nodes(), options.ranks_per_node, mapping.c_str(),
                options.allow_shared_gpu ? " (several ranks per GPU allowed)" : "");
    if (!options.note.empty()) std::printf("%s\n", options.note.c_str());
  }

  int cases = 0, failed = 0;
  for (Engine engine : options.engines) {
    for (const testing::ProcessPass& pass : testing::process_passes(shape)) {
      const std::string name = std::string(engine_name(engine)) + " engine, " + pass.name;
      const std::string context = name + " (" + shape.describe() + ", inputs from SWITCHYARD_TEST_SEED=" +
                                  testing::hex_seed(testing::base_seed()) + ")";
      const bool passed = testing::mpi_case_passed(
          name, context, [&] { return run_pass(engine, shape, pass, rank, placement.device); });
      ++cases;
      failed += passed ? 0 : 1;
    }
  }
  if (rank == 0) std::printf("%s: %d cases, %d failed\n", failed == 0 ? "pass" : "FAIL", cases, failed);
  return failed == 0 ? 0 : kMismatch;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, num_ranks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &num_ranks);
  const int status = run(argc, argv, rank, num_ranks);
  std::fflush(stdout);
  MPI_Finalize();
  return status;
}
