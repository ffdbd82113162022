#include "cpu/normal/channel_workers.hpp"

#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "cpu/backend/bounded_wait.hpp"

namespace switchyard::cpu {

void run_channel_workers(int num_channels,
                         const std::function<void(int channel, const std::atomic<bool>& abort)>& fn) {
  std::atomic<bool> abort{false};
  std::mutex error_mutex;
  std::exception_ptr first_error;
  auto work = [&](int channel) {
    try {
      fn(channel, abort);
    } catch (const Aborted&) {
      // Another channel failed first; its error is the one reported.
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mutex);
      if (!first_error) first_error = std::current_exception();
      abort.store(true, std::memory_order_relaxed);
    }
  };
  std::vector<std::thread> threads;
  threads.reserve(num_channels > 0 ? num_channels - 1 : 0);
  for (int channel = 1; channel < num_channels; ++channel) threads.emplace_back(work, channel);
  if (num_channels > 0) work(0);
  for (auto& thread : threads) thread.join();
  if (first_error) std::rethrow_exception(first_error);
}

}  // namespace switchyard::cpu
