#include "cpu/low_latency/link.hpp"

#include <cstring>

#include "common/atomics.hpp"

namespace switchyard::cpu {

namespace {
// NOTES: loopback delivers what it holds within its maximum delay, whatever the peers do, so the
// teardown flush ends quickly; the bound only guards against a stuck worker.
constexpr double kTeardownFlushSeconds = 5.0;
}  // namespace

LowLatencyLink::LowLatencyLink(const common::SymHeap& heap, const Topology& topology,
                               const TransportOptions& transport)
    : heap_(heap), topology_(topology) {
  if (!topology.is_single_node()) {
    transport_ = std::make_unique<transport::LoopbackTransport>(
        heap, transport::LoopbackOptions::for_buffer(transport, heap.rank));
  }
}

LowLatencyLink::~LowLatencyLink() {
  // Operations still queued would be dropped with the transport, and a peer that waits for them
  // (a receive half it has not run yet) would time out although this rank sent everything.
  if (transport_) transport_->flush(kTeardownFlushSeconds);
}

void LowLatencyLink::write(int peer, const uint8_t* local_address, const void* source, size_t bytes) {
  if (same_node(peer)) {
    std::memcpy(heap_.map(const_cast<uint8_t*>(local_address), peer), source, bytes);
  } else {
    transport_->put(peer, offset_of(local_address), source, bytes);
  }
}

void LowLatencyLink::signal(int peer, const uint64_t* local_word, uint64_t signal) {
  if (same_node(peer)) {
    common::st_release_sys(heap_.map(const_cast<uint64_t*>(local_word), peer), signal);
  } else {
    transport_->signal(peer, offset_of(local_word), signal);  // an add onto a cleared word
  }
}

void LowLatencyLink::clear_after_use(uint64_t* own_word) {
  common::st_release_sys(own_word, 0);
}

}  // namespace switchyard::cpu
