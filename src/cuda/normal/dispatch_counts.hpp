#pragma once
// How a fresh `normal` dispatch's host learns its output sizes, between the notify kernel and the dispatch
// kernel (the call's one host wait). Two ways, chosen by SWITCHYARD_NORMAL_COUNTS when the engine is made:
// - poll (the default): the notify kernel posts the counts into host-mapped memory and then a tag
//   (common/posted_counts.hpp), and the host polls the tag. It sees the counts as soon as they exist,
//   without the two copies and without waiting for the kernel's end to be reported (DeepEP's way);
// - copy: two copies of the handle's device counts into page-locked memory, then a stream
//   synchronisation.
// NOTES (session 33, one H100, 8 processes, 128 tokens, switchyard-bench): the fresh dispatch 285.7 ->
// 251.5 us with the heap inputs, 342.9 -> 315.3 without (4 ranks: 182.6 -> 179.7); both pass the suite.
#include <cuda_runtime.h>

#include <cstdint>

#include "common/posted_counts.hpp"
#include "core/normal_handle.hpp"
#include "core/posted_counts_wait.hpp"
#include "cuda/backend/call_env.hpp"
#include "device/mapped_host_words.hpp"

namespace switchyard::cuda {

enum class CountReadback { copy, poll };

// SWITCHYARD_NORMAL_COUNTS: unset or empty gives poll; copy or poll; anything else is refused by name.
CountReadback count_readback_from_environment();

class DispatchCounts {
 public:
  // Room for up to `max_local_experts` experts' counts, page-locked and mapped. `rank`: for messages.
  DispatchCounts(int rank, int max_local_experts, CountReadback readback);
  DispatchCounts(const DispatchCounts&) = delete;
  DispatchCounts& operator=(const DispatchCounts&) = delete;

  CountReadback readback() const { return readback_; }

  // Room for `local_experts` experts' counts: grows (rarely: the sizing's experts cover most calls) before
  // the call launches anything, since a page-locked allocation can wait for the device.
  void reserve(int local_experts);

  // For the notify launch of a new call: where it posts and this call's tag (poll), or no mailbox (copy).
  common::PostedCounts mailbox_for_device() const;
  int32_t next_tag();

  // After the notify's launch, on its stream: copy enqueues the copies of the handle's device counts;
  // poll has nothing to enqueue.
  void request(const detail::NormalHandleData& handle, int local_experts, cudaStream_t stream);

  // Waits for the counts of the call tagged `tag` and puts them into the handle's host fields. Raises a
  // device error an earlier kernel or the notify recorded; never waits for a post that cannot come (poll
  // asks the stream whether it is still busy, and an idle stream without the post is an error).
  void receive(detail::NormalHandleData& handle, int local_experts, int32_t tag, cudaStream_t stream,
               const CallEnv& env);

  // After receive raised: whether the notify of the call tagged `tag` finished its count exchange (every
  // peer then goes on to move rows, and expects this rank at the call's closing barrier): its post (poll), or
  // the rows it left, which stay -1 until the exchange passes (copy).
  bool exchanged(int32_t tag) const;

 private:
  void poll_for(int32_t tag, cudaStream_t stream, const CallEnv& env) const;
  void allocate(int local_experts);

  int rank_;
  int capacity_ = 0;  // local experts
  CountReadback readback_;
  MappedHostWords<int32_t> words_;  // [PostedCounts::words_for(capacity_)]
  int32_t tag_ = 0;
  detail::PostWaitPolicy wait_policy_;  // post_wait_policy_from_environment(), read once
};

}  // namespace switchyard::cuda
