// The CPU `low_latency` and `symmetric` engines with one process per rank (HeapSharing::processes),
// run under mpirun: low_latency on one node (bf16, fp8 with round_scale and with UE8M0, hooks, two
// calls in flight) and across nodes (its loopback transport between the processes' mapped heaps),
// symmetric on one node (bf16, fp8, expert_capacity exactly full and overflowing).
// Every process draws the same inputs for all ranks from the shared seed, computes the reference
// locally and checks its own rank's outputs bit for bit (DESIGN.md, "low_latency and symmetric
// interface: expert-major"); the verdict is reduced over all ranks. Exits non-zero on any mismatch.
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "mpi_allgather.hpp"
#include "mpi_case_verdict.hpp"
#include "support/expert_major_cases.hpp"
#include "support/expert_major_nodes.hpp"
#include "support/loopback_delays.hpp"
#include "support/test_seed.hpp"
#include "switchyard/buffer.hpp"
#include "switchyard/errors.hpp"
#include "workload/workload.hpp"

namespace {

using namespace switchyard;
using namespace switchyard::testing::expert_major;

// NOTES: a lost peer should fail the run long before ctest's TIMEOUT, yet 8 processes on 2 cores
// must never trip it.
constexpr double kTimeoutSeconds = 30.0;

enum class Kind {
  round_trip,       // one dispatch and its combine (symmetric: also against low_latency on the same buffer)
  hooks_in_flight,  // low_latency: hooks, and two calls in flight (both halves of the double buffer)
  capacity,         // symmetric: expert_capacity exactly full, larger, and 1 (support's capacity_runs)
  overflow,         // symmetric: an expert past expert_capacity raises CapacityError on every rank
};

struct MpiCase {
  std::string name;
  Engine engine = Engine::low_latency;
  Kind kind = Kind::round_trip;
  Case c;
  int ranks_per_node = 0;  // 0: one node
  bool delays = false;     // the loopback transport's delays and reordering (across nodes only)

