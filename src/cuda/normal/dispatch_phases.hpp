#pragma once
// A measurement aid: where a fresh `normal` dispatch's time goes. With SWITCHYARD_NORMAL_PHASES=1 in the
// environment when the engine is made, each fresh dispatch records a CUDA event on its stream between its
// steps (up to kMaxPhaseSamples calls), and the engine prints each step's median over them to stderr when
// it is destroyed:
//   normal phases: rank R, N fresh dispatches, median us: layout .. notify .. count copies .. host
//   turnaround .. rows moved .. total ..
// "host turnaround" is the stream's idle time between the counts' arrival (after the copies, or after the
// notify when the counts are polled) and the first kernel the host enqueues once it has them: the cost of
// the call's host wait, which DeepEP's dispatch pays too. Off, each step costs one branch. On, the events are
// not free: as 8 processes under MPS the 128-token fresh dispatch took 176 us with them and 109 without
// (bench/NOTES.md, session 35), so read the steps as shares of a slowed call, not as its time.
// SWITCHYARD_NORMAL_PHASES=stamps records the clock stamps below without the events.
// Beside the events (one clock per process), the kernels note %globaltimer (one clock for every rank of a
// GPU) at the points DispatchStamp names, one line per sampled call and rank:
//   normstamp <sample> <rank> <notify entered> <published> <exchanged> <notify done> <rows started>
//             <host has the counts> <host launched the rows kernel>
// (ns); scripts/normal_stamps.py lines the ranks up on the clock: how far apart their notifies start, and
// what of the notify step is waiting at its barrier for the last rank. The last two are the host's
// CLOCK_REALTIME, which %globaltimer follows on Linux only up to an offset: compare them with each other,
// and the device's with the device's (host launched - host has the counts against rows started - notify done
// tells the host's part of the gap between the notify and the rows kernel from the launch's).
#include <cuda_runtime.h>

#include <array>
#include <cstdint>
#include <vector>

namespace switchyard::cuda {

enum DispatchPhaseMark : int {
  kDispatchStarted,       // before the layout (nothing with a caller's layout: the notify copies its routing)
  kDispatchLaidOut,       // the layout done
  kDispatchNotified,      // the notify done
  kDispatchCountsCopied,  // the counts' copies done (copy readback; else at once)
  kDispatchRowsQueued,    // enqueued after the host has the counts: the stream was idle until it ran
  kDispatchRowsMoved,     // the gather (in place, its closing barrier included) or the ring dispatch done
  kDispatchPhaseMarks,
};

// Where a sampled call's kernels note the clock (thread 0; the rows kernel's block 0).
enum DispatchStamp : int {
  kStampNotifyEntered,  // the notify's first instruction
  kStampPublished,      // its counts written into every peer's record: it arrives at its barrier
  kStampExchanged,      // its barrier passed: every rank has published its counts here
  kStampNotifyDone,     // its last instruction (after the post, when the counts are polled)
  kStampRowsStarted,    // the rows kernel (the in-place gather or the ring dispatch) starts
  kDispatchStamps,
};

// Where a sampled call's host notes CLOCK_REALTIME.
enum DispatchHostStamp : int {
  kHostCountsSeen,    // the counts are on the host (poll or copy), before the outputs are made
  kHostRowsLaunched,  // the rows kernel's launch returned
  kDispatchHostStamps,
};

class DispatchPhases {
 public:
  static constexpr int kMaxPhaseSamples = 1024;

  // What is recorded: SWITCHYARD_NORMAL_PHASES 1 gives events_and_stamps, `stamps` the clock stamps alone
  // (the normstamp lines, without the events' cost: a timing event on each of 8 ranks' streams at one moment
  // spreads their starts by ~2 us a rank, bench/NOTES.md session 36); 0, unset or empty: off; anything else
  // is refused by name.
  enum class Record { off, events_and_stamps, stamps };
  explicit DispatchPhases(int rank);
  ~DispatchPhases();  // prints, when on and anything was recorded
  DispatchPhases(const DispatchPhases&) = delete;
  DispatchPhases& operator=(const DispatchPhases&) = delete;

  // A new fresh dispatch: its first mark (kDispatchStarted) on `stream`. Nothing when off, full or capturing.
  void begin(cudaStream_t stream);
  // The open sample's `mark`, on `stream`; nothing without one. kDispatchRowsMoved ends the sample.
  void mark(DispatchPhaseMark mark, cudaStream_t stream);
  // The open sample's kDispatchStamps clock words (device memory) for its kernels; null without one.
  uint64_t* stamps() const;
  // The open sample's host clock at `which`; nothing without one.
  void host_stamp(DispatchHostStamp which);

 private:
  struct Sample {
    std::array<cudaEvent_t, kDispatchPhaseMarks> events{};
    int marked = 0;                                    // marks recorded, in order
    std::array<uint64_t, kDispatchHostStamps> host{};  // CLOCK_REALTIME ns, 0 where not reached
  };
  void print() const;
  void print_stamps() const;

  int rank_;
  Record record_ = Record::off;
  bool on_ = false;
  bool open_ = false;
  std::vector<Sample> samples_;
  uint64_t* device_stamps_ = nullptr;  // [kMaxPhaseSamples][kDispatchStamps], zeroed, when on
};

}  // namespace switchyard::cuda
