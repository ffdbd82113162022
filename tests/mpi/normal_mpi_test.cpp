// The CPU `normal` engine with one process per rank (HeapSharing::processes), run under mpirun, within
// one node and across nodes (the hierarchical engine).
// Every process generates the same inputs for all ranks from the shared seed, computes the reference
// locally and checks its own rank's outputs bit for bit. Exits non-zero on any mismatch.
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "mpi_allgather.hpp"
#include "mpi_case_verdict.hpp"
#include "support/normal_round_trip.hpp"
#include "support/test_seed.hpp"
#include "switchyard/buffer.hpp"
#include "workload/workload.hpp"

namespace {

using namespace switchyard;

// NOTES: a lost peer should fail the run long before ctest's TIMEOUT, yet 8 processes on 2 cores
// must never trip it.
constexpr double kTimeoutSeconds = 30.0;

struct MpiCase {
  std::string name;
  workload::Shape shape;
  Config config;
  int expert_alignment = 1;
  int64_t num_worst_tokens = 0;
  bool replay = false;  // also a cached dispatch and a repeated call
};

Config ring_config(int num_channels, int ring_slots, int chunk_tokens) {
  Config config;
  config.num_channels = num_channels;
  config.ring_slots = ring_slots;
  config.chunk_tokens = chunk_tokens;
  config.timeout_seconds = kTimeoutSeconds;
  return config;
}

std::vector<MpiCase> cases(int num_ranks) {
  // Fewer tokens per rank as ranks grow: 8 processes share 2 cores in CI.
  const int64_t tokens = std::max<int64_t>(3, 32 / num_ranks);
  std::vector<MpiCase> result;

  MpiCase bf16;
  bf16.name = "bf16_random";
  bf16.shape.topology = Topology::single_node(num_ranks);
  bf16.shape.tokens_per_rank = tokens;
  bf16.shape.hidden = 512;
  bf16.shape.topk = 4;
  bf16.shape.num_experts = 4 * num_ranks;
  bf16.config.timeout_seconds = kTimeoutSeconds;  // the library's defaults otherwise
  bf16.replay = true;
  result.push_back(bf16);

  MpiCase fp8 = bf16;
  fp8.name = "fp8_wrapping_rings_alignment_4";
  fp8.shape.dtype = DType::fp8_e4m3;
  fp8.shape.hidden = 384;
  fp8.shape.topk = std::min(3, 2 * num_ranks);
  fp8.shape.num_experts = 2 * num_ranks;
  fp8.config = ring_config(2, 2, 1);
  fp8.expert_alignment = 4;
  fp8.replay = false;
  result.push_back(fp8);

  MpiCase uneven = bf16;
  uneven.name = "uneven_tokens_rank0_empty_no_weights";
  uneven.shape.with_weights = false;
  uneven.shape.tokens_per_rank_list.clear();
  for (int rank = 0; rank < num_ranks; ++rank)
    uneven.shape.tokens_per_rank_list.push_back(rank == 0 ? 0 : rank % 4 + 1);
  uneven.replay = false;
  result.push_back(uneven);

  MpiCase worst = bf16;
  worst.name = "worst_case_skewed";
  worst.shape.routing = workload::Routing::skewed;
  worst.shape.hidden = 256;
  worst.num_worst_tokens = num_ranks * tokens;
  worst.replay = true;
  result.push_back(worst);

  // Across nodes (the hierarchical engine, its transport the loopback over the processes' mapped
  // heaps): two nodes wherever the ranks split evenly, and one rank per node at 4 and 8 ranks.
  if (num_ranks >= 2 && num_ranks % 2 == 0) {
    MpiCase two_nodes = bf16;
    two_nodes.name = "two_nodes_bf16";
    two_nodes.shape.topology = Topology{num_ranks, num_ranks / 2};
    result.push_back(two_nodes);

    MpiCase wrapping = two_nodes;
    wrapping.name = "two_nodes_fp8_wrapping_rings_alignment_4";
    wrapping.shape.dtype = DType::fp8_e4m3;
    wrapping.shape.hidden = 256;
    wrapping.config = ring_config(2, 4, 2);
    wrapping.expert_alignment = 4;
    wrapping.replay = false;
    result.push_back(wrapping);
  }
  if (num_ranks == 4 || num_ranks == 8) {
    MpiCase rank_per_node = bf16;
    rank_per_node.name = "one_rank_per_node_skewed_worst_case";
    rank_per_node.shape.topology = Topology{num_ranks, 1};
    rank_per_node.shape.routing = workload::Routing::skewed;
    rank_per_node.shape.hidden = 256;
    rank_per_node.num_worst_tokens = num_ranks * tokens;
    result.push_back(rank_per_node);
  }
  return result;
}

// Returns the mismatches of this rank's outputs.
std::vector<std::string> run_case(const MpiCase& c, int rank, uint64_t seed) {
  const std::vector<workload::RankData> data = workload::generate(c.shape, seed);
  const testing::Expected expected = testing::compute_expected(c.shape, data, c.expert_alignment);

  BufferOptions options;
  options.topology = c.shape.topology;
  options.rank = rank;
  options.backend = Backend::cpu;
  options.sharing = HeapSharing::processes;
  options.config = c.config;
  options.sizing = testing::sizing_for(c.shape);
  Buffer buffer(options);
  buffer.connect(testing::mpi_allgather(buffer.local_handle(), MPI_COMM_WORLD));

  testing::RoundTripOptions round_trip;
  round_trip.expert_alignment = c.expert_alignment;
  round_trip.num_worst_tokens = c.num_worst_tokens;
  std::vector<std::string> failures;
  const testing::RankRun first = testing::run_round_trip(buffer, c.shape, data[rank], expected, round_trip);
  testing::check_layout(first, expected, rank, &failures);
  testing::check_dispatch(first, c.shape, expected, rank, round_trip, true, &failures);
  testing::check_combine(first, c.shape, expected, rank, c.shape.with_weights, &failures);
  if (c.replay) {
    const testing::RankRun cached =
        testing::run_cached_round_trip(buffer, c.shape, data[rank], expected, round_trip, first, true);
    testing::check_dispatch(cached, c.shape, expected, rank, round_trip, true, &failures);
    testing::check_combine(cached, c.shape, expected, rank, c.shape.with_weights, &failures);
    const testing::RankRun again = testing::run_round_trip(buffer, c.shape, data[rank], expected, round_trip);
    testing::check_identical(again, first,
                             static_cast<int64_t>(expected.dispatched[rank].recv_src_rank.size()), &failures);
  }
  // No process unmaps its heap while a peer may still read it.
  MPI_Barrier(MPI_COMM_WORLD);
  return failures;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, num_ranks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &num_ranks);

  int passed = 0, failed = 0;
  for (const MpiCase& c : cases(num_ranks)) {
    const uint64_t seed = switchyard::testing::seed_for(c.name);
    const std::string context = c.name + " (seed=" + switchyard::testing::hex_seed(seed) + ", " +
                                c.shape.describe() + ", config={" + c.config.to_string() +
                                "}, expert_alignment=" + std::to_string(c.expert_alignment) +
                                ", num_worst_tokens=" + std::to_string(c.num_worst_tokens) + ")";
    const bool ok =
        switchyard::testing::mpi_case_passed(c.name, context, [&] { return run_case(c, rank, seed); });
    (ok ? passed : failed) += 1;
  }
  if (rank == 0) std::printf("%d passed, %d failed\n", passed, failed);
  MPI_Finalize();
  return failed == 0 ? 0 : 1;
}
