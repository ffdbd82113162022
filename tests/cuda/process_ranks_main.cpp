// The CUDA engines with one process per rank (HeapSharing::processes: CUDA IPC handles), as they are
// deployed: `--ranks R [--engine normal|low_latency|symmetric]` (default normal). On one GPU this
// wants MPS (scripts/gpu-check.sh starts it); the symmetric engine needs it, since its kernels keep
// every block resident and barrier across ranks. The parent never touches CUDA (a CUDA context does
// not survive fork); it execs R children of this binary, which exchange their handles through files
// in a scratch directory, run round trips and compare them with the reference bit for bit. Child
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

#include "cuda/cuda_round_trip.hpp"
#include "cuda/expert_major_round_trip.hpp"
#include "cuda/rank_device.hpp"
#include "support/test_seed.hpp"
#include "switchyard/errors.hpp"

namespace {

using namespace switchyard;

constexpr int kSkipped = 77;
constexpr double kRendezvousSeconds = 60;

workload::Shape shape_for(int ranks) {
  workload::Shape shape;
  shape.topology = Topology::single_node(ranks);
  shape.tokens_per_rank = 128;
  shape.hidden = 2048;
  shape.topk = 8;
  shape.num_experts = 8 * ranks;
  shape.dtype = DType::bf16;
  return shape;
}

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

Engine parse_engine(const std::string& text) {
  for (Engine engine : {Engine::normal, Engine::low_latency, Engine::symmetric}) {
    if (text == engine_name(engine)) return engine;
  }
  throw InvalidArgument("--engine: expected normal, low_latency or symmetric, got '" + text + "'");
}

// The normal engine: two round trips on one buffer.
void run_normal(Buffer& buffer, const workload::Shape& shape, cudaStream_t stream,
                std::vector<std::string>* failures) {
  auto data = workload::generate(shape, testing::seed_for("process_ranks"));
  testing::Expected expected = testing::compute_expected(shape, data, 1);
  for (int repeat = 0; repeat < 2; ++repeat) {
    testing::DeviceRun run = testing::run_on_device(buffer, shape, data[buffer.rank()], expected, 1, stream);
    testing::compare_with_reference(run, shape, expected, buffer.rank(), failures);
  }
}

// An expert-major round: `calls` dispatches back to back, then their combines.
struct ExpertMajorRound {
  std::string name;
  testing::ExpertMajorCall call;
  int calls;
};

// Two calls in flight cover both halves of the double buffer (and, for symmetric, both barrier
// phases); an fp8 pair; and for low_latency one call split by its hooks (symmetric has no split).
std::vector<ExpertMajorRound> expert_major_rounds(Engine engine, const workload::Shape& shape) {
  testing::ExpertMajorCall bf16;
  bf16.engine = engine;
  bf16.max_tokens_per_rank = shape.tokens_per_rank;  // every rank sends a full batch
  bf16.num_experts = shape.num_experts;
  testing::ExpertMajorCall fp8 = bf16, hooks = bf16;
  fp8.fp8.use_fp8 = true;
  hooks.hooks = true;
  std::vector<ExpertMajorRound> rounds = {{"bf16", bf16, 2}, {"fp8", fp8, 2}};
  if (engine == Engine::low_latency) rounds.push_back({"hooks", hooks, 1});
  return rounds;
}

void run_expert_major(Buffer& buffer, Engine engine, const workload::Shape& shape, cudaStream_t stream,
                      std::vector<std::string>* failures) {
  const int rank = buffer.rank();
  for (const ExpertMajorRound& round : expert_major_rounds(engine, shape)) {
    // Inputs and the reference per round, not all up front: at 8 ranks one call's reference outputs
    // for every rank take about half a GB of host memory, in each of the 8 processes.
    std::vector<std::vector<workload::RankData>> data;
    std::vector<testing::ExpertMajorExpected> expected;
    for (int call = 0; call < round.calls; ++call) {
      const std::string name =
          std::string("process_ranks/") + engine_name(engine) + "/" + round.name + "/" + std::to_string(call);
      data.push_back(workload::generate(shape, testing::seed_for(name)));
      expected.push_back(testing::expert_major_expected(round.call, shape.topology, data.back()));
    }
    std::vector<const workload::RankData*> mine;
    std::vector<TensorView> ys;
    for (int call = 0; call < round.calls; ++call) {
      mine.push_back(&data[call][rank]);
      ys.push_back(expected[call].ys[rank]);
    }
    auto runs = testing::run_expert_major_on_device(buffer, round.call, mine, ys, stream);
    for (int call = 0; call < round.calls; ++call) {
      const std::string label =
          std::string(engine_name(engine)) + " " + round.name + " call " + std::to_string(call);
      testing::compare_expert_major(runs[call], expected[call], rank, label, failures);
    }
  }
}

BufferSizing expert_major_sizing(Engine engine, const workload::Shape& shape) {
  BufferSizing sizing;
  sizing.max_tokens_per_rank = 1;  // the normal engine is not used
  sizing.hidden = shape.hidden;
  sizing.topk = shape.topk;
  sizing.num_experts = shape.num_experts;
  if (engine == Engine::low_latency) sizing.low_latency_max_tokens_per_rank = shape.tokens_per_rank;
  else sizing.symmetric_max_tokens_per_rank = shape.tokens_per_rank;
  return sizing;
}

int child(int rank, int ranks, const std::string& dir, Engine engine) {
  if (!cuda_available()) return kSkipped;
  const workload::Shape shape = shape_for(ranks);
  BufferOptions options;
  options.topology = shape.topology;
  options.rank = rank;
  options.backend = Backend::cuda;
  options.device = testing::device_for_rank(rank, ranks);
  options.sharing = HeapSharing::processes;
  options.sizing = engine == Engine::normal ? testing::sizing_for(shape) : expert_major_sizing(engine, shape);
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
    if (engine == Engine::normal) run_normal(buffer, shape, stream, &failures);
    else run_expert_major(buffer, engine, shape, stream, &failures);
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
      return child(std::atoi(argv[2]), std::atoi(argv[3]), argv[4], parse_engine(argv[5]));
    }
    const bool with_engine = argc == 5 && std::strcmp(argv[3], "--engine") == 0;
    if ((argc == 3 || with_engine) && std::strcmp(argv[1], "--ranks") == 0 && std::atoi(argv[2]) >= 1) {
      return parent(std::atoi(argv[2]), with_engine ? parse_engine(argv[4]) : Engine::normal);
    }
  } catch (const std::exception& error) {
    std::cerr << "error: " << error.what() << "\n";
    return 1;
  }
  std::cerr << "usage: " << argv[0] << " --ranks R [--engine normal|low_latency|symmetric]   (R >= 1)\n";
  return 2;
}
