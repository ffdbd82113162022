#pragma once
// How ranks find each other. The library itself only needs the bytes of every rank's handle; the
// caller moves them with whatever it has (MPI, torch.distributed, or the in-process group below,
// used when ranks are threads of one process).
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace switchyard {

using Bytes = std::vector<uint8_t>;

class Group {
 public:
  virtual ~Group() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Every rank contributes `mine`; every rank gets all contributions, indexed by rank.
  virtual std::vector<Bytes> allgather(const Bytes& mine) = 0;
  virtual void barrier() = 0;
};

// Shared state of R ranks that are threads of one process.
class InProcessGroupState {
 public:
  explicit InProcessGroupState(int size);
  int size() const { return size_; }
  std::vector<Bytes> allgather(int rank, const Bytes& mine);
  void barrier();
  // A rank failed: every rank waiting in (or later entering) a collective throws Error with `why`
  // instead of waiting forever.
  void abort(const std::string& why);

 private:
  void throw_if_aborted() const;
  int size_;
  std::string abort_reason_;
  std::mutex mutex_;
  std::condition_variable cv_;
  int arrived_ = 0;
  uint64_t generation_ = 0;
  std::vector<Bytes> slots_;
  std::vector<Bytes> last_result_;
};

// One rank's view of an InProcessGroupState.
class InProcessGroup : public Group {
 public:
  InProcessGroup(std::shared_ptr<InProcessGroupState> state, int rank)
      : state_(std::move(state)), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return state_->size(); }
  std::vector<Bytes> allgather(const Bytes& mine) override { return state_->allgather(rank_, mine); }
  void barrier() override { state_->barrier(); }

 private:
  std::shared_ptr<InProcessGroupState> state_;
  int rank_;
};

// Runs fn(group) on `num_ranks` threads, one per rank, and joins them. If any rank throws, the
// first exception (lowest rank) is rethrown after all threads have finished.
void run_ranks(int num_ranks, const std::function<void(Group&)>& fn);

}  // namespace switchyard
