#pragma once
// The handle's own copy of the routing a caller's layout gave a `normal` dispatch (one node and
// across nodes). DispatchArgs::layout is borrowed for the call only, yet combine and cached
// dispatches route by is_token_in_rank long after it: the handle must not point into caller memory.
#include <cuda_runtime.h>

#include "switchyard/buffer.hpp"

namespace switchyard::cuda {

// bool [N, R] on `device`, allocated on `allocation_stream` (as the engines' other handle tensors:
// stream-ordered, or plain where that is null or capturing) and filled from `caller` by a copy ordered
// on `stream`, so the dispatch's kernels that follow read it; no host synchronisation, so it can be
// captured in a CUDA graph.
Tensor copy_is_token_in_rank(const TensorView& caller, int device, cudaStream_t stream,
                             cudaStream_t allocation_stream);
// The same copy into `owned`, a bool [N, R] the caller allocated (a part of a carved allocation).
void copy_is_token_in_rank_into(const TensorView& caller, const Tensor& owned, cudaStream_t stream);

}  // namespace switchyard::cuda
