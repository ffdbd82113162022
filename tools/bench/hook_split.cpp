#include "hook_split.hpp"

namespace switchyard::bench {

int run_hook_split(EngineSession& session, PhaseClock& clock, int first_iteration, int warmup, int iters,
                   HookSplitSeconds& seconds, const std::function<void(const std::string&)>& report) {
  for (std::vector<double>* half :
       {&seconds.dispatch_send, &seconds.dispatch_recv, &seconds.combine_send, &seconds.combine_recv}) {
    half->assign(static_cast<size_t>(iters), 0.0);
  }
  int iteration = first_iteration;
  // The last round is the check: into poisoned outputs, so that a half that wrote nothing cannot pass
  // on what the earlier iterations left there.
  const int check_round = warmup + iters;
  for (int round = 0; round <= check_round; ++round, ++iteration) {
    const bool timed = round >= warmup && round < check_round;
    if (round == check_round) {
      report("check");
      session.poison_outputs();
    } else {
      report(timed ? "iter " + std::to_string(round - warmup) + "/" + std::to_string(iters)
                   : "warmup " + std::to_string(round) + "/" + std::to_string(warmup));
    }
    session.prepare(iteration);
    const double dispatch_send = clock.time([&] { session.dispatch_send(iteration); });
    const double dispatch_recv = clock.time([&] { session.receive(); });
    session.expert(iteration);
    const double combine_send = clock.time([&] { session.combine_send(iteration); });
    const double combine_recv = clock.time([&] { session.receive(); });
    if (!timed) continue;
    const size_t index = static_cast<size_t>(round - warmup);
    seconds.dispatch_send[index] = dispatch_send;
    seconds.dispatch_recv[index] = dispatch_recv;
    seconds.combine_send[index] = combine_send;
    seconds.combine_recv[index] = combine_recv;
  }
  clock.synchronize();
  return iteration;
}

}  // namespace switchyard::bench
