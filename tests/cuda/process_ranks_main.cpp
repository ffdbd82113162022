// The CUDA engines with one process per rank (HeapSharing::processes: CUDA IPC handles), as they are
// deployed: `--ranks R [--engine normal|low_latency|symmetric]` (default normal). The round trips are
// cuda/process_round_trips.hpp, shared with the mpirun test (tests/mpi/cuda_engines_mpi_test.cpp).
// On one GPU this wants MPS (scripts/gpu-check.sh starts it); the symmetric engine needs it, since
// its kernels keep every block resident and barrier across ranks. The parent never touches CUDA (a
// CUDA context does not survive fork); it execs R children of this binary, which exchange their
// handles through files in a scratch directory, run round trips and compare them with the reference
// bit for bit. Child
// rank r runs on testing::device_for_rank (SWITCHYARD_TEST_DEVICES: default GPU 0 for every rank;
// "spread": GPU r % visible GPUs), which the children inherit through their environment.
// Exit 0 pass, 1 fail, 77 skipped (no GPU).
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "cuda/expert_major_round_trip.hpp"
#include "cuda/process_round_trips.hpp"
#include "cuda/rank_device.hpp"
#include "support/test_seed.hpp"
#include "switchyard/errors.hpp"

namespace {

using namespace switchyard;

constexpr int kSkipped = 77;
constexpr double kRendezvousSeconds = 60;

std::string file(const std::string& dir, const std::string& name, int rank) {
  return dir + "/" + name + "." + std::to_string(rank);
}

void write_file(const std::string& path, const Bytes& bytes) {
  std::string temporary = path + ".tmp";
  std::ofstream(temporary, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  std::rename(temporary.c_str(), path.c_str());  // atomic: readers never see half a handle
}

// Waits until every rank has written `name`, and returns their contents.
std::vector<Bytes> gather_files(const std::string& dir, const std::string& name, int ranks) {
  std::vector<Bytes> all(ranks);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(kRendezvousSeconds);
  for (int rank = 0; rank < ranks; ++rank) {
    for (;;) {
      std::ifstream in(file(dir, name, rank), std::ios::binary);
      if (in) {
        all[rank] = Bytes(std::istreambuf_iterator<char>(in), {});
        break;
      }
      if (std::chrono::steady_clock::now() > deadline) {
        throw TimeoutError("process rendezvous: rank " + std::to_string(rank) + " never wrote " + name);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  return all;
}

int child(int rank, int ranks, const std::string& dir, Engine engine) {
  if (!cuda_available()) return kSkipped;
  const workload::Shape shape = testing::process_ranks_shape(ranks);
  BufferOptions options;
  options.topology = shape.topology;
  options.rank = rank;
  options.backend = Backend::cuda;
  options.device = testing::device_for_rank(rank, ranks);
  options.sharing = HeapSharing::processes;
  options.sizing = testing::process_ranks_sizing(engine, shape);
  options.config.timeout_seconds = 20;
  std::vector<std::string> failures;
  // The stream below is made on the current device: the rank's.
  testing::expert_major::check_cuda(cudaSetDevice(options.device), "cudaSetDevice");
  {
    Buffer buffer(options);
    write_file(file(dir, "handle", rank), buffer.local_handle());
    buffer.connect(gather_files(dir, "handle", ranks));
    cudaStream_t stream;
    cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    testing::run_process_round_trips(buffer, engine, shape, stream, &failures);
    cudaStreamDestroy(stream);
    // Keep this heap mapped until every peer is done writing into it.
    write_file(file(dir, "done", rank), {1});
    gather_files(dir, "done", ranks);
  }
  for (const auto& failure : failures) std::cerr << failure << "\n";
  if (!failures.empty()) {
    std::cerr << "rank " << rank << ": inputs from SWITCHYARD_TEST_SEED=" << testing::base_seed() << "\n";
  }
  return failures.empty() ? 0 : 1;
}

int parent(int ranks, Engine engine) {
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
      execl(self_path.c_str(), self_path.c_str(), "--child", rank_text.c_str(), ranks_text.c_str(), dir,
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
    int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (code == kSkipped) skipped = true;
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
  std::cout << (result == 0 ? "pass" : "FAIL") << ": " << ranks << " processes, " << engine_name(engine)
            << " engine\n";
  return result;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc == 6 && std::strcmp(argv[1], "--child") == 0) {
      return child(std::atoi(argv[2]), std::atoi(argv[3]), argv[4],
                   testing::parse_process_engine(argv[5], "--child engine"));
    }
    const bool with_engine = argc == 5 && std::strcmp(argv[3], "--engine") == 0;
    if ((argc == 3 || with_engine) && std::strcmp(argv[1], "--ranks") == 0 && std::atoi(argv[2]) >= 1) {
      return parent(std::atoi(argv[2]),
                    with_engine ? testing::parse_process_engine(argv[4], "--engine") : Engine::normal);
    }
  } catch (const std::exception& error) {
    std::cerr << "error: " << error.what() << "\n";
    return 1;
  }
  std::cerr << "usage: " << argv[0] << " --ranks R [--engine normal|low_latency|symmetric]   (R >= 1)\n";
  return 2;
}
