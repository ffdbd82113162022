#pragma once
// The latency breakdown of issue 4: the send half and the receive half of dispatch and combine, timed
// apart with return_recv_hook (EngineSession::hook_split_unsupported()). Each half is its own phase
// (PhaseClock): the rank's stream drained and all ranks at a host barrier before it. So between the
// send and the receive half every rank's send half has finished, and the receive half measures the
// receive work, not waiting for slow peers' sends.
#include <functional>
#include <string>
#include <vector>

#include "engine_session.hpp"
#include "phase_clock.hpp"

namespace switchyard::bench {

// Per timed iteration, this rank's seconds.
struct HookSplitSeconds {
  std::vector<double> dispatch_send, dispatch_recv, combine_send, combine_recv;
};

// `warmup` untimed and `iters` timed iterations, numbered from `first_iteration` for the session:
// poison_outputs(), prepare(), dispatch_send(), receive(), expert(), combine_send(), receive(), then
// `check` on what they wrote. Returns the next iteration number. `report` shows progress.
int run_hook_split(EngineSession& session, PhaseClock& clock, int first_iteration, int warmup, int iters,
                   HookSplitSeconds& seconds, const std::function<void(const std::string&)>& report,
                   const RoundCheck& check);

}  // namespace switchyard::bench
