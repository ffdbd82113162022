#pragma once
// A measurement aid: the GPU's %globaltimer (ns) from the host's side. Every process sharing a GPU reads the
// same clock, so ranks timing a collective can agree on one moment for all their streams to start at, and a
// rank's events then bracket the call's device work without the skew of the host barrier that preceded it
// (tools/peer/deepep_side_by_side.py: one process's barrier exit can trail another's by hundreds of us,
// bench/NOTES.md, session 35). Across GPUs the clocks are not the same clock.
#include <cuda_runtime.h>

#include <cstdint>

#include "device/mapped_host_words.hpp"

namespace switchyard::cuda {

// The current device's %globaltimer, read by a one-thread kernel on a stream of its own and waited for.
uint64_t gpu_timer_now_ns();

// Holds `stream` until the GPU's clock reaches `until_ns`: a one-thread kernel that spins, at most `limit_ns`
// (a moment far in the future, or a clock from another GPU, must not hang the stream). With `marks` (two
// words the device can write: host-mapped memory, so that the host can read them while the stream runs), the
// kernel writes its first reading of the clock to marks[0] and its last, as it lets the stream go, to
// marks[1]; they must be 0 before (HoldMarks::clear): a nonzero marks[1] says the stream has been released.
void enqueue_gpu_timer_wait(cudaStream_t stream, uint64_t until_ns, uint64_t limit_ns,
                            uint64_t* marks = nullptr);

// The two marks of one hold, in page-locked host memory the device writes through its mapping. A timer that
// starts before the hold subtracts held_ns() from its time: a timing event recorded between the hold and the
// work delays each process's release (by ~2 us a process under MPS, bench/NOTES.md, session 36), and the
// ranks would then start apart.
class HoldMarks {
 public:
  HoldMarks() : marks_(2) {}

  // What enqueue_gpu_timer_wait takes.
  uint64_t* device_marks() const { return marks_.device(); }
  // Before each hold is enqueued, with no hold of these marks in flight.
  void clear();
  // Whether the hold has let its stream go (read while it runs).
  bool released() const;
  // From the hold's first reading of the clock to its last; 0 before it has run.
  uint64_t held_ns() const;

 private:
  MappedHostWords<uint64_t> marks_;
};

}  // namespace switchyard::cuda
