#pragma once
// What a `normal` dispatch does on the host between its notify kernel and its dispatch kernel, the same
// on one node (cuda/normal/) and across nodes (cuda/internode/): read the received counts back (the
// call's one host synchronisation) and make the outputs those counts size.
#include <cuda_runtime.h>

#include <cstdint>

#include "core/backend.hpp"
#include "core/engine_plans.hpp"
#include "core/normal_handle.hpp"
#include "cuda/backend/call_env.hpp"

namespace switchyard::cuda {

// The rows this rank receives and their split over its local experts, from the handle's device counts
// (written by the notify kernel on `stream`) into `pinned` (page-locked, at least 1 + local_experts
// ints) and then into the handle's host fields. Waits for the stream; raises a device error an earlier
// kernel recorded (after filling the handle: -1 rows there says the notify's exchange did not pass). The two
// halves, for a caller that does something between them (cuda/normal/dispatch_counts.hpp):
// copy_dispatch_counts enqueues the copies, take_copied_counts waits for them and reads them.
void receive_dispatch_counts(detail::NormalHandleData& handle, int local_experts, int32_t* pinned,
                             cudaStream_t stream, const CallEnv& env);
void copy_dispatch_counts(const detail::NormalHandleData& handle, int local_experts, int32_t* pinned,
                          cudaStream_t stream);
void take_copied_counts(detail::NormalHandleData& handle, int local_experts, const int32_t* pinned,
                        cudaStream_t stream, const CallEnv& env);

// A fresh dispatch without num_worst_tokens waits on the host for its output sizes, which a CUDA graph
// capture cannot contain: refused clearly, before anything is enqueued, instead of failing inside the
// wait (a stream synchronisation fails and invalidates the capture; a poll would wait for ever).
void refuse_host_synchronising_capture(cudaStream_t stream);

// recv_x (and recv_x_scales, recv_topk_idx, recv_topk_weights where the call has them): the caller's,
// checked for their rows, or new ones on `allocation_stream`. Rows: num_worst_tokens, else the
// handle's count (a worst-case handle, whose counts never reached the host, is refused).
DispatchResult dispatch_outputs(const detail::DispatchPlan& plan, const detail::NormalHandleData& handle,
                                int device, cudaStream_t allocation_stream);

// A dispatch that fails on this rank's host after the count exchange still moves rows with its peers, who
// wait for its senders' rows and for its receivers to drain their rings (the stand-ins of cuda/normal/ and
// cuda/internode/). It runs the whole dispatch into outputs of the rank's own: `plan` without the caller's
// outputs or allocator, and new outputs for it. They go when the result does (stream-ordered frees follow
// the kernel on its stream; plain ones synchronise the device first).
struct StandInDispatch {
  detail::DispatchPlan plan;
  DispatchResult outputs;
};
StandInDispatch stand_in_dispatch(const detail::DispatchPlan& plan, const detail::NormalHandleData& handle,
                                  int device, cudaStream_t allocation_stream);

}  // namespace switchyard::cuda
