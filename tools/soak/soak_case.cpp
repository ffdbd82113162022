#include "soak_case.hpp"

#include <algorithm>
#include <cstdio>
#include <sstream>
#include <stdexcept>

namespace switchyard::soak {

namespace {

// splitmix64: every bit of the seed reaches every bit of the result, so consecutive indices give
// unrelated cases.
uint64_t mix(uint64_t value) {
  value += 0x9e3779b97f4a7c15ull;
  value = (value ^ (value >> 30)) * 0xbf58476d1ce4e5b9ull;
  value = (value ^ (value >> 27)) * 0x94d049bb133111ebull;
  return value ^ (value >> 31);
}

// Draws from a seed with arithmetic of our own (not <random>'s distributions, whose results may
// differ between standard libraries), so that a printed seed replays on any build.
class Draw {
 public:
  explicit Draw(uint64_t seed) : state_(seed) {}
  uint64_t next() { return mix(state_++); }
  // Uniform in [lo, hi].
  int64_t between(int64_t lo, int64_t hi) {
    return lo + static_cast<int64_t>(next() % uint64_t(hi - lo + 1));
  }
  // True with probability numerator / denominator.
  bool chance(int numerator, int denominator) { return between(1, denominator) <= numerator; }
  template <typename T, size_t N>
  T pick(const T (&choices)[N]) {
    return choices[between(0, N - 1)];
  }

