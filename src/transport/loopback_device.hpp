#pragma once
// `loopback` for kernels: the device transport of device_transport.cuh emulated inside one machine,
// over the mapped heaps of a SymHeap (ranks as threads or as processes on the GPUs of one host). The
// kernel argument is this plain struct; the session that does the work is in loopback_device.cuh.
//
// Adverse timing, for tests (the same environment variables as the host loopback, loopback.hpp):
// with a delay set, every put and signal first spins for a random time up to the delay, and puts are
// held back per session and land in random order, a signal only after the session's earlier puts to
// its peer. The choices are drawn from the seed; the GPU's own scheduling still varies between runs.
#include <cstdint>

#include "common/host_device.hpp"
#include "common/normal_protocol.hpp"
#include "transport/loopback.hpp"

namespace switchyard::transport {

struct LoopbackDevice {
  size_t signals_offset = 0;                        // heap offset of signal 0
  uint32_t signal_stride = common::kCounterStride;  // bytes between signals
  uint32_t max_delay_ns = 0;                        // 0: no delay
  uint32_t reorder = 0;                             // 1: hold puts back and land them out of order
  uint64_t seed = 0;

  // Adverse timing on when `options.max_delay_us > 0`, from its seed.
  static LoopbackDevice make(size_t signals_offset, uint32_t signal_stride, const LoopbackOptions& options) {
    LoopbackDevice transport;
    transport.signals_offset = signals_offset;
    transport.signal_stride = signal_stride;
    // NOTES: at most ~4 s per op: a bounded spin, not a wait, so it must stay far below the timeouts.
    const uint64_t delay_ns = static_cast<uint64_t>(options.max_delay_us) * 1000u;
    transport.max_delay_ns = static_cast<uint32_t>(delay_ns > UINT32_MAX ? UINT32_MAX : delay_ns);
    transport.reorder = options.max_delay_us > 0 ? 1u : 0u;
    transport.seed = options.seed;
    return transport;
  }
};

}  // namespace switchyard::transport
