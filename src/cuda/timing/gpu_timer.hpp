#pragma once
// A measurement aid: the GPU's %globaltimer (ns) from the host's side. Every process sharing a GPU reads the
// same clock, so ranks timing a collective can agree on one moment for all their streams to start at, and a
// rank's events then bracket the call's device work without the skew of the host barrier that preceded it
// (tools/peer/deepep_side_by_side.py: one process's barrier exit can trail another's by hundreds of us,
// bench/NOTES.md, session 35). Across GPUs the clocks are not the same clock.
#include <cuda_runtime.h>

#include <cstdint>

namespace switchyard::cuda {

// The current device's %globaltimer, read by a one-thread kernel on a stream of its own and waited for.
uint64_t gpu_timer_now_ns();

// Holds `stream` until the GPU's clock reaches `until_ns`: a one-thread kernel that spins, at most `limit_ns`
// (a moment far in the future, or a clock from another GPU, must not hang the stream).
void enqueue_gpu_timer_wait(cudaStream_t stream, uint64_t until_ns, uint64_t limit_ns);

}  // namespace switchyard::cuda
