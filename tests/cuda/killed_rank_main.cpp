// A rank process killed with SIGKILL in the middle of its calls, on the CUDA backend with one process
// per rank (CUDA IPC; on one GPU under MPS): `--ranks R --engine E [--kill K]` (default K = R - 1).
// Every rank runs the process round trips (process_round_trips.hpp) over and over; rank K kills
// itself from a second thread while its calls are in flight. Each survivor must then:
//   - end a call with a TimeoutError naming rank K, within its timeout (nothing hangs);
//   - find its CUDA context usable (a device synchronize succeeds);
//   - destroy its Buffer and build a new one over the survivors alone (ranks renumbered), whose
//     round trips match the reference bit for bit.
// As in process_ranks_main.cpp the parent never touches CUDA; it execs R children of this binary,
// which exchange handles through files. Exit 0 pass, 1 fail, 2 usage error, 77 skipped (no GPU).
#include <signal.h>
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
#include "support/rank_names.hpp"
#include "switchyard/errors.hpp"

namespace {

using namespace switchyard;

constexpr int kUsage = 2;
constexpr int kSkipped = 77;
constexpr double kRendezvousSeconds = 120;
// NOTES: short, so that the survivors notice quickly; the round trips themselves take milliseconds.
constexpr double kSurvivorTimeoutSeconds = 3;
// How long the doomed rank runs before it dies: long enough to be inside its calls.
constexpr int kKillAfterMilliseconds = 300;
// A survivor gives up (a failure) if no call has timed out after this many round-trip sets.
constexpr int kMaxRoundTripSets = 1000;

BufferOptions options_for(const workload::Shape& shape, Engine engine, int rank, int device, double timeout) {
  BufferOptions options;
  options.topology = shape.topology;
  options.rank = rank;
  options.backend = Backend::cuda;
  options.device = device;
  options.sharing = HeapSharing::processes;
  options.sizing = testing::process_ranks_sizing(engine, shape);
  options.config.timeout_seconds = timeout;
  return options;
}

cudaStream_t new_stream() {
  cudaStream_t stream = nullptr;
  testing::expert_major::check_cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
                                    "cudaStreamCreateWithFlags");
  return stream;
}

// Rank K: its calls, until the second thread kills the process.
[[noreturn]] void run_doomed(Buffer& buffer, Engine engine, const workload::Shape& shape,
                             cudaStream_t stream) {
  std::thread killer([] {
    std::this_thread::sleep_for(std::chrono::milliseconds(kKillAfterMilliseconds));
    raise(SIGKILL);
  });
  killer.detach();
  for (;;) {
    std::vector<std::string> ignored;
    testing::run_process_round_trips(buffer, engine, shape, stream, &ignored);
  }
}

