#include "switchyard/group.hpp"

#include <exception>
#include <mutex>
#include <thread>

#include "switchyard/errors.hpp"

namespace switchyard {

InProcessGroupState::InProcessGroupState(int size) : size_(size), slots_(size) {
  if (size < 1) throw InvalidArgument("InProcessGroupState size: expected >= 1, got " + std::to_string(size));
}

void InProcessGroupState::throw_if_aborted() const {
  if (!abort_reason_.empty()) throw Error("group aborted: " + abort_reason_);
}

std::vector<Bytes> InProcessGroupState::allgather(int rank, const Bytes& mine) {
  std::unique_lock<std::mutex> lock(mutex_);
  throw_if_aborted();
  slots_[rank] = mine;
  uint64_t generation = generation_;
  if (++arrived_ == size_) {
    last_result_ = slots_;
    arrived_ = 0;
    ++generation_;
    cv_.notify_all();
    return last_result_;
  }
  cv_.wait(lock, [&] { return generation_ != generation || !abort_reason_.empty(); });
  if (generation_ == generation) throw_if_aborted();
  // last_result_ stays valid until the next collective completes, which needs this rank too.
  return last_result_;
}

void InProcessGroupState::barrier() {
  allgather(0, {});
}

void InProcessGroupState::abort(const std::string& why) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (abort_reason_.empty()) abort_reason_ = why.empty() ? "a rank failed" : why;
  cv_.notify_all();
}

void run_ranks(int num_ranks, const std::function<void(Group&)>& fn) {
  auto state = std::make_shared<InProcessGroupState>(num_ranks);
  std::vector<std::exception_ptr> errors(num_ranks);
  // The first rank to fail is the root cause; the others typically fail because it aborted the group.
  std::mutex first_mutex;
  int first_failed = -1;
  auto record = [&](int rank) {
    std::lock_guard<std::mutex> lock(first_mutex);
    if (first_failed < 0) first_failed = rank;
  };
  std::vector<std::thread> threads;
  threads.reserve(num_ranks);
  for (int rank = 0; rank < num_ranks; ++rank) {
    threads.emplace_back([&, rank] {
      InProcessGroup group(state, rank);
      try {
        fn(group);
      } catch (const std::exception& error) {
        errors[rank] = std::current_exception();
        record(rank);
        state->abort("rank " + std::to_string(rank) + " failed: " + error.what());
      } catch (...) {
        errors[rank] = std::current_exception();
        record(rank);
        state->abort("rank " + std::to_string(rank) + " failed");
      }
    });
  }
  for (auto& thread : threads) thread.join();
  if (first_failed >= 0) std::rethrow_exception(errors[first_failed]);
}

}  // namespace switchyard
