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

// The current device's %globaltimer, read by a one-thread kernel on a stream of its own and waited for. Its
// first call on a device also loads the timer's kernels (preload_gpu_timer_kernels).
uint64_t gpu_timer_now_ns();

// Loads this file's kernels into the current context. A kernel loads on its first launch (lazy loading,
// CUDA's default), which may wait for kernels running in the context: with ranks as threads, the first hold
// or end mark would wait for a peer's running hold (session 38 saw 20 ms). Every rank calls it before its
// first timed phase (HoldMarks does).
void preload_gpu_timer_kernels();

// Holds `stream` until the GPU's clock reaches `until_ns`: a one-thread kernel that spins, at most `limit_ns`
// (a moment far in the future, or a clock from another GPU, must not hang the stream). With `marks` (two
// words the device can write: host-mapped memory, so that the host can read them while the stream runs), the
// kernel writes its first reading of the clock to marks[0] and its last, as it lets the stream go, to
// marks[1]; they must be 0 before (HoldMarks::clear): a nonzero marks[1] says the stream has been released.
void enqueue_gpu_timer_wait(cudaStream_t stream, uint64_t until_ns, uint64_t limit_ns,
                            uint64_t* marks = nullptr);

// Writes the GPU's clock to `*word` (a word the device can write) when `stream` reaches it: a one-thread
// kernel, queued behind the work it marks the end of.
void enqueue_gpu_timer_mark(cudaStream_t stream, uint64_t* word);

// One timed phase on the GPU's clock, in page-locked host memory the device writes through its mapping: the
// hold's first and last readings (enqueue_gpu_timer_wait's marks) and the end mark after the work
// (enqueue_gpu_timer_mark). The phase's time is from the hold's release to the end mark: no timing event sits
// between the hold and the work, where one delays each process's release (~2 us a process under MPS,
// bench/NOTES.md, session 36), and none before the hold, whose launch gap to the hold's kernel (20-30 us with
// 8 processes under MPS, session 38) would count against the call.
class HoldMarks {
 public:
  // Also loads the timer's kernels (preload_gpu_timer_kernels).
  HoldMarks();

  // What enqueue_gpu_timer_wait takes.
  uint64_t* device_marks() const { return marks_.device(); }
  // What enqueue_gpu_timer_mark takes at the phase's end.
  uint64_t* device_end_mark() const { return marks_.device() + 2; }
  // Before each hold is enqueued, with no hold of these marks in flight.
  void clear();
  // Whether the hold has let its stream go (read while it runs).
  bool released() const;
  // From the hold's first reading of the clock to its last; 0 before it has run.
  uint64_t held_ns() const;
  // From the hold's release to the end mark; 0 until both have been written.
  uint64_t since_release_ns() const;

 private:
  MappedHostWords<uint64_t> marks_;  // first reading, release, end
};

}  // namespace switchyard::cuda
