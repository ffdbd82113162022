#pragma once
// One engine on one rank: that rank's inputs on the backend, its preallocated outputs, and the
// reference to compare them with. The runner drives every engine through this interface:
//   per input set, poison_outputs() and a check iteration; then per iteration
//   prepare() -> dispatch() -> expert() -> combine(); only dispatch() and combine() are timed.
// The expert-major engines then time the send/receive split and (cuda) CUDA graph replays of the same
// calls (hook_split.hpp, graph_replay.hpp).
// Iteration i uses input set i % num_input_sets(), so iterations 0 .. num_input_sets() - 1 are the
// check iterations, one per set.
#include <functional>
#include <string>

#include "compare.hpp"
#include "dump.hpp"
#include "options.hpp"
#include "problem.hpp"
#include "switchyard/buffer.hpp"
#include "switchyard/errors.hpp"
#include "switchyard/group.hpp"

namespace switchyard::bench {

// Called after every round of calls, outside the timed window: compares the outputs with the
// reference (EngineSession::first_difference) and keeps the first difference, labelled with `round`.
using RoundCheck = std::function<void(const std::string& round)>;

struct SessionContext {
  const BenchOptions* options = nullptr;
  const Problem* problem = nullptr;
  Buffer* buffer = nullptr;  // null for engines without a switchyard Buffer (nccl)
  int rank = 0;
  Stream stream = nullptr;  // the rank's, on its device
  Group* group = nullptr;   // the ranks' in-process group (nccl shares its unique id through it)
  int device = 0;           // the rank's CUDA device (0 on cpu)
};

class EngineSession {
 public:
  virtual ~EngineSession() = default;
  // Input sets that rotate over the iterations (copies of the rank's one workload at different
  // addresses, whose total exceeds the cache), each checked once before the timed iterations.
  virtual int num_input_sets() const { return 1; }
  // Fills every preallocated output with the poison pattern, so that a value the engine forgot to
  // write cannot pass the check by accident.
  virtual void poison_outputs() = 0;
  // Untimed work before dispatch (e.g. the layout). `iteration` picks the input set.
  virtual void prepare(int iteration) = 0;
  virtual void dispatch(int iteration) = 0;
  // The synthetic expert on what dispatch delivered: untimed.
  virtual void expert(int iteration) = 0;
  virtual void combine(int iteration) = 0;
  // The first output of the last iteration that differs from the reference, bit for bit; none
  // found when everything matched.
  virtual Difference first_difference() = 0;
  // Writes every input and output of the last iteration under `dump` for this engine and rank.
  virtual void dump(DumpDirectory& dump) = 0;
  // Engines without a switchyard Buffer (nccl) wait here for the rank's stream, bounded by --timeout,
  // and raise what their work recorded; for the others the runner calls Buffer::synchronize.
  virtual void synchronize() {}
  // A line for the output about how the engine ran (nccl: the NCCL version); empty for none.
  virtual std::string note() const { return ""; }

  // The send/receive split (return_recv_hook), after the timed iterations: empty when the engine
  // has one, else why not. dispatch_send() / combine_send() make the call with return_recv_hook (only
  // the send half runs) and keep the hook; receive() runs it (the receive half fills the outputs).
  virtual std::string hook_split_unsupported() const { return "the engine has no send/receive split"; }
  virtual void dispatch_send(int iteration);
  virtual void combine_send(int iteration);
  virtual void receive();

  // CUDA graph replay, last: empty when dispatch() and combine() may be captured into CUDA graphs and
  // replayed, else why not. They may when outputs are preallocated, inputs stay at the same addresses
  // (or new ones are copied into them before a replay), nothing in the calls waits for the host, and
  // combine() uses the handle of the last dispatch() (the captured one, which each replay rewrites).
  // prepare() runs once before the capture and must release the previous results (their frees must
  // not be captured). After the replays first_difference() checks what the last replay wrote.
  virtual std::string graph_capture_unsupported() const { return "its calls are not capturable"; }
};

// Only for engines whose hook_split_unsupported() is empty.
inline void EngineSession::dispatch_send(int /*iteration*/) {
  throw Unsupported("switchyard-bench: this engine has no send/receive split");
}
inline void EngineSession::combine_send(int /*iteration*/) {
  throw Unsupported("switchyard-bench: this engine has no send/receive split");
}
inline void EngineSession::receive() {
  throw Unsupported("switchyard-bench: this engine has no send/receive split");
}

}  // namespace switchyard::bench
