#include "cuda/process_round_trips.hpp"

#include "cuda/cuda_round_trip.hpp"
#include "cuda/expert_major_round_trip.hpp"
#include "support/loopback_delays.hpp"
#include "support/test_seed.hpp"
#include "switchyard/errors.hpp"

namespace switchyard::testing {

namespace {

// Across nodes of several ranks each, the reference's node-grouped combine must differ from the
// one-node (flat) reduction on these inputs somewhere, or a bitwise match could not tell a
// hierarchical engine that reduces in the flat order from a correct one. Appends a failure when
// nothing differs. NOTES: with one rank per node the two orders are the same sum (each node's
// partial is one bf16 row, exact), so there is nothing to tell apart.
void require_node_grouping_visible(const workload::Shape& shape, const std::vector<workload::RankData>& data,
                                   const Expected& expected, std::vector<std::string>* failures) {
  workload::Shape one_node = shape;
  one_node.topology = Topology::single_node(shape.topology.num_ranks);
  const Expected flat = compute_expected(one_node, data, 1);
  std::string why;
  for (int rank = 0; rank < shape.topology.num_ranks; ++rank) {
    if (!workload::bitwise_equal(flat.combined[rank].combined_x, expected.combined[rank].combined_x, &why))
      return;
  }
  failures->push_back("the inputs of " + shape.describe() +
                      " give the same combine for the node-grouped and the one-node reduction on every rank, "
                      "so this run cannot check the order across nodes; pick another SWITCHYARD_TEST_SEED");
}

// The normal engine: two round trips on one buffer, then cached dispatches of the first one's routing,
// with topk_idx and without (DeepEP's; in place, the ring-free gather).
void run_normal(Buffer& buffer, const workload::Shape& shape, cudaStream_t stream,
                std::vector<std::string>* failures, bool heap_inputs) {
  auto data = workload::generate(shape, seed_for("process_ranks"));
  Expected expected = compute_expected(shape, data, 1);
  if (!shape.topology.is_single_node() && shape.topology.ranks_per_node > 1) {
    require_node_grouping_visible(shape, data, expected, failures);
  }
  DispatchHandle handle;
  for (int repeat = 0; repeat < 2; ++repeat) {
    DeviceRun run = run_on_device(buffer, shape, data[buffer.rank()], expected, 1, stream, nullptr,
                                  repeat == 0 ? &handle : nullptr, {}, {}, false, heap_inputs);
    compare_with_reference(run, shape, expected, buffer.rank(), failures);
  }
  for (const bool with_topk : {true, false}) {
    DeviceRun run = run_on_device(buffer, shape, data[buffer.rank()], expected, 1, stream, &handle, nullptr,
                                  {}, {}, false, heap_inputs, with_topk);
    compare_with_reference(run, shape, expected, buffer.rank(), failures, with_topk);
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
std::vector<ExpertMajorRound> expert_major_rounds(Engine engine, const workload::Shape& shape,
                                                  bool heap_tensors, DType receive_dtype) {
  ExpertMajorCall bf16;
  bf16.engine = engine;
  bf16.heap_tensors = heap_tensors;
  bf16.max_tokens_per_rank = shape.tokens_per_rank;  // every rank sends a full batch
  bf16.num_experts = shape.num_experts;
  ExpertMajorCall fp8 = bf16, hooks = bf16;
  fp8.fp8.use_fp8 = true;
  // The fp8 push into every receiver's heap receive area (Buffer::symmetric_receive), across processes.
  fp8.heap_receive = heap_tensors;
  hooks.hooks = true;
  if (heap_tensors && receive_dtype == DType::bf16) {
    // The bf16 push into every receiver's bf16 receive area, across processes.
    ExpertMajorCall pushed = bf16;
    pushed.heap_receive = true;
    return {{"bf16_receive", pushed, 2}};
  }
  std::vector<ExpertMajorRound> rounds = {{"bf16", bf16, 2}, {"fp8", fp8, 2}};
  if (engine == Engine::low_latency) rounds.push_back({"hooks", hooks, 1});
  return rounds;
}

void run_expert_major(Buffer& buffer, Engine engine, const workload::Shape& shape, cudaStream_t stream,
                      std::vector<std::string>* failures, bool heap_tensors, DType receive_dtype) {
  const int rank = buffer.rank();
  for (const ExpertMajorRound& round : expert_major_rounds(engine, shape, heap_tensors, receive_dtype)) {
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
    auto runs = run_expert_major_on_device(buffer, round.call, mine, ys, stream, failures);
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

void check_process_topology(Engine engine, int num_ranks, int ranks_per_node, const std::string& what) {
  if (ranks_per_node < 1 || ranks_per_node > num_ranks || num_ranks % ranks_per_node != 0) {
    throw InvalidArgument(what + ": expected a divisor of the ranks (" + std::to_string(num_ranks) +
                          "), got " + std::to_string(ranks_per_node));
  }
  if (engine == Engine::symmetric && ranks_per_node < num_ranks) {
    const std::string expected = "ranks per node == ranks = " + std::to_string(num_ranks);
    throw Unsupported(what + ": the symmetric engine needs every rank in one load/store domain (" + expected +
                      "), got " + std::to_string(ranks_per_node) +
                      " ranks per node; across nodes run --engine normal or low_latency");
  }
}

workload::Shape process_ranks_shape(int num_ranks, int ranks_per_node) {
  workload::Shape shape;
  shape.topology = Topology{num_ranks, ranks_per_node};
  shape.topology.validate();
  shape.tokens_per_rank = 128;
  shape.hidden = 2048;
  shape.topk = 8;
  shape.num_experts = 8 * num_ranks;
  shape.dtype = DType::bf16;
  return shape;
}

std::vector<ProcessPass> process_passes(const workload::Shape& shape) {
  if (shape.topology.is_single_node()) return {{false, "one node"}};
  return {{false, "loopback delays off"},
          {true, std::string("loopback delays ") + kLoopbackDelayMicroseconds + " us"}};
}

uint64_t process_loopback_seed(Engine engine) {
  return seed_for(std::string("process_ranks/loopback_delays/") + engine_name(engine));
}

BufferSizing process_ranks_sizing(Engine engine, const workload::Shape& shape, bool heap_tensors,
                                  DType receive_dtype) {
  if (engine == Engine::normal) {
    BufferSizing sizing = sizing_for(shape);
    if (heap_tensors) {  // the heap-resident inputs, read in place across processes (docs/normal-in-place.md)
      sizing.normal_heap_input_tokens = sizing.max_tokens_per_rank;
      sizing.normal_heap_combine_rows = shape.topology.num_ranks * sizing.max_tokens_per_rank;
    }
    return sizing;
  }
  BufferSizing sizing;
  sizing.max_tokens_per_rank = 1;  // the normal engine is not used
  sizing.hidden = shape.hidden;
  sizing.topk = shape.topk;
  sizing.num_experts = shape.num_experts;
  if (engine == Engine::low_latency)
    sizing.low_latency_max_tokens_per_rank = shape.tokens_per_rank;
  else
    sizing.symmetric_max_tokens_per_rank = shape.tokens_per_rank;
  if (heap_tensors) {
    sizing.symmetric_heap_input = true;
    sizing.symmetric_heap_output_rows_per_expert = shape.topology.num_ranks * shape.tokens_per_rank;
    sizing.symmetric_heap_receive_rows_per_expert = shape.topology.num_ranks * shape.tokens_per_rank;
    sizing.symmetric_heap_receive_dtype = receive_dtype;
  }
  return sizing;
}

void run_process_round_trips(Buffer& buffer, Engine engine, const workload::Shape& shape, cudaStream_t stream,
                             std::vector<std::string>* failures, bool heap_tensors, DType receive_dtype) {
  if (heap_tensors && engine == Engine::low_latency) {
    throw InvalidArgument(std::string("heap_tensors: expected the symmetric or normal engine, got ") +
                          engine_name(engine));
  }
  if (engine == Engine::normal)
    run_normal(buffer, shape, stream, failures, heap_tensors);
  else
    run_expert_major(buffer, engine, shape, stream, failures, heap_tensors, receive_dtype);
}

}  // namespace switchyard::testing
