#include "cuda/process_round_trips.hpp"

#include "cuda/cuda_round_trip.hpp"
#include "cuda/expert_major_round_trip.hpp"
#include "support/test_seed.hpp"
#include "switchyard/errors.hpp"

namespace switchyard::testing {

namespace {

// The normal engine: two round trips on one buffer.
void run_normal(Buffer& buffer, const workload::Shape& shape, cudaStream_t stream,
                std::vector<std::string>* failures) {
  auto data = workload::generate(shape, seed_for("process_ranks"));
  Expected expected = compute_expected(shape, data, 1);
  for (int repeat = 0; repeat < 2; ++repeat) {
    DeviceRun run = run_on_device(buffer, shape, data[buffer.rank()], expected, 1, stream);
    compare_with_reference(run, shape, expected, buffer.rank(), failures);
  }
}

// An expert-major round: `calls` dispatches back to back, then their combines.
struct ExpertMajorRound {
  std::string name;
  ExpertMajorCall call;
  int calls;
};

// Two calls in flight cover both halves of the double buffer (and, for symmetric, both barrier
// phases); an fp8 pair; and for low_latency one call split by its hooks (symmetric has no split).
std::vector<ExpertMajorRound> expert_major_rounds(Engine engine, const workload::Shape& shape) {
  ExpertMajorCall bf16;
  bf16.engine = engine;
  bf16.max_tokens_per_rank = shape.tokens_per_rank;  // every rank sends a full batch
  bf16.num_experts = shape.num_experts;
  ExpertMajorCall fp8 = bf16, hooks = bf16;
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
    std::vector<ExpertMajorExpected> expected;
    for (int call = 0; call < round.calls; ++call) {
      const std::string name =
          std::string("process_ranks/") + engine_name(engine) + "/" + round.name + "/" + std::to_string(call);
      data.push_back(workload::generate(shape, seed_for(name)));
      expected.push_back(expert_major_expected(round.call, shape.topology, data.back()));
    }
    std::vector<const workload::RankData*> mine;
    std::vector<TensorView> ys;
    for (int call = 0; call < round.calls; ++call) {
      mine.push_back(&data[call][rank]);
      ys.push_back(expected[call].ys[rank]);
    }
    auto runs = run_expert_major_on_device(buffer, round.call, mine, ys, stream);
    for (int call = 0; call < round.calls; ++call) {
      const std::string label =
          std::string(engine_name(engine)) + " " + round.name + " call " + std::to_string(call);
      compare_expert_major(runs[call], expected[call], rank, label, failures);
    }
  }
}

}  // namespace

Engine parse_process_engine(const std::string& text, const std::string& what) {
  for (Engine engine : {Engine::normal, Engine::low_latency, Engine::symmetric}) {
    if (text == engine_name(engine)) return engine;
  }
  throw InvalidArgument(what + ": expected normal, low_latency or symmetric, got '" + text + "'");
}

workload::Shape process_ranks_shape(int num_ranks) {
  workload::Shape shape;
  shape.topology = Topology::single_node(num_ranks);
  shape.tokens_per_rank = 128;
  shape.hidden = 2048;
  shape.topk = 8;
  shape.num_experts = 8 * num_ranks;
  shape.dtype = DType::bf16;
  return shape;
}

BufferSizing process_ranks_sizing(Engine engine, const workload::Shape& shape) {
  if (engine == Engine::normal) return sizing_for(shape);
  BufferSizing sizing;
  sizing.max_tokens_per_rank = 1;  // the normal engine is not used
  sizing.hidden = shape.hidden;
  sizing.topk = shape.topk;
  sizing.num_experts = shape.num_experts;
  if (engine == Engine::low_latency)
    sizing.low_latency_max_tokens_per_rank = shape.tokens_per_rank;
  else
    sizing.symmetric_max_tokens_per_rank = shape.tokens_per_rank;
  return sizing;
}

void run_process_round_trips(Buffer& buffer, Engine engine, const workload::Shape& shape, cudaStream_t stream,
                             std::vector<std::string>* failures) {
  if (engine == Engine::normal)
    run_normal(buffer, shape, stream, failures);
  else
    run_expert_major(buffer, engine, shape, stream, failures);
}

}  // namespace switchyard::testing
