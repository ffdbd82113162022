#include "transport/loopback.hpp"

#include <cstdlib>
#include <cstring>
#include <thread>

#include "common/atomics.hpp"
#include "switchyard/errors.hpp"

namespace switchyard::transport {

namespace {
uint64_t env_integer(const char* name, uint64_t fallback) {
  const char* text = std::getenv(name);
  if (!text || !*text) return fallback;
  char* end = nullptr;
  unsigned long long value = std::strtoull(text, &end, 0);
  if (end == text || *end != '\0') {
    throw InvalidArgument(std::string(name) + ": expected a non-negative integer, got '" + text + "'");
  }
  return value;
}

// NOTES: a different stream per rank, still reproducible from one seed.
uint64_t rank_seed(uint64_t seed, int rank) {
  return seed * 0x9e3779b97f4a7c15ull + static_cast<uint64_t>(rank);
}
}  // namespace

LoopbackOptions LoopbackOptions::from_environment(int rank) {
  LoopbackOptions options;
  options.max_delay_us = static_cast<uint32_t>(env_integer("SWITCHYARD_LOOPBACK_DELAY_US", 0));
  options.seed = rank_seed(env_integer("SWITCHYARD_LOOPBACK_SEED", 0x5eed), rank);
  return options;
}

LoopbackOptions LoopbackOptions::for_buffer(const TransportOptions& transport, int rank) {
  LoopbackOptions options = from_environment(rank);
  if (transport.loopback_max_delay_us) options.max_delay_us = *transport.loopback_max_delay_us;
  if (transport.loopback_seed) options.seed = rank_seed(*transport.loopback_seed, rank);
  return options;
}

bool Transport::wait_signal(size_t signal_offset, uint64_t at_least, double timeout_seconds) const {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_seconds);
  while (read_signal(signal_offset) < at_least) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::yield();
  }
  return true;
}

LoopbackTransport::LoopbackTransport(const common::SymHeap& heap, LoopbackOptions options)
    : heap_(heap), options_(options), random_(options.seed) {
  if (options_.max_delay_us > 0) {
    queues_.resize(common::kMaxMappedRanks);
    thread_ = std::thread([this] { worker(); });
  }
}

LoopbackTransport::~LoopbackTransport() {
  if (!thread_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;  // operations still queued are dropped: their call failed
  }
  changed_.notify_all();
  thread_.join();
}

void LoopbackTransport::deliver(int peer, const Operation& operation) const {
  uint8_t* target = heap_.peer_base(peer) + operation.offset;
  if (operation.is_signal) {
    common::red_add_release_sys(reinterpret_cast<uint64_t*>(target), operation.value);
  } else {
    std::memcpy(target, operation.data.data(), operation.data.size());
  }
}

void LoopbackTransport::put(int peer, size_t offset, const void* source, size_t bytes) {
  bytes_put_.fetch_add(bytes, std::memory_order_relaxed);
  if (!thread_.joinable()) {
    std::memcpy(heap_.peer_base(peer) + offset, source, bytes);
    return;
  }
  const uint8_t* begin = static_cast<const uint8_t*>(source);
  enqueue(peer, Operation{false, offset, 0, std::vector<uint8_t>(begin, begin + bytes), {}});
}

void LoopbackTransport::signal(int peer, size_t signal_offset, uint64_t value) {
  if (!thread_.joinable()) {
    common::red_add_release_sys(reinterpret_cast<uint64_t*>(heap_.peer_base(peer) + signal_offset), value);
    return;
  }
  enqueue(peer, Operation{true, signal_offset, value, {}, {}});
}

uint64_t LoopbackTransport::read_signal(size_t signal_offset) const {
  return common::ld_acquire_sys(reinterpret_cast<const uint64_t*>(heap_.base + signal_offset));
}

void LoopbackTransport::enqueue(int peer, Operation operation) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    std::uniform_int_distribution<uint32_t> delay(0, options_.max_delay_us);
    operation.due = Clock::now() + std::chrono::microseconds(delay(random_));
    queues_[peer].push_back(std::move(operation));
    ++pending_;
  }
  changed_.notify_all();
}

bool LoopbackTransport::deliver_one(Clock::time_point now, Clock::time_point* next_due) {
  // Deliverable: a due put anywhere in its queue, or a due signal at the front (all earlier
  // operations to that peer have landed). One is picked at random: that is the reordering.
  std::vector<std::pair<int, size_t>> candidates;
  for (int peer = 0; peer < static_cast<int>(queues_.size()); ++peer) {
    const std::deque<Operation>& queue = queues_[peer];
    for (size_t i = 0; i < queue.size(); ++i) {
      const Operation& operation = queue[i];
      if (operation.due < *next_due) *next_due = operation.due;
      if (operation.due > now) continue;
      if (!operation.is_signal || i == 0) candidates.emplace_back(peer, i);
    }
  }
  if (candidates.empty()) return false;
  std::uniform_int_distribution<size_t> pick(0, candidates.size() - 1);
  auto [peer, index] = candidates[pick(random_)];
  std::deque<Operation>& queue = queues_[peer];
  deliver(peer, queue[index]);
  queue.erase(queue.begin() + static_cast<std::ptrdiff_t>(index));
  --pending_;
  return true;
}

void LoopbackTransport::worker() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stopping_) {
    Clock::time_point now = Clock::now();
    Clock::time_point next_due = Clock::time_point::max();
    if (deliver_one(now, &next_due)) {
      if (pending_ == 0) changed_.notify_all();  // flush() waiters
      continue;
    }
    if (pending_ == 0) {
      changed_.wait(lock);
    } else if (next_due > now) {
      changed_.wait_until(lock, next_due);
    } else {
      changed_.wait_for(lock, std::chrono::microseconds(1));
    }
  }
}

bool LoopbackTransport::flush(double timeout_seconds) {
  if (!thread_.joinable()) return true;
  std::unique_lock<std::mutex> lock(mutex_);
  auto deadline = Clock::now() +
                  std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_seconds));
  return changed_.wait_until(lock, deadline, [&] { return pending_ == 0; });
}

}  // namespace switchyard::transport
