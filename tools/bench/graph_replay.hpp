#pragma once
// The CUDA graph replay rows (issue 4: the launch-free latency), for an engine whose calls are
// capturable (EngineSession::graph_capture_unsupported()): after the timed iterations each rank
// captures its dispatch() into one graph and its combine() into another, on its own stream, then
// times replays of them with the discipline of the plain calls (PhaseClock).
#include <functional>
#include <string>
#include <vector>

#include "engine_session.hpp"
#include "phase_clock.hpp"

namespace switchyard::bench {

// Per timed replay, this rank's seconds.
struct GraphReplaySeconds {
  std::vector<double> dispatch, combine;
};

// Releases the previous results (session.prepare(iteration)), captures (every rank's stream idle, so
// that nothing runs while any rank captures), agrees with the other ranks, then replays `warmup`
// untimed and `iters` timed rounds of dispatch then combine into `seconds`, each into outputs
// poisoned before it (session.poison_outputs()) and followed by `check`. `iteration`: the session's iteration
// for the captured calls. Returns "" when replayed, else why not: a capture that fails on any rank skips the
// replays on every rank, with that rank's reason (the same on all). Errors while replaying (a timeout)
// propagate. `report` shows progress ("warmup 1/3" ...).
std::string run_graph_replays(EngineSession& session, PhaseClock& clock, Group& group, Stream stream,
                              int iteration, int warmup, int iters, GraphReplaySeconds& seconds,
                              const std::function<void(const std::string&)>& report, const RoundCheck& check);

}  // namespace switchyard::bench
