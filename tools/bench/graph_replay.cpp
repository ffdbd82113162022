#include "graph_replay.hpp"

#include <memory>

#include "cuda_graph.hpp"
#include "rank_agreement.hpp"
#include "switchyard/errors.hpp"

namespace switchyard::bench {

std::string run_graph_replays(EngineSession& session, PhaseClock& clock, Group& group, Stream stream,
                              int iteration, int warmup, int iters, GraphReplaySeconds& seconds,
                              const std::function<void(const std::string&)>& report,
                              const RoundCheck& check) {
  report("capturing dispatch and combine");
  // The previous iteration's results are released now, outside the capture: a stream-ordered free of
  // them (the handle's routing table) while capturing would become a free node of the graph, freeing
  // the same memory on every replay.
  session.prepare(iteration);
  // Every rank's stream idle before any rank captures, and until all have (the allgather below):
  // a capture may allocate with a plain cudaMalloc (cuda_graph.cpp), which must not wait on a kernel
  // spinning for a peer.
  clock.synchronize();
  group.barrier();
  std::unique_ptr<CapturedCall> dispatch_graph, combine_graph;
  std::string failure;
  try {
    dispatch_graph =
        std::make_unique<CapturedCall>(stream, "the dispatch capture", [&] { session.dispatch(iteration); });
    // The captured dispatch's handle: each dispatch replay rewrites it, each combine replay reads it.
    combine_graph =
        std::make_unique<CapturedCall>(stream, "the combine capture", [&] { session.combine(iteration); });
  } catch (const TimeoutError&) {
    throw;  // an earlier kernel's failure, raised by the call: not a capture problem
  } catch (const Error& error) {
    failure = error.what();
    if (failure.empty()) failure = "unknown error";
  }
  // Every rank replays or none does: a rank replaying alone would wait for its peers until the timeout.
  const std::string agreed = agree_on_failure(group, "capture failed", failure);
  if (!agreed.empty()) return agreed;

  seconds.dispatch.assign(static_cast<size_t>(iters), 0.0);
  seconds.combine.assign(static_cast<size_t>(iters), 0.0);
  for (int round = 0; round < warmup + iters; ++round) {
    const bool timed = round >= warmup;
    const std::string label =
        timed ? "graph replay " + std::to_string(round - warmup + 1) + "/" + std::to_string(iters)
              : "graph replay warmup " + std::to_string(round + 1) + "/" + std::to_string(warmup);
    report(label);
    // Into poisoned outputs, so that a replay that wrote nothing cannot pass on an earlier one's.
    // Nothing else between the replays: the inputs (and the expert's y) stay in the captured tensors.
    session.poison_outputs();
    const PhaseClock::Cache cache = timed ? PhaseClock::Cache::evict : PhaseClock::Cache::keep;
    const double dispatch = clock.time([&] { dispatch_graph->launch(); }, cache);
    const double combine = clock.time([&] { combine_graph->launch(); }, cache);
    clock.synchronize();
    check(label);
    if (timed) {
      seconds.dispatch[static_cast<size_t>(round - warmup)] = dispatch;
      seconds.combine[static_cast<size_t>(round - warmup)] = combine;
    }
  }
  clock.synchronize();
  // No rank tears down (the captured handle's plain allocation is freed with a device-wide cudaFree)
  // while a peer's replay may still run.
  group.barrier();
  return "";
}

}  // namespace switchyard::bench