  Topology topology() const { return Topology{c.ranks, ranks_per_node > 0 ? ranks_per_node : c.ranks}; }
};

MpiCase mpi_case(std::string name, Engine engine, Kind kind, Case c, int ranks_per_node = 0) {
  MpiCase m;
  m.name = name;
  c.name = std::move(name);
  m.engine = engine;
  m.kind = kind;
  m.c = std::move(c);
  m.ranks_per_node = ranks_per_node;
  return m;
}

// Tokens per rank: up to `max`, one fewer on every third rank, none on rank 2 (when `with_empty`),
// so that ranks send unequal counts.
std::vector<int64_t> tokens_for(int num_ranks, int64_t max, bool with_empty) {
  std::vector<int64_t> tokens;
  for (int rank = 0; rank < num_ranks; ++rank) {
    tokens.push_back(with_empty && rank == 2 ? 0 : max - (rank % 3 == 1 ? 1 : 0));
  }
  return tokens;
}

std::vector<MpiCase> cases(int R) {
  // Fewer tokens per rank as ranks grow: 8 processes share 2 cores in CI.
  const int64_t max = R <= 2 ? 8 : R <= 4 ? 6 : 4;
  const std::vector<int64_t> uneven = tokens_for(R, max, true);
  const std::vector<int64_t> full = tokens_for(R, max, false);
  // Two local experts per rank, and at least 6 in all so that k = 4 leaves a choice at 1 and 2 ranks.
  const int E = R * std::max(2, (6 + R - 1) / R);
  const Engine ll = Engine::low_latency;
  const Engine sym = Engine::symmetric;
  std::vector<MpiCase> result;

  // low_latency, one node.
  result.push_back(mpi_case("low_latency_bf16", ll, Kind::round_trip, make("", R, uneven, max, 3, E)));
  result.push_back(mpi_case("low_latency_fp8_round_scale", ll, Kind::round_trip,
                            with_fp8(make("", R, full, max, 4, E, 384), true, false)));
  // 640 channels: 5 UE8M0 scales, padded to 2 words.
  result.push_back(mpi_case("low_latency_fp8_ue8m0_padded", ll, Kind::round_trip,
                            with_fp8(make("", R, uneven, max, 2, E, 640), false, true)));
  result.push_back(mpi_case("low_latency_hooks_two_in_flight", ll, Kind::hooks_in_flight,
                            make("", R, uneven, max, 3, E, 128)));

  // low_latency across nodes: two nodes wherever the ranks split evenly, one rank per node at 4 and 8.
  if (R >= 2 && R % 2 == 0) {
    result.push_back(
        mpi_case("low_latency_two_nodes_bf16", ll, Kind::round_trip, make("", R, uneven, max, 3, E), R / 2));
    result.push_back(mpi_case("low_latency_two_nodes_fp8", ll, Kind::round_trip,
                              with_fp8(make("", R, full, max, 4, E, 256), false, false), R / 2));
    MpiCase delayed = mpi_case("low_latency_two_nodes_hooks_two_in_flight_delayed", ll, Kind::hooks_in_flight,
                               make("", R, uneven, max, 3, E, 128), R / 2);
    delayed.delays = true;
    result.push_back(delayed);
  }
  if (R == 4 || R == 8) {
    result.push_back(
        mpi_case("low_latency_rank_per_node_bf16", ll, Kind::round_trip, make("", R, uneven, max, 4, E), 1));
    // Every token of every rank on one expert: its rows fill R * max exactly, R - 1 sources remote.
    MpiCase one_expert = mpi_case(
        "low_latency_rank_per_node_fp8_one_expert_delayed", ll, Kind::round_trip,
        with_routing(with_fp8(make("", R, full, max, 2, E, 128), true, false), workload::Routing::one_expert),
        1);
    one_expert.delays = true;
    result.push_back(one_expert);
  }

  // symmetric, one node.
  result.push_back(mpi_case("symmetric_bf16", sym, Kind::round_trip, make("", R, uneven, max, 3, E)));
  result.push_back(mpi_case("symmetric_fp8", sym, Kind::round_trip,
                            with_fp8(make("", R, full, max, 4, E, 256), false, false)));
  result.push_back(mpi_case("symmetric_capacity", sym, Kind::capacity,
                            with_routing(make("", R, full, max, 3, E, 128), workload::Routing::skewed)));
  result.push_back(mpi_case("symmetric_overflow_skewed", sym, Kind::overflow,
                            with_routing(make("", R, full, max, 3, E, 128), workload::Routing::skewed)));
  result.push_back(mpi_case("symmetric_overflow_fp8", sym, Kind::overflow,
                            with_fp8(make("", R, full, max, 4, E, 256), false, false)));
  return result;
}

// ---- one rank's part ------------------------------------------------------------------------------

// This process's connected buffer for `c` on `topology`; the handles go through MPI.
std::unique_ptr<Buffer> connected_buffer(const Case& c, const Topology& topology, Engine engine, int rank) {
  // symmetric cases also run the low_latency engine on the same inputs, as the CPU suite does.
  BufferOptions options = buffer_options(
      c, rank, engine == Engine::symmetric ? Regions::both : Regions::low_latency, kTimeoutSeconds);
  options.topology = topology;
  options.backend = Backend::cpu;
  options.sharing = HeapSharing::processes;
  auto buffer = std::make_unique<Buffer>(options);
  buffer->connect(switchyard::testing::mpi_allgather(buffer->local_handle(), MPI_COMM_WORLD));
  return buffer;
}

void round_trip(const MpiCase& m, const Expected& expected, Buffer& buffer, int rank, Failures& failures) {
  const Case& c = m.c;
  const workload::RankData& data = expected.data[rank];
  // Preallocated, poisoned outputs on even ranks; the library allocates on odd ones.
  const PoisonedOutputs out = rank % 2 == 0 ? poisoned_outputs(c, data.x.size(0)) : PoisonedOutputs();
  LowLatencyDispatchArgs args = dispatch_args(c, data);
  out.attach(args);
  const LowLatencyDispatchResult dispatched = dispatch_with(m.engine, buffer, args);
  check_dispatch(dispatched, expected.dispatched[rank], "the reference", rank, failures);
  if (rank % 2 == 0 && dispatched.recv_x.data() != out.recv_x.data())
    failures.add(rank, "out_recv_x was not used");
  LowLatencyDispatchResult low_latency;
  if (m.engine == Engine::symmetric) {
    low_latency = buffer.low_latency_dispatch(dispatch_args(c, data));
    check_dispatch(dispatched, low_latency, "low_latency", rank, failures);
  }
  if (c.fp8.use_ue8m0) return;  // the synthetic expert needs f32 scales

  const Tensor y = expert_outputs(dispatched.recv_x, dispatched.recv_x_scales, rank);
  LowLatencyCombineArgs cargs = combine_args(data, dispatched.handle, y);
  out.attach(cargs);
  const LowLatencyCombineResult combined = combine_with(m.engine, buffer, cargs);
  compare(combined.combined_x, expected.combined[rank], "combined_x vs the reference", rank, failures);
  if (m.engine == Engine::symmetric) {
    const LowLatencyCombineResult combined_low_latency =
        buffer.low_latency_combine(combine_args(data, low_latency.handle, y));
    compare(combined.combined_x, combined_low_latency.combined_x, "combined_x vs low_latency", rank,
            failures);
  }
}

// Two rounds of: a dispatch through its hook, a second dispatch while the first is not yet combined
// (the other half of the double buffer), the second's combine, then the first's through its hook.
// No synchronisation between ranks; the hooks run after a rank-dependent pause so that the peers'
// sends land while this rank is busy.
void hooks_in_flight(const MpiCase& m, const Expected& first, const Expected& second, Buffer& buffer,
                     int rank, Failures& failures) {
  const Case& c = m.c;
  for (int round = 0; round < 2; ++round) {
    const std::string which = " (round " + std::to_string(round) + ")";
    LowLatencyDispatchArgs hooked = dispatch_args(c, first.data[rank]);
    hooked.return_recv_hook = true;
    LowLatencyDispatchResult a = buffer.low_latency_dispatch(hooked);
    if (!a.hook) {
      failures.add(rank, "no dispatch hook" + which);
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(rank % 3));
    a.hook();
    const LowLatencyDispatchResult b = buffer.low_latency_dispatch(dispatch_args(c, second.data[rank]));
    check_dispatch(a, first.dispatched[rank], "the reference (first)" + which, rank, failures);
    check_dispatch(b, second.dispatched[rank], "the reference (second)" + which, rank, failures);
    const Tensor ya = expert_outputs(a.recv_x, {}, rank);
    const Tensor yb = expert_outputs(b.recv_x, {}, rank);
    const LowLatencyCombineResult combined_b =
        buffer.low_latency_combine(combine_args(second.data[rank], b.handle, yb));
    LowLatencyCombineArgs hooked_combine = combine_args(first.data[rank], a.handle, ya);
    hooked_combine.return_recv_hook = true;
    LowLatencyCombineResult combined_a = buffer.low_latency_combine(hooked_combine);
    if (!combined_a.hook) {
      failures.add(rank, "no combine hook" + which);
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2 - rank % 3));
    combined_a.hook();
    compare(combined_a.combined_x, first.combined[rank], "combined_x (first)" + which, rank, failures);
    compare(combined_b.combined_x, second.combined[rank], "combined_x (second)" + which, rank, failures);
  }
}

