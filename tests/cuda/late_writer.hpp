#pragma once
// A kernel for the tests of programmatic dependent launch (cuda/backend/dependent_launch.hpp): it lets the
// stream's next kernel start at once (griddepcontrol.launch_dependents at its start, as a PDL-aware caller's
// kernel may), then waits and only then writes that kernel's inputs. A dependent kernel that touched its
// inputs before ptx::wait_for_previous_grid() would read what was there before.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace switchyard::testing {

// On `stream`: after `delay_ns` of the GPU's clock, copies `bytes` from `source` to `destination` (device
// memory), with every block having triggered its dependents first.
void enqueue_late_copy(void* destination, const void* source, size_t bytes, uint64_t delay_ns,
                       cudaStream_t stream);

}  // namespace switchyard::testing
