#include "cuda/normal/late_outputs.hpp"

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>

#include "common/atomics.hpp"
#include "common/posted_counts.hpp"
#include "cuda/normal/kernels.hpp"
#include "device/cuda_check.hpp"
#include "switchyard/errors.hpp"

namespace switchyard::cuda {

RowsLaunch rows_launch_from_environment() {
  const char* text = std::getenv("SWITCHYARD_NORMAL_ROWS");
  if (text == nullptr || *text == '\0') return RowsLaunch::after_counts;
  const std::string value = text;
  if (value == "early") return RowsLaunch::early;
  if (value == "after_counts") return RowsLaunch::after_counts;
  throw InvalidArgument(
      "SWITCHYARD_NORMAL_ROWS: expected early or after_counts (when a fresh in-place dispatch launches its "
      "gather), got '" +
      value + "'");
}

LateOutputs::LateOutputs(int rank) : rank_(rank) {
  const size_t bytes = sizeof(common::LateOutputsSlot) * common::kLateOutputSlots;
  SY_CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&host_slots_), bytes, cudaHostAllocMapped));
  for (int slot = 0; slot < common::kLateOutputSlots; ++slot) host_slots_[slot] = common::LateOutputsSlot{};
  SY_CUDA_CHECK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&device_slots_), host_slots_, 0));
}

LateOutputs::~LateOutputs() {
  if (host_slots_) cudaFreeHost(host_slots_);
}

common::LateOutputsSlot& LateOutputs::host_slot(const Ticket& ticket) const {
  return host_slots_[common::late_outputs_slot(ticket.tag)];
}

LateOutputs::Ticket LateOutputs::next(uint64_t timeout_ns) {
  tag_ = common::next_posted_counts_tag(tag_);
  const Ticket ticket{device_slots_ + common::late_outputs_slot(tag_), tag_};
  common::LateOutputsSlot& slot = host_slot(ticket);
  // The slot's last call (its tag, 0 when never used) must have been read to the end by its gather.
  const int32_t last = common::ld_acquire_sys(&slot.tag);
  const auto start = std::chrono::steady_clock::now();
  while (last != 0 && common::ld_acquire_sys(&slot.consumed) != last) {
    const auto waited = std::chrono::steady_clock::now() - start;
    if (waited > std::chrono::nanoseconds(timeout_ns)) {
      throw Error("rank " + std::to_string(rank_) + ": dispatch: the gather of an earlier call (tag " +
                  std::to_string(last) + ") has not finished reading its output addresses after " +
                  std::to_string(std::chrono::duration<double>(waited).count()) +
                  " s; is a call on another stream stalled?");
    }
    std::this_thread::yield();
  }
  return ticket;
}

void LateOutputs::give(const Ticket& ticket, const ReceivedRows& rows) {
  common::LateOutputsSlot& slot = host_slot(ticket);
  // `consumed` is left alone: it holds an earlier tag until this call's gather acknowledges this one (it may
  // already have, if its call was refused at the opening and it read nothing).
  slot.status = common::kOutputsGiven;
  slot.recv_x = reinterpret_cast<uint64_t>(rows.recv_x);
  slot.recv_x_scales = reinterpret_cast<uint64_t>(rows.recv_x_scales);
  slot.recv_topk_idx = reinterpret_cast<uint64_t>(rows.recv_topk_idx);
  slot.recv_topk_weights = reinterpret_cast<uint64_t>(rows.recv_topk_weights);
  slot.num_output_rows = rows.num_output_rows;
  common::st_release_sys(&slot.tag, ticket.tag);  // last: the gather reads the fields after it (acquire)
}

void LateOutputs::withdraw(const Ticket& ticket) {
  common::LateOutputsSlot& slot = host_slot(ticket);
  slot.status = common::kOutputsWithdrawn;
  common::st_release_sys(&slot.tag, ticket.tag);
}

}  // namespace switchyard::cuda
