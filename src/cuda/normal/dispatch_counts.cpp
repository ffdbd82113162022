#include "cuda/normal/dispatch_counts.hpp"

#include <algorithm>
#include <string>

#include "core/posted_counts_wait.hpp"
#include "cuda/backend/environment_tuning.hpp"
#include "cuda/normal/dispatch_outputs.hpp"
#include "device/cuda_check.hpp"
#include "switchyard/errors.hpp"

namespace switchyard::cuda {

CountReadback count_readback_from_environment() {
  return choice_from_environment("SWITCHYARD_NORMAL_COUNTS", CountReadback::poll,
                                 {{"copy", CountReadback::copy}, {"poll", CountReadback::poll}},
                                 "how a fresh dispatch's host reads its counts");
}

DispatchCounts::DispatchCounts(int rank, int max_local_experts, CountReadback readback)
    : rank_(rank), readback_(readback), wait_policy_(detail::post_wait_policy_from_environment()) {
  allocate(max_local_experts);
}

void DispatchCounts::allocate(int local_experts) {
  capacity_ = 0;
  words_.allocate(static_cast<size_t>(common::PostedCounts::words_for(local_experts)));
  capacity_ = local_experts;
}

void DispatchCounts::reserve(int local_experts) {
  if (local_experts > capacity_) allocate(local_experts);
}

common::PostedCounts DispatchCounts::mailbox_for_device() const {
  return common::PostedCounts{readback_ == CountReadback::poll ? words_.device() : nullptr};
}

int32_t DispatchCounts::next_tag() {
  tag_ = common::next_posted_counts_tag(tag_);
  return tag_;
}

void DispatchCounts::request(const detail::NormalHandleData& handle, int local_experts, cudaStream_t stream) {
  if (readback_ != CountReadback::copy) return;
  // recv_tokens and the expert counts are consecutive words, as copy_dispatch_counts wants them.
  copy_dispatch_counts(handle, local_experts, common::PostedCounts{words_.host()}.recv_tokens(), stream);
}

void DispatchCounts::receive(detail::NormalHandleData& handle, int local_experts, int32_t tag,
                             cudaStream_t stream, const CallEnv& env) {
  const common::PostedCounts posted{words_.host()};
  if (readback_ == CountReadback::copy) {
    take_copied_counts(handle, local_experts, posted.recv_tokens(), stream, env);
    return;
  }
  poll_for(tag, stream, env);
  // Into the handle first, also when an error is raised below: a rank that stands in for its failed call
  // (cuda/normal/engine.cpp) sizes its own outputs by them.
  if (*posted.status() == common::kCountsPosted) {
    handle.num_recv_tokens = *posted.recv_tokens();
    handle.num_recv_tokens_per_expert.assign(posted.expert_counts(), posted.expert_counts() + local_experts);
  }
  // Bad input the notify found while counting (an expert id out of range) is in the error block by now.
  env.throw_pending_device_error();
  if (*posted.status() != common::kCountsPosted) {
    throw Error("rank " + std::to_string(rank_) +
                ": dispatch: the notify kernel stopped before counting and left no error record");
  }
}

bool DispatchCounts::exchanged(int32_t tag) const {
  const common::PostedCounts posted{words_.host()};
  // copy: receive synchronised the stream after the copies; the notify leaves -1 rows until its exchange
  // passes.
  if (readback_ == CountReadback::copy) return *posted.recv_tokens() >= 0;
  // poll: the tag is written last (release): the status read after it is this call's.
  return __atomic_load_n(posted.tag(), __ATOMIC_ACQUIRE) == tag && *posted.status() == common::kCountsPosted;
}

void DispatchCounts::poll_for(int32_t tag, cudaStream_t stream, const CallEnv& env) const {
  const common::PostedCounts posted{words_.host()};
  const auto stream_idle = [stream] {
    const cudaError_t state = cudaStreamQuery(stream);
    if (state == cudaErrorNotReady) return false;
    SY_CUDA_CHECK(state);
    return true;
  };
  if (detail::wait_for_post(posted, tag, stream_idle, wait_policy_) == detail::PostWait::posted) return;
  // The stream went idle without the post: the notify ended without posting (or never ran).
  env.throw_pending_device_error();
  throw Error("rank " + std::to_string(rank_) + ": dispatch: the notify kernel ended without posting its " +
              "counts (expected tag " + std::to_string(tag) + ", found " + std::to_string(*posted.tag()) +
              ")");
}

}  // namespace switchyard::cuda