int child(int rank, int ranks, int doomed, const std::string& dir, Engine engine) {
  if (!cuda_available()) return kSkipped;
  const int device = testing::device_for_rank(rank, ranks);
  testing::expert_major::check_cuda(cudaSetDevice(device), "cudaSetDevice");
  const workload::Shape shape = testing::process_ranks_shape(ranks, ranks);
  std::vector<int> everyone;
  for (int r = 0; r < ranks; ++r) everyone.push_back(r);
  std::vector<std::string> failures;

  {
    Buffer buffer(options_for(shape, engine, rank, device, kSurvivorTimeoutSeconds));
    testing::write_rank_file(testing::rank_file(dir, "handle", rank), buffer.local_handle());
    buffer.connect(testing::gather_rank_files(dir, "handle", everyone, kRendezvousSeconds));
    cudaStream_t stream = new_stream();
    if (rank == doomed) run_doomed(buffer, engine, shape, stream);

    std::string message;
    const auto start = std::chrono::steady_clock::now();
    for (int set = 0; set < kMaxRoundTripSets && message.empty(); ++set) {
      try {
        std::vector<std::string> ignored;  // the doomed rank's inputs may be half-delivered
        testing::run_process_round_trips(buffer, engine, shape, stream, &ignored);
      } catch (const TimeoutError& error) {
        message = error.what();
      }
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (message.empty()) {
      failures.push_back("no call timed out after rank " + std::to_string(doomed) + " died");
    } else {
      if (!testing::message_names_rank(message, doomed)) {
        failures.push_back("the timeout does not name rank " + std::to_string(doomed) + ": " + message);
      }
      std::cout << "rank " << rank << ": timed out after " << seconds << " s: " << message << "\n";
    }
    cudaStreamDestroy(stream);
  }
  // The context outlives the failed Buffer.
  const cudaError_t synchronized = cudaDeviceSynchronize();
  if (synchronized != cudaSuccess) {
    failures.push_back(std::string("cudaDeviceSynchronize after the timeout: ") +
                       cudaGetErrorString(synchronized));
  } else {
    // A new Buffer over the survivors, renumbered in rank order.
    std::vector<int> survivors;
    for (int r = 0; r < ranks; ++r) {
      if (r != doomed) survivors.push_back(r);
    }
    const int new_rank = rank < doomed ? rank : rank - 1;
    const int remaining = ranks - 1;
    const workload::Shape survivors_shape = testing::process_ranks_shape(remaining, remaining);
    Buffer buffer(options_for(survivors_shape, engine, new_rank, device, 20));
    testing::write_rank_file(testing::rank_file(dir, "survivor-handle", rank), buffer.local_handle());
    buffer.connect(testing::gather_rank_files(dir, "survivor-handle", survivors, kRendezvousSeconds));
    cudaStream_t stream = new_stream();
    std::vector<std::string> mismatches;
    testing::run_process_round_trips(buffer, engine, survivors_shape, stream, &mismatches);
    cudaStreamDestroy(stream);
    for (const std::string& mismatch : mismatches) failures.push_back("survivors' buffer: " + mismatch);
    // Keep this heap mapped until every survivor is done writing into it.
    testing::write_rank_file(testing::rank_file(dir, "survivor-done", rank), {1});
    testing::gather_rank_files(dir, "survivor-done", survivors, kRendezvousSeconds);
  }
  for (const auto& failure : failures) std::cerr << "rank " << rank << ": " << failure << "\n";
  return failures.empty() ? 0 : 1;
}

int parent(int ranks, int doomed, Engine engine) {
  char path[4096];
  ssize_t length = readlink("/proc/self/exe", path, sizeof(path) - 1);
  if (length <= 0) {
    std::perror("readlink");
    return 1;
  }
  path[length] = '\0';
  char pattern[] = "/tmp/switchyard-killed-XXXXXX";
  const char* dir = mkdtemp(pattern);
  if (!dir) {
    std::perror("mkdtemp");
    return 1;
  }
  std::vector<pid_t> children;
  for (int rank = 0; rank < ranks; ++rank) {
    pid_t pid = fork();
    if (pid == 0) {
      const std::string rank_text = std::to_string(rank), ranks_text = std::to_string(ranks);
      const std::string doomed_text = std::to_string(doomed);
      execl(path, path, "--child", rank_text.c_str(), ranks_text.c_str(), doomed_text.c_str(), dir,
            engine_name(engine), static_cast<char*>(nullptr));
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
    const bool killed = WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (code == kSkipped) {
      skipped = true;
    } else if (rank == doomed ? !killed : code != 0) {
      std::cerr << "rank " << rank
                << (rank == doomed ? " was to be killed, but ended with status " : " failed with status ")
                << code << "\n";
      result = 1;
    }
  }
  const std::string cleanup = std::string("rm -rf ") + dir;
  if (std::system(cleanup.c_str()) != 0) std::cerr << "could not remove " << dir << "\n";
  if (result == 0 && skipped) {
    std::cout << "skipped: no CUDA device\n";
    return kSkipped;
  }
  std::cout << (result == 0 ? "pass" : "FAIL") << ": " << ranks << " processes, " << engine_name(engine)
            << " engine, rank " << doomed << " killed\n";
  return result;
}

int parse_count(const char* text, const std::string& name, int low, int high) {
  char* end = nullptr;
  const long value = std::strtol(text, &end, 10);
  if (end == text || *end != '\0' || value < low || value > high) {
    throw InvalidArgument(name + ": expected an integer in " + std::to_string(low) + ".." +
                          std::to_string(high) + ", got '" + text + "'");
  }
  return static_cast<int>(value);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 7 && std::strcmp(argv[1], "--child") == 0) {
    try {
      return child(std::atoi(argv[2]), std::atoi(argv[3]), std::atoi(argv[4]), argv[5],
                   testing::parse_process_engine(argv[6], "--child engine"));
    } catch (const std::exception& error) {
      std::cerr << "rank " << argv[2] << ": error: " << error.what() << "\n";
      return 1;
    }
  }
  int ranks = 0, doomed = -1;
  Engine engine = Engine::normal;
  try {
    for (int i = 1; i < argc; i += 2) {
      const std::string option = argv[i];
      if (i + 1 >= argc) throw InvalidArgument(option + ": expected a value after it, got none");
      if (option == "--ranks") {
        ranks = parse_count(argv[i + 1], "--ranks", 2, 64);
      } else if (option == "--kill") {
        doomed = parse_count(argv[i + 1], "--kill", 0, 63);
      } else if (option == "--engine") {
        engine = testing::parse_process_engine(argv[i + 1], "--engine");
      } else {
        throw InvalidArgument("argument " + std::to_string(i) +
                              ": expected --ranks, --kill or --engine, got '" + option + "'");
      }
    }
    if (ranks == 0) throw InvalidArgument("--ranks: expected the number of ranks (2 or more), got none");
    if (doomed < 0) doomed = ranks - 1;
    if (doomed >= ranks) {
      throw InvalidArgument("--kill: expected a rank below --ranks " + std::to_string(ranks) + ", got " +
                            std::to_string(doomed));
    }
  } catch (const std::exception& error) {
    std::cerr << "error: " << error.what() << "\n"
              << "usage: " << argv[0] << " --ranks R [--engine normal|low_latency|symmetric] [--kill K]\n";
    return kUsage;
  }
  try {
    return parent(ranks, doomed, engine);
  } catch (const std::exception& error) {
    std::cerr << "error: " << error.what() << "\n";
    return 1;
  }
}