// One capacity that fits: outputs [L, C, ...] are the reference's with that capacity, nothing is
// written past the last expert's C rows, and the combine matches.
void capacity_fits(const Case& c, const Expected& expected, Buffer& buffer, int rank, Failures& failures) {
  const workload::RankData& data = expected.data[rank];
  // Preallocated, poisoned outputs with guard rows on even ranks; the library allocates on odd ones.
  const GuardedOutputs guarded = guarded_outputs(c, data.x.size(0));
  LowLatencyDispatchArgs args = dispatch_args(c, data);
  if (rank % 2 == 0) guarded.out.attach(args);
  const LowLatencyDispatchResult dispatched = buffer.symmetric_dispatch(args);
  if (dispatched.recv_x.size(1) != rows_per_expert(c)) {
    failures.add(rank, "recv_x: expected " + std::to_string(rows_per_expert(c)) + " rows per expert, got " +
                           dispatched.recv_x.view().describe());
    return;
  }
  check_dispatch(dispatched, expected.dispatched[rank], "the reference", rank, failures);
  for (const TensorView& guard : guarded.guards()) {
    if (!all_poison(guard)) failures.add(rank, "a guard row past the last expert's capacity was written");
  }
  const Tensor y = expert_outputs(dispatched.recv_x, dispatched.recv_x_scales, rank);
  const LowLatencyCombineResult combined = buffer.symmetric_combine(combine_args(data, dispatched.handle, y));
  compare(combined.combined_x, expected.combined[rank], "combined_x vs the reference", rank, failures);
}

