#pragma once
// `loopback`: the Transport of transport.hpp emulated inside one machine, over the mapped heaps of a
// SymHeap (ranks as threads, or processes sharing POSIX memory). Data moves by copies to the mapped
// peer address and signals by atomic adds, so an engine that passes its tests over loopback uses
// only what RDMA offers.
//
// With a delay configured, a per-rank worker thread delivers the operations late and out of order,
// within what RDMA allows: each operation waits a random time (from a seed) up to the delay; puts
// land in any order; a signal lands only after every earlier operation to the same peer. Without a
// delay, every operation lands before the call that issued it returns.
//
// BufferOptions::transport (loopback_max_delay_us, loopback_seed) sets the delays of a Buffer's
// transports; where unset, SWITCHYARD_LOOPBACK_DELAY_US=<max microseconds> turns them on for every
// loopback transport created afterwards (0 or unset: off) and SWITCHYARD_LOOPBACK_SEED=<integer> picks
// their seed.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "common/sym_heap.hpp"
#include "switchyard/buffer.hpp"
#include "transport/transport.hpp"

namespace switchyard::transport {

struct LoopbackOptions {
  uint32_t max_delay_us = 0;  // 0: deliver at once, in order
  uint64_t seed = 0;

  // From SWITCHYARD_LOOPBACK_DELAY_US and SWITCHYARD_LOOPBACK_SEED; `rank` varies the seed per rank.
  static LoopbackOptions from_environment(int rank);
  // A Buffer's (BufferOptions::transport, checked by core): its knobs where set, else the environment's.
  static LoopbackOptions for_buffer(const TransportOptions& transport, int rank);
};

class LoopbackTransport final : public Transport {
 public:
  // `heap` must stay alive, and be connected before the first operation.
  LoopbackTransport(const common::SymHeap& heap, LoopbackOptions options);
  ~LoopbackTransport() override;
  LoopbackTransport(const LoopbackTransport&) = delete;
  LoopbackTransport& operator=(const LoopbackTransport&) = delete;

  void put(int peer, size_t offset, const void* source, size_t bytes) override;
  void signal(int peer, size_t signal_offset, uint64_t value) override;
  uint64_t read_signal(size_t signal_offset) const override;
  bool flush(double timeout_seconds) override;
  uint64_t bytes_put() const override { return bytes_put_.load(std::memory_order_relaxed); }

  const LoopbackOptions& options() const { return options_; }

 private:
  using Clock = std::chrono::steady_clock;
  struct Operation {
    bool is_signal;
    size_t offset;
    uint64_t value;             // signal: the add
    std::vector<uint8_t> data;  // put: the bytes, copied at issue
    Clock::time_point due;
  };

  void deliver(int peer, const Operation& operation) const;
  void enqueue(int peer, Operation operation);
  void worker();
  // Under mutex_: delivers one due operation if there is one; false when none is due.
  bool deliver_one(Clock::time_point now, Clock::time_point* next_due);

  const common::SymHeap& heap_;
  LoopbackOptions options_;
  std::atomic<uint64_t> bytes_put_{0};

  // Delayed mode only.
  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<std::deque<Operation>> queues_;  // per peer, in issue order
  size_t pending_ = 0;
  bool stopping_ = false;
  std::mt19937_64 random_;
  std::thread thread_;
};

}  // namespace switchyard::transport
