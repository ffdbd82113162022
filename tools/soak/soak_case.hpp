#pragma once
// One soak case: an engine, a topology, a way to run the ranks, a shape and the options of the
// calls, all drawn from one 64-bit seed. The seed alone (with the backend) gives the case back, so a
// mismatch can be replayed with `switchyard-soak --backend B --replay <seed>`.
#include <cstdint>
#include <string>
#include <vector>

#include "switchyard/buffer.hpp"
#include "switchyard/config.hpp"
#include "switchyard/reference.hpp"
#include "switchyard/topology.hpp"
#include "workload/workload.hpp"

namespace switchyard::soak {

// NOTES: every call's bound on a wait (Config::timeout_seconds): long enough for 8 ranks as threads
// on a loaded 2-core CI machine; a lost rank still fails its case (TimeoutError) well before ctest
// gives up on the whole run.
constexpr double kCallTimeoutSeconds = 60.0;

// What --engines names. `internode` is the normal engine with ranks_per_node < num_ranks over the
// loopback transport; `normal` is the same engine on one node.
enum class SoakEngine : uint8_t { normal, internode, low_latency, symmetric };
const char* soak_engine_name(SoakEngine engine);
// Throws std::invalid_argument for a name that is not one of the four.
SoakEngine soak_engine_from_name(const std::string& name);
constexpr SoakEngine kAllSoakEngines[] = {SoakEngine::normal, SoakEngine::internode, SoakEngine::low_latency,
                                          SoakEngine::symmetric};

// Ranks as threads of this process (switchyard::run_ranks), or one forked process per rank
// (HeapSharing::processes; CPU only).
enum class RankModel : uint8_t { threads, processes };
const char* rank_model_name(RankModel model);

// How the symmetric engine's expert_capacity is set for a round.
enum class CapacityChoice : uint8_t {
  every_row,     // 0: R * max rows per local expert
  exactly_full,  // the largest expert's rows in that round (at least 1)
};

struct SoakCase {
  uint64_t seed = 0;
  Backend backend = Backend::cpu;
  SoakEngine engine = SoakEngine::normal;
  RankModel ranks_as = RankModel::threads;
  Topology topology;
  // Tokens of each rank, the same in every round of the case (a captured graph needs fixed shapes).
  std::vector<int64_t> tokens;
  // The largest token count a call may have: the buffer's capacity (normal: sized for it exactly;
  // expert-major: max_tokens_per_rank). Some rank has exactly this many tokens unless all have 0.
  int64_t max_tokens = 1;
  int hidden = 128;
  int topk = 1;
  int num_experts = 1;
  workload::Routing routing = workload::Routing::random;
  // Consecutive round trips on the same buffers, each with new inputs (new routing).
  int round_trips = 1;

  // normal and internode.
  DType dtype = DType::bf16;
  bool with_weights = true;
  int expert_alignment = 1;
  bool pass_layout = true;
  bool preallocate_outputs = true;
  bool worst_case = false;     // fixed-size outputs (num_worst_tokens = R * max_tokens)
  bool cached_replay = false;  // each round also dispatches again with the round's handle
  bool cached_with_topk = true;
  Config
      config;  // channels, ring slots and chunk (small rings force wrap-around); the timeout of every engine
  bool loopback_delays = false;

  // low_latency and symmetric.
  reference::LowLatencyOptions fp8;
  bool hooks = false;  // low_latency: return_recv_hook on both calls
  // Two dispatches back to back before their combines (reverse order): both halves of the buffer.
  bool back_to_back = false;
  SymmetricDispatch symmetric_dispatch = SymmetricDispatch::automatic;
  SymmetricCombine symmetric_combine = SymmetricCombine::automatic;
  CapacityChoice capacity = CapacityChoice::every_row;
  // symmetric: x and the expert outputs through the heap-resident tensors (Buffer::symmetric_input,
  // symmetric_expert_output), which also makes the pull combine possible with ranks as processes.
  bool heap_tensors = false;
  // CUDA: dispatch and combine captured once in CUDA graphs, replayed with every round's inputs.
  bool graph_replays = false;

  bool is_rank_major() const { return engine == SoakEngine::normal || engine == SoakEngine::internode; }
  Engine library_engine() const;
};

// The limits a case is drawn within; the backend sets them (a 2-core CI machine runs the CPU soak).
// NOTES: the reference runs on one host thread, for every rank; a case's rounds cost about this
// many elements each at most (a tenth of a second), so that a soak's time goes to the engines.
constexpr int64_t kMaxReferenceElements = int64_t{1} << 25;

struct DrawLimits {
  int64_t max_tokens = 48;
  int max_hidden = 1024;
  int max_experts_per_rank = 8;
  int max_round_trips = 4;
  int64_t max_reference_elements = kMaxReferenceElements;
};
DrawLimits limits_for(Backend backend);

// The case of `seed` on `backend`; deterministic in both.
SoakCase draw_case(uint64_t seed, Backend backend);

// One line naming everything that decides the case's bits, for the mismatch report.
std::string describe(const SoakCase& c);

// The seed of each round's inputs.
uint64_t round_seed(const SoakCase& c, int round);

// The seed of the `index`-th case of a run seeded `run_seed` (splitmix64: consecutive runs differ).
uint64_t case_seed(uint64_t run_seed, uint64_t index);

std::string hex(uint64_t value);

}  // namespace switchyard::soak
