#pragma once
// Where a kernel that gave up waiting says why. The block lives in host-mapped memory: the first
// waiter to time out claims it, fills it in and exits; the host turns it into a TimeoutError.
// No kernel executes the PTX trap instruction: it would kill the CUDA context, and every later call with it.
#include "common/host_device.hpp"

namespace switchyard::common {

enum class WaitRole : int32_t {
  barrier = 1,
  notify = 2,
  dispatch_sender = 3,
  dispatch_receiver = 4,
  combine_sender = 5,
  combine_receiver = 6,
  layout = 7,
  low_latency_dispatch_sender = 8,
  low_latency_dispatch_receiver = 9,
  low_latency_combine_sender = 10,
  low_latency_combine_receiver = 11,
  symmetric_dispatch = 12,
  symmetric_combine = 13,
  symmetric_barrier = 14,
  // The hierarchical (across nodes) `normal` engine's roles: engine "normal".
  internode_dispatch_coordinator = 15,
  internode_dispatch_forwarder = 16,
  internode_dispatch_nvl_receiver = 17,
  internode_combine_nvl_sender = 18,
  internode_combine_forwarder = 19,
  internode_combine_coordinator = 20,
  internode_combine_rdma_receiver = 21,
};

enum class WaitTarget : int32_t {
  peer_arrival = 1,    // a peer's barrier word
  ring_space = 2,      // a ring's head (the receiver freeing slots)
  ring_data = 3,       // a ring's tail (the sender publishing tokens)
  call_signature = 4,  // not a wait: a peer called with a different shape
  invalid_expert = 5,  // not a wait: topk_idx held an id outside [-1, num_experts)
  capacity = 6,        // not a wait: more tokens arrived than num_worst_tokens rows
  expert_signal = 7,   // a low-latency signal word (the peer's sender to finish its sends)
  grid_arrival = 8,    // the other blocks of this rank's grid (a grid-wide sync)
  // Not a wait: an expert-major dispatch delivered more rows to one expert than its expert_capacity
  // (expected = the capacity, observed = the rows, peer = the expert's rank, channel = the expert).
  expert_capacity = 9,
  pull_record = 10,  // a peer's pull record (the symmetric pull combine: the peer to announce its y)
  pull_done = 11,    // a peer's done word (the symmetric pull combine: the peer to finish reading our y)
  source_done =
      12,  // a peer's done word (the zero-copy symmetric dispatch: the peer to finish reading our x)
  // Not a wait: a peer's ring message named a token outside its heap-resident input (the normal dispatch
  // in place; expected = the input's rows, observed = the token).
  source_row = 13,
};

// The engine a role belongs to, for messages ("cuda low_latency, dispatch receiver").
SY_HD const char* wait_role_engine(int32_t role) {
  if (role >= static_cast<int32_t>(WaitRole::internode_dispatch_coordinator)) return "normal";
  if (role >= static_cast<int32_t>(WaitRole::symmetric_dispatch)) return "symmetric";
  if (role >= static_cast<int32_t>(WaitRole::low_latency_dispatch_sender)) return "low_latency";
  return "normal";
}

struct DeviceErrorBlock {
  int32_t claimed;   // 0 free; set once by the first failing thread
  int32_t complete;  // 1 once the fields below are written
  int32_t rank;
  int32_t role;      // WaitRole
  int32_t target;    // WaitTarget
  int32_t channel;   // -1 when not per channel
  int32_t peer;      // the rank waited for
  int32_t call;      // which call of this buffer (1 = the first), for matching up ranks' reports
  int64_t expected;  // value waited for
  int64_t observed;  // value last seen
  uint64_t waited_ns;
  uint64_t barriers;  // barriers this rank had opened when it failed
  // 1 once any failure stopped this rank's kernels for good (kAbortedForGood), whether or not its record
  // above won the claim: an earlier record that the host then cleared (bad input, a refused call) would
  // otherwise hide it, and the rank's later calls would do nothing. Written outside the claim, never
  // cleared.
  int32_t gave_up;
};

SY_HD const char* wait_role_name(int32_t role) {
  switch (static_cast<WaitRole>(role)) {
    case WaitRole::barrier:
      return "barrier";
    case WaitRole::notify:
      return "notify";
    case WaitRole::dispatch_sender:
      return "dispatch sender";
    case WaitRole::dispatch_receiver:
      return "dispatch receiver";
    case WaitRole::combine_sender:
      return "combine sender";
    case WaitRole::combine_receiver:
      return "combine receiver";
    case WaitRole::layout:
      return "layout";
    case WaitRole::low_latency_dispatch_sender:
      return "dispatch sender";
    case WaitRole::low_latency_dispatch_receiver:
      return "dispatch receiver";
    case WaitRole::low_latency_combine_sender:
      return "combine sender";
    case WaitRole::low_latency_combine_receiver:
      return "combine receiver";
    case WaitRole::symmetric_dispatch:
      return "dispatch";
    case WaitRole::symmetric_combine:
      return "combine";
    case WaitRole::symmetric_barrier:
      return "cross-rank barrier";
    case WaitRole::internode_dispatch_coordinator:
      return "dispatch rdma coordinator";
    case WaitRole::internode_dispatch_forwarder:
      return "dispatch forwarder";
    case WaitRole::internode_dispatch_nvl_receiver:
      return "dispatch nvlink receiver";
    case WaitRole::internode_combine_nvl_sender:
      return "combine nvlink sender";
    case WaitRole::internode_combine_forwarder:
      return "combine forwarder";
    case WaitRole::internode_combine_coordinator:
      return "combine rdma coordinator";
    case WaitRole::internode_combine_rdma_receiver:
      return "combine rdma receiver";
  }
  return "unknown role";
}

SY_HD const char* wait_target_name(int32_t target) {
  switch (static_cast<WaitTarget>(target)) {
    case WaitTarget::peer_arrival:
      return "the peer to arrive at the barrier";
    case WaitTarget::ring_space:
      return "ring space (the peer's receiver to free slots)";
    case WaitTarget::ring_data:
      return "ring data (the peer's sender to publish tokens)";
    case WaitTarget::call_signature:
      return "a matching call (the peer called with a different shape)";
    case WaitTarget::invalid_expert:
      return "valid expert ids";
    case WaitTarget::capacity:
      return "room for the received tokens";
    case WaitTarget::expert_signal:
      return "a signal word (the peer's sender to finish its sends)";
    case WaitTarget::grid_arrival:
      return "the other blocks of this rank's kernel";
    case WaitTarget::expert_capacity:
      return "room for an expert's rows (expert_capacity)";
    case WaitTarget::pull_record:
      return "the pull record (the peer to announce its expert outputs y)";
    case WaitTarget::pull_done:
      return "the done word (the peer to finish reading this rank's expert outputs y)";
    case WaitTarget::source_done:
      return "the done word (the peer to finish reading this rank's tokens x)";
    case WaitTarget::source_row:
      return "a row inside the peer's heap input (a ring message, cached handle or published range named one "
             "outside)";
  }
  return "unknown";
}

}  // namespace switchyard::common
