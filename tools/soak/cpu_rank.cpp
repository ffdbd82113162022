#include "cpu_rank.hpp"

#include <algorithm>
#include <cstring>

#include "support/expert_major_cases.hpp"
#include "support/normal_round_trip.hpp"

namespace switchyard::soak {

namespace em = testing::expert_major;

namespace {

std::vector<std::string> normal_round(const SoakCase& c, const Round& round, Buffer& buffer, bool& corrupt,
                                      RankReport& report) {
  const int rank = buffer.rank();
  const workload::Shape shape = rank_major_shape(c);
  testing::RoundTripOptions options;
  options.expert_alignment = c.expert_alignment;
  options.pass_layout = c.pass_layout;
  options.preallocate_outputs = c.preallocate_outputs;
  options.num_worst_tokens = c.worst_case ? c.topology.num_ranks * c.max_tokens : 0;
  std::vector<std::string> lines;
  testing::RankRun run = testing::run_round_trip(buffer, shape, round.data[rank], round.normal, options);
  if (corrupt && flip_one_bit(run.combine.combined_x)) {
    corrupt = false;
    report.corrupted = true;
  }
  testing::check_layout(run, round.normal, rank, &lines);
  testing::check_dispatch(run, shape, round.normal, rank, options, true, &lines);
  testing::check_combine(run, shape, round.normal, rank, shape.with_weights, &lines);
  if (c.cached_replay) {
    const bool with_topk = c.cached_with_topk;
    testing::RankRun again = testing::run_cached_round_trip(buffer, shape, round.data[rank], round.normal,
                                                            options, run, with_topk);
    std::vector<std::string> cached;
    testing::check_dispatch(again, shape, round.normal, rank, options, with_topk, &cached);
    testing::check_combine(again, shape, round.normal, rank, with_topk && shape.with_weights, &cached);
    for (const std::string& line : cached) lines.push_back("cached dispatch: " + line);
  }
  return lines;
}

// One expert-major call in flight: its poisoned outputs and its dispatch.
struct InFlight {
  const Round* round = nullptr;
  em::PoisonedOutputs out;
  LowLatencyDispatchResult dispatched;
};

void run_hook(const std::function<void()>& hook, const char* call, em::Failures& failures, int rank) {
  if (hook) {
    hook();
  } else {
    failures.add(rank, std::string(call) + ": expected a hook with return_recv_hook, got none");
  }
}

// Rounds [first, first + count) dispatched back to back, then combined in the reverse order (the
// first dispatch's handle must still hold its routing after the later calls).
void expert_major_rounds(const SoakCase& c, const std::vector<Round>& rounds, int first, int count,
                         Buffer& buffer, bool& corrupt, RankReport& report) {
  const int rank = buffer.rank();
  const Engine engine = c.library_engine();
  std::vector<InFlight> flights(count);
  std::vector<em::Failures> failures(count);
  for (int i = 0; i < count; ++i) {
    InFlight& flight = flights[i];
    flight.round = &rounds[first + i];
    const workload::RankData& data = flight.round->data[rank];
    flight.out = em::poisoned_outputs(flight.round->call, data.x.size(0));
    LowLatencyDispatchArgs args = em::dispatch_args(flight.round->call, data);
    if (c.heap_tensors) {
      // Refilled for each dispatch: the previous one returned only once no peer read it.
      const TensorView x = buffer.symmetric_input(data.x.size(0), c.hidden);
      std::memcpy(x.data, data.x.data(), x.nbytes());
      args.x = x;
    }
    args.return_recv_hook = c.hooks;
    flight.out.attach(args);
    flight.dispatched = em::dispatch_with(engine, buffer, args);
    if (c.hooks) run_hook(flight.dispatched.hook, "dispatch", failures[i], rank);
  }
  for (int i = 0; i < count; ++i) {
    em::check_dispatch(flights[i].dispatched, em::reference_outputs(flights[i].round->expert_major, rank),
                       "reference", rank, failures[i]);
  }
  for (int i = count; i-- > 0;) {
    const InFlight& flight = flights[i];
    const em::Expected& expected = flight.round->expert_major;
    if (expected.ys.empty()) continue;  // use_ue8m0: the synthetic expert cannot read the scales
    LowLatencyCombineArgs args =
        em::combine_args(flight.round->data[rank], flight.dispatched.handle, expected.ys[rank]);
    if (c.heap_tensors) {
      // Written right before its combine: the outputs of the other call in flight were there until then.
      const TensorView y = buffer.symmetric_expert_output(flight.dispatched.handle);
      if (y.nbytes() != expected.ys[rank].nbytes()) {
        failures[i].add(rank, "symmetric_expert_output: " + y.describe() + ", but the expert outputs are " +
                                  expected.ys[rank].view().describe());
        continue;
      }
      std::memcpy(y.data, expected.ys[rank].data(), y.nbytes());
      args.x = y;
    }
    args.return_recv_hook = c.hooks;
    flight.out.attach(args);
    const LowLatencyCombineResult combined = em::combine_with(engine, buffer, args);
    if (c.hooks) run_hook(combined.hook, "combine", failures[i], rank);
    if (corrupt && flip_one_bit(combined.combined_x)) {
      corrupt = false;
      report.corrupted = true;
    }
    em::compare(combined.combined_x, expected.combined[rank], "combined_x vs reference", rank, failures[i]);
  }
  for (int i = 0; i < count; ++i) report.add_round(first + i, failures[i].lines());
}

}  // namespace

BufferOptions soak_buffer_options(const SoakCase& c, int rank, HeapSharing sharing) {
  BufferOptions options;
  if (c.is_rank_major()) {
    options.config = c.config;
    options.sizing.max_tokens_per_rank = c.max_tokens;
    options.sizing.hidden = c.hidden;
    options.sizing.topk = c.topk;
    options.sizing.num_experts = c.num_experts;
    options.sizing.dtype = c.dtype;
  } else {
    options = em::buffer_options(expert_major_call(c), rank, em::regions_of(c.library_engine()));
    if (c.heap_tensors) {
      // Every round's rows per expert fit: at most every rank's max_tokens reach an expert.
      options.sizing.symmetric_heap_input = true;
      options.sizing.symmetric_heap_output_rows_per_expert = c.topology.num_ranks * c.max_tokens;
    }
  }
  options.topology = c.topology;
  options.rank = rank;
  options.backend = c.backend;
  options.sharing = sharing;
  options.config.timeout_seconds = c.config.timeout_seconds;
  return options;
}

RankReport run_cpu_rank(const SoakCase& c, const std::vector<Round>& rounds, Group& group,
                        HeapSharing sharing, bool corrupt) {
  RankReport report;
  corrupt = corrupt && group.rank() == 0;
  Buffer buffer(soak_buffer_options(c, group.rank(), sharing));
  buffer.connect(group.allgather(buffer.local_handle()));
  const int batch = c.back_to_back ? 2 : 1;
  for (int first = 0; first < c.round_trips; first += batch) {
    if (c.is_rank_major()) {
      report.add_round(first, normal_round(c, rounds[first], buffer, corrupt, report));
    } else {
      expert_major_rounds(c, rounds, first, std::min(batch, c.round_trips - first), buffer, corrupt, report);
    }
  }
  // No peer may still read this rank's heap when the Buffer goes.
  group.barrier();
  return report;
}

}  // namespace switchyard::soak
