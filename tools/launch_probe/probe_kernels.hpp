#pragma once
// The launch probe's kernels (main.cpp says what they measure). Clock words are %globaltimer, in ns: one
// clock for every process on a GPU, which on Linux follows the host's CLOCK_REALTIME up to an offset.
#include <cuda_runtime.h>

#include <cstdint>

namespace switchyard::launch_probe {

// Where a signal kernel notes its end and raises its flag: host-mapped words, as the notify's posted counts.
struct Mailbox {
  volatile uint64_t* end_ns;  // the signal kernel's clock just before it raises the flag
  volatile int32_t* flag;     // the sample number, released at system scope
};

// Each launch returns its launch error (cudaGetLastError), which the caller checks.
// The producer: one warp spins `spin_ns` (so the host is already polling), notes the clock, raises the flag.
cudaError_t launch_signal(Mailbox mailbox, int32_t sample, uint64_t spin_ns, cudaStream_t stream);

// The consumer: `blocks` blocks of `threads` with `shared_bytes` of dynamic shared memory (the gather's
// shape: one block per SM), block 0 noting the clock at its first instruction into `start_ns`.
cudaError_t launch_stamp(uint64_t* start_ns, int blocks, int threads, size_t shared_bytes,
                         cudaStream_t stream);
// The same consumer taking kBigParamBytes of kernel parameters by value (the engines' kernels take a
// KernelContext and a launch struct, ~1.3-1.5 KB): whether the parameters' size delays a launch.
constexpr size_t kBigParamBytes = 1536;
cudaError_t launch_stamp_big_params(uint64_t* start_ns, int blocks, int threads, size_t shared_bytes,
                                    cudaStream_t stream);
// The consumer staying resident: every block spins `spin_ns` after its start (block 0 notes it), as an
// engine's kernel waits for its peers; with `many_registers` each thread also keeps ~100 registers live (the
// symmetric dispatch takes 116 a thread at 512 threads). Whether a launch waits on the grids already
// resident.
cudaError_t launch_resident(uint64_t* start_ns, int blocks, int threads, size_t shared_bytes,
                            uint64_t spin_ns, bool many_registers, cudaStream_t stream);
// The resident consumer copying through `buffer` (`buffer_bytes`, its first half into its second, 16 bytes a
// thread at a time) for `spin_ns` after its start: whether the traffic of the grids already running delays
// the launches queued behind them (an engine's kernels read and write rows from their first microseconds).
cudaError_t launch_busy(uint64_t* start_ns, int blocks, int threads, size_t shared_bytes, uint64_t spin_ns,
                        void* buffer, size_t buffer_bytes, cudaStream_t stream);
// The resident consumer with about the symmetric dispatch's code size (~256 KB of straight-line SASS); `run`:
// every thread executes that code once at its start (cold instructions from the first microseconds), else it
// is only there. Whether the code of the grids already running, or of the one launched, spaces the launches.
cudaError_t launch_big_code(uint64_t* start_ns, int blocks, int threads, size_t shared_bytes,
                            uint64_t spin_ns, bool run, cudaStream_t stream);
// A kernel of another shared-memory configuration on every SM before the hold: `blocks` blocks of 1024
// threads without shared memory, asking for the SMs' L1/shared split `carveout_percent` of shared memory
// (cudaFuncAttributePreferredSharedMemoryCarveout: 0 prefers L1, 100 the most shared memory). A consumer that
// needs more shared memory than that split leaves must have its SMs reconfigured first.
cudaError_t launch_filler(int blocks, int carveout_percent, cudaStream_t stream);
// Once per process: the consumer may ask for up to `shared_bytes` of dynamic shared memory.
cudaError_t allow_stamp_shared(size_t shared_bytes);

// Clock calibration: one thread spins (at most `limit_ns`) until `flag` is `value`, then notes the clock.
cudaError_t launch_catch(volatile const int32_t* flag, int32_t value, uint64_t* seen_ns, uint64_t limit_ns,
                         cudaStream_t stream);

}  // namespace switchyard::launch_probe