// Why `message` is not the CapacityError for the first expert of `data` past c.capacity (it names
// the argument, the expert and its rank, the rows and the capacity); empty when it is.
std::string capacity_message_problem(const std::string& message, const Case& c,
                                     const std::vector<workload::RankData>& data) {
  const int64_t rows = first_overflow(data, c.num_experts, c.capacity).second;
  for (const std::string& part :
       {overflow_names(c, data), "got " + std::to_string(rows), "at most " + std::to_string(c.capacity)}) {
    if (message.rfind("expert_capacity:", 0) != 0 || message.find(part) == std::string::npos)
      return "expected a CapacityError starting with \"expert_capacity:\" and naming \"" + part +
             "\", got: " + message;
  }
  return "";
}

// An expert past its capacity: this rank raises the CapacityError that every rank raises, the rows
// that fit are the reference's, nothing is written past the capacity, and the buffer stays usable.
void overflow(const Case& c, const Expected& expected, const Expected& unlimited, Buffer& buffer, int rank,
              Failures& failures) {
  const workload::RankData& data = expected.data[rank];
  const GuardedOutputs guarded = guarded_outputs(c, data.x.size(0));
  LowLatencyDispatchArgs args = dispatch_args(c, data);
  guarded.out.attach(args);
  const std::string message = refused<CapacityError>([&] { buffer.symmetric_dispatch(args); });
  const std::string problem = capacity_message_problem(message, c, expected.data);
  if (!problem.empty()) failures.add(rank, problem);
  // Every rank raises the same error: compare with rank 0's.
  const std::vector<Bytes> messages =
      switchyard::testing::mpi_allgather(Bytes(message.begin(), message.end()), MPI_COMM_WORLD);
  if (std::string(messages[0].begin(), messages[0].end()) != message)
    failures.add(rank, "CapacityError differs from rank 0's: \"" + message + "\" vs \"" +
                           std::string(messages[0].begin(), messages[0].end()) + "\"");
  check_dispatch(guarded.out, expected.dispatched[rank], "the reference", rank, failures);
  for (const TensorView& guard : guarded.guards()) {
    if (!all_poison(guard)) failures.add(rank, "a guard row past the last expert's capacity was written");
  }
  // Still usable: the same inputs without a capacity match the reference, combine included.
  const LowLatencyDispatchResult again = buffer.symmetric_dispatch(dispatch_args(with_capacity(c, 0), data));
  check_dispatch(again, unlimited.dispatched[rank], "the reference (after the overflow)", rank, failures);
  const LowLatencyCombineResult combined =
      buffer.symmetric_combine(combine_args(data, again.handle, unlimited.ys[rank]));
  compare(combined.combined_x, unlimited.combined[rank], "combined_x (after the overflow)", rank, failures);
}

