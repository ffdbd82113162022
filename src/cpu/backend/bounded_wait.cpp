#include "cpu/backend/bounded_wait.hpp"

#include <sstream>
#include <thread>

#include "switchyard/errors.hpp"

namespace switchyard::cpu {

namespace {
// NOTES: a short busy spin catches the common case of a peer a few hundred nanoseconds behind;
// beyond it we yield, since R ranks x C channels of threads may share two cores.
constexpr uint64_t kBusySpins = 64;
// Clock reads are not free; check the deadline and the abort flag every this many idle steps.
constexpr uint64_t kCheckEvery = 16;
}  // namespace

void WaitBudget::idle(const std::function<std::string()>& describe) {
  ++spins_;
  if (spins_ < kBusySpins) return;
  std::this_thread::yield();
  if (spins_ % kCheckEvery != 0) return;
  if (abort_flag_ && abort_flag_->load(std::memory_order_relaxed)) throw Aborted{};
  auto now = std::chrono::steady_clock::now();
  if (!started_) {
    started_ = true;
    since_ = now;
    return;
  }
  if (now - since_ > timeout_) {
    std::ostringstream message;
    message << describe() << ": timed out after " << timeout_.count() << " s";
    throw TimeoutError(message.str());
  }
}

std::string role_label(int rank, const char* operation, const char* role, int channel) {
  std::ostringstream label;
  label << "rank " << rank << " (cpu normal " << operation << ", " << role;
  if (channel >= 0) label << ", channel " << channel;
  label << ")";
  return label.str();
}

}  // namespace switchyard::cpu