 private:
  uint64_t state_;
};

// A proper divisor of num_ranks (> 1): the ranks per node of a topology with several nodes.
int ranks_per_node_below(Draw& draw, int num_ranks) {
  std::vector<int> divisors;
  for (int d = 1; d < num_ranks; ++d) {
    if (num_ranks % d == 0) divisors.push_back(d);
  }
  return divisors[draw.between(0, static_cast<int64_t>(divisors.size()) - 1)];
}

void draw_topology(Draw& draw, SoakCase& c) {
  const int single[] = {1, 2, 3, 4, 8};
  const int several[] = {2, 3, 4, 8};
  const bool across_nodes =
      c.engine == SoakEngine::internode || (c.engine == SoakEngine::low_latency && draw.chance(1, 4));
  const int num_ranks = across_nodes ? draw.pick(several) : draw.pick(single);
  c.topology = across_nodes ? Topology{num_ranks, ranks_per_node_below(draw, num_ranks)}
                            : Topology::single_node(num_ranks);
}

// The most tokens per rank that keep the reference's work for one round within the limit: the
// rank-major engines move up to R * max * k rows of `hidden`; the expert-major outputs have
// E * R * max rows of `hidden` over all ranks (every row of every expert, used or not).
int64_t tokens_within_work(const SoakCase& c, bool rank_major, const DrawLimits& limits) {
  const int64_t rows_per_token =
      rank_major ? int64_t{c.topology.num_ranks} * c.topk : int64_t{c.num_experts} * c.topology.num_ranks;
  return std::max<int64_t>(1, limits.max_reference_elements / (rows_per_token * c.hidden));
}

void draw_shape(Draw& draw, const DrawLimits& limits, SoakCase& c) {
  const int num_ranks = c.topology.num_ranks;
  const int64_t hidden_blocks = limits.max_hidden / 128;
  c.hidden = 128 * static_cast<int>(draw.chance(1, 4)   ? 1
                                    : draw.chance(1, 2) ? draw.between(1, std::min<int64_t>(8, hidden_blocks))
                                                        : draw.between(1, hidden_blocks));
  c.topk = static_cast<int>(draw.between(1, 9));
  const int fewest_per_rank =
      (c.topk + num_ranks - 1) / num_ranks;  // random routing needs k distinct experts
  c.num_experts = num_ranks * static_cast<int>(draw.between(
                                  fewest_per_rank, std::max(fewest_per_rank, limits.max_experts_per_rank)));
  const int64_t most_tokens = std::min(limits.max_tokens, tokens_within_work(c, c.is_rank_major(), limits));
  c.max_tokens =
      draw.chance(1, 6) ? draw.between(1, std::min<int64_t>(4, most_tokens)) : draw.between(1, most_tokens);
  c.tokens.assign(num_ranks, 0);
  if (!draw.chance(1, 10)) {  // else every rank has 0 tokens
    for (int64_t& tokens : c.tokens) tokens = draw.chance(1, 5) ? 0 : draw.between(0, c.max_tokens);
    c.tokens[draw.between(0, num_ranks - 1)] = c.max_tokens;  // the capacity exactly full
  }
  const workload::Routing routings[] = {workload::Routing::random,    workload::Routing::random,
                                        workload::Routing::random,    workload::Routing::random,
                                        workload::Routing::skewed,    workload::Routing::all_invalid,
                                        workload::Routing::one_expert};
  c.routing = draw.pick(routings);
  c.round_trips = static_cast<int>(draw.between(1, limits.max_round_trips));
}

void draw_rank_major(Draw& draw, SoakCase& c) {
  c.dtype = draw.chance(1, 2) ? DType::fp8_e4m3 : DType::bf16;
  c.with_weights = !draw.chance(1, 5);
  const int alignments[] = {1, 1, 2, 4, 8};
  c.expert_alignment = draw.pick(alignments);
  c.cached_replay = draw.chance(1, 4);
  c.cached_with_topk = draw.chance(1, 2);
  if (c.backend == Backend::cpu) {  // the CUDA round trip (cuda/cuda_round_trip.hpp) has neither option
    c.pass_layout = !draw.chance(1, 4);
    c.preallocate_outputs = !draw.chance(1, 4);
    c.worst_case = draw.chance(1, 5) && c.max_tokens > 0;
  }
  if (draw.chance(1, 2)) {  // small rings, smaller than a rank's traffic: they wrap under flow control
    c.config.num_channels = static_cast<int>(draw.between(1, 4));
    c.config.ring_slots = static_cast<int>(draw.between(1, 8));
    c.config.chunk_tokens = static_cast<int>(draw.between(1, c.config.ring_slots));
  }
  c.loopback_delays = c.engine == SoakEngine::internode && draw.chance(1, 4);
}

void draw_expert_major(Draw& draw, SoakCase& c) {
  const int cast = static_cast<int>(draw.between(0, 4));
  // use_ue8m0 leaves only the dispatch to check (the synthetic expert needs f32 scales); the CUDA
  // round trip refuses it.
  const bool ue8m0_allowed = c.backend == Backend::cpu;
  if (cast == 1) c.fp8 = {true, false, false};
  if (cast == 2) c.fp8 = {true, true, false};
  if (cast == 3 && ue8m0_allowed) c.fp8 = {true, true, true};
  c.back_to_back = draw.chance(1, 3);
  if (c.engine == SoakEngine::low_latency) {
    c.hooks = draw.chance(1, 2);
  } else {
    const bool in_place =
        c.ranks_as == RankModel::threads;  // zero_copy and pull follow peers' plain pointers
    const SymmetricDispatch sources[] = {SymmetricDispatch::automatic, SymmetricDispatch::publish,
                                         SymmetricDispatch::zero_copy};
    const SymmetricCombine paths[] = {SymmetricCombine::automatic, SymmetricCombine::push,
                                      SymmetricCombine::pull};
    c.symmetric_dispatch = sources[draw.between(0, in_place ? 2 : 1)];
    c.symmetric_combine = paths[draw.between(0, in_place ? 2 : 1)];
    // The CUDA round trip (cuda/expert_major_round_trip.hpp) has no capacity.
    if (c.backend == Backend::cpu && draw.chance(1, 3)) c.capacity = CapacityChoice::exactly_full;
  }
  c.graph_replays = c.backend == Backend::cuda && !c.hooks && draw.chance(1, 3);
}

const char* routing_name(workload::Routing routing) {
  switch (routing) {
    case workload::Routing::random:
      return "random";
    case workload::Routing::all_invalid:
      return "all -1";
    case workload::Routing::one_expert:
      return "one expert";
    case workload::Routing::skewed:
      return "skewed";
  }
  return "?";
}

}  // namespace

const char* soak_engine_name(SoakEngine engine) {
  switch (engine) {
    case SoakEngine::normal:
      return "normal";
    case SoakEngine::internode:
      return "internode";
    case SoakEngine::low_latency:
      return "low_latency";
    case SoakEngine::symmetric:
      return "symmetric";
  }
  return "?";
}

SoakEngine soak_engine_from_name(const std::string& name) {
  for (SoakEngine engine : kAllSoakEngines) {
    if (name == soak_engine_name(engine)) return engine;
  }
  throw std::invalid_argument("expected normal, internode, low_latency or symmetric, got '" + name + "'");
}

const char* rank_model_name(RankModel model) {
  return model == RankModel::threads ? "threads" : "processes";
}

Engine SoakCase::library_engine() const {
  if (is_rank_major()) return Engine::normal;
  return engine == SoakEngine::low_latency ? Engine::low_latency : Engine::symmetric;
}

DrawLimits limits_for(Backend backend) {
  // NOTES: on the CPU a case costs about its bytes times R threads on 2 cores; these keep the CI run's
  // cases in the milliseconds. On the GPU a case is dominated by buffer setup, so shapes reach the
  // DeepSeek-V3 hidden size and decode batch.
  if (backend == Backend::cuda) return DrawLimits{256, 7168, 32, 8, kMaxReferenceElements};
  return DrawLimits{};
}

SoakCase draw_case(uint64_t seed, Backend backend) {
  Draw draw(seed);
  SoakCase c;
  c.seed = seed;
  c.backend = backend;
  c.engine = draw.pick(kAllSoakEngines);
  c.config.timeout_seconds = kCallTimeoutSeconds;
  // One process per rank is a CPU mode here (CUDA processes need MPS and exec'd children).
  c.ranks_as = backend == Backend::cpu && draw.chance(1, 4) ? RankModel::processes : RankModel::threads;
  draw_topology(draw, c);
  draw_shape(draw, limits_for(backend), c);
  if (c.is_rank_major()) {
    draw_rank_major(draw, c);
  } else {
    draw_expert_major(draw, c);
  }
  // Drawn last, so that every other field of a seed is what it was before the heap tensors existed.
  if (c.engine == SoakEngine::symmetric && draw.chance(1, 3)) {
    c.heap_tensors = true;
    c.graph_replays = false;  // the captured round trip has device tensors of its own
    if (c.ranks_as == RankModel::processes && draw.chance(1, 2)) c.symmetric_combine = SymmetricCombine::pull;
  }
  return c;
}

std::string describe(const SoakCase& c) {
  std::ostringstream out;
  out << soak_engine_name(c.engine) << " on " << backend_name(c.backend) << ", ranks as "
      << rank_model_name(c.ranks_as) << ", " << c.topology.to_string() << ", tokens [";
  for (size_t rank = 0; rank < c.tokens.size(); ++rank) out << (rank ? "," : "") << c.tokens[rank];
  out << "] max " << c.max_tokens << ", hidden " << c.hidden << ", k " << c.topk << ", experts "
      << c.num_experts << ", routing " << routing_name(c.routing) << ", round trips " << c.round_trips;
  if (c.is_rank_major()) {
    out << ", " << dtype_name(c.dtype) << (c.with_weights ? ", weights" : ", no weights") << ", alignment "
        << c.expert_alignment << (c.pass_layout ? "" : ", no layout")
        << (c.preallocate_outputs ? "" : ", allocated") << (c.worst_case ? ", worst case" : "")
        << (c.cached_replay ? (c.cached_with_topk ? ", cached replay" : ", cached replay without topk") : "")
        << ", config {" << c.config.to_string() << "}" << (c.loopback_delays ? ", loopback delays" : "");
  } else {
    out << (c.fp8.use_fp8 ? ", fp8" : ", bf16") << (c.fp8.round_scale ? " round_scale" : "")
        << (c.fp8.use_ue8m0 ? " ue8m0" : "") << (c.hooks ? ", hooks" : "")
        << (c.back_to_back ? ", back to back" : "");
    if (c.engine == SoakEngine::symmetric) {
      out << ", dispatch " << symmetric_dispatch_name(c.symmetric_dispatch) << ", combine "
          << symmetric_combine_name(c.symmetric_combine)
          << (c.capacity == CapacityChoice::exactly_full ? ", capacity exactly full" : "")
          << (c.heap_tensors ? ", heap tensors" : "");
    }
    out << (c.graph_replays ? ", graph replays" : "");
  }
  return out.str();
}

uint64_t round_seed(const SoakCase& c, int round) {
  return mix(c.seed ^ (0x5eed0000ull + uint64_t(round)));
}

uint64_t case_seed(uint64_t run_seed, uint64_t index) {
  return mix(mix(run_seed) + index);
}

std::string hex(uint64_t value) {
  char text[24];
  std::snprintf(text, sizeof(text), "0x%016llx", static_cast<unsigned long long>(value));
  return text;
}

}  // namespace switchyard::soak