// Runs `body` on a connected buffer of this rank, then waits for every rank: no process unmaps its
// heap while a peer may still write to it.
template <typename Body>
void on_buffer(const Case& c, const Topology& topology, Engine engine, int rank, Body&& body) {
  {
    const std::unique_ptr<Buffer> buffer = connected_buffer(c, topology, engine, rank);
    body(*buffer);
    MPI_Barrier(MPI_COMM_WORLD);
  }
}

// Returns the mismatches of this rank's outputs.
std::vector<std::string> run_case(const MpiCase& m, int rank, uint64_t seed) {
  const Case& c = m.c;
  const Topology topology = m.topology();
  Failures failures;
  const switchyard::testing::LoopbackDelays delays(m.delays, seed);
  switch (m.kind) {
    case Kind::round_trip: {
      const Expected expected = expected_on(c, topology, seed);
      on_buffer(c, topology, m.engine, rank,
                [&](Buffer& buffer) { round_trip(m, expected, buffer, rank, failures); });
      break;
    }
    case Kind::hooks_in_flight: {
      const Expected first = expected_on(c, topology, seed);
      const Expected second = expected_on(c, topology, seed + 1);
      on_buffer(c, topology, m.engine, rank,
                [&](Buffer& buffer) { hooks_in_flight(m, first, second, buffer, rank, failures); });
      break;
    }
    case Kind::capacity:
      for (const CapacityRun& run : capacity_runs(c, seed)) {
        const Expected expected = expected_from(run.c, run.data);
        if (expected.overflows) {
          failures.add(rank,
                       run.c.name + ": the case overflows its capacity " + std::to_string(run.c.capacity));
          continue;
        }
        Failures mine;
        on_buffer(run.c, topology, m.engine, rank,
                  [&](Buffer& buffer) { capacity_fits(run.c, expected, buffer, rank, mine); });
        for (const std::string& line : mine.lines()) {
          failures.add(rank, run.c.name + " (capacity " + std::to_string(run.c.capacity) + "): " + line);
        }
      }
      break;
    case Kind::overflow: {
      std::vector<workload::RankData> data = workload::generate(shape_of(c), seed);
      const int64_t full = max_expert_rows(data, c.num_experts);
      if (full < 2) {
        failures.add(rank, "no expert receives 2 rows: nothing can overflow");
        break;
      }
      const Case capped = with_capacity(c, full - 1);
      const Expected expected = expected_from(capped, data);
      const Expected unlimited = expected_from(c, std::move(data));
      if (!expected.overflows) failures.add(rank, "the reference does not overflow");
      on_buffer(capped, topology, m.engine, rank,
                [&](Buffer& buffer) { overflow(capped, expected, unlimited, buffer, rank, failures); });
      break;
    }
  }
  return failures.lines();
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, num_ranks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &num_ranks);

  int passed = 0, failed = 0;
  for (const MpiCase& m : cases(num_ranks)) {
    const uint64_t seed = switchyard::testing::seed_for("mpi_expert_major/" + m.name);
    workload::Shape shape = shape_of(m.c);
    shape.topology = m.topology();
    const std::string context = m.name + " (" + engine_name(m.engine) + ", seed=" + testing::hex_seed(seed) +
                                ", " + shape.describe() + ", max_tokens=" + std::to_string(m.c.max_tokens) +
                                ", fp8=" + std::to_string(m.c.fp8.use_fp8) +
                                " round_scale=" + std::to_string(m.c.fp8.round_scale) +
                                " ue8m0=" + std::to_string(m.c.fp8.use_ue8m0) + ", loopback delays " +
                                (m.delays ? "on" : "off") + ")";
    const bool ok = testing::mpi_case_passed(m.name, context, [&] { return run_case(m, rank, seed); });
    (ok ? passed : failed) += 1;
  }
  if (rank == 0) std::printf("%d passed, %d failed\n", passed, failed);
  MPI_Finalize();
  return failed == 0 ? 0 : 1;
}
