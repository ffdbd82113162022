#include "hook_split.hpp"

namespace switchyard::bench {

int run_hook_split(EngineSession& session, PhaseClock& clock, int first_iteration, int warmup, int iters,
                   HookSplitSeconds& seconds, const std::function<void(const std::string&)>& report,
                   const RoundCheck& check) {
  for (std::vector<double>* half :
       {&seconds.dispatch_send, &seconds.dispatch_recv, &seconds.combine_send, &seconds.combine_recv}) {
    half->assign(static_cast<size_t>(iters), 0.0);
  }
  int iteration = first_iteration;
  for (int round = 0; round < warmup + iters; ++round, ++iteration) {
    const bool timed = round >= warmup;
    const std::string label =
        timed ? "hook split iteration " + std::to_string(round - warmup + 1) + "/" + std::to_string(iters)
              : "hook split warmup " + std::to_string(round + 1) + "/" + std::to_string(warmup);
    report(label);
    // Into poisoned outputs, so that a half that wrote nothing cannot pass on an earlier round's.
    session.poison_outputs();
    session.prepare(iteration);
    const PhaseClock::Cache cache = timed ? PhaseClock::Cache::evict : PhaseClock::Cache::keep;
    const double dispatch_send = clock.time([&] { session.dispatch_send(iteration); }, cache);
    const double dispatch_recv = clock.time([&] { session.receive(); }, cache);
    session.expert(iteration);
    const double combine_send = clock.time([&] { session.combine_send(iteration); }, cache);
    const double combine_recv = clock.time([&] { session.receive(); }, cache);
    clock.synchronize();
    check(label);
    if (!timed) continue;
    const size_t index = static_cast<size_t>(round - warmup);
    seconds.dispatch_send[index] = dispatch_send;
    seconds.dispatch_recv[index] = dispatch_recv;
    seconds.combine_send[index] = combine_send;
    seconds.combine_recv[index] = combine_recv;
  }
  return iteration;
}

}  // namespace switchyard::bench
