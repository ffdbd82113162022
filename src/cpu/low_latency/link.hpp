#pragma once
// How a `low_latency` rank writes into its peers' regions. A peer of its own node (one load/store
// domain) gets plain stores at the mapped address; a peer on another node gets only what RDMA
// offers: puts, and signal adds that land after this rank's earlier operations to that peer
// (transport.hpp). The engine's roles write through this class alone, so they never touch a remote
// node's memory, and never read any peer's memory at all: receivers read their own heap.
//
// Signals keep the protocol's encoding (common/low_latency_protocol.hpp). Within a node they are
// stored; across nodes they are added onto a word its reader cleared after consuming the previous
// signal (see clear_after_use), so the word again holds exactly low_latency_signal(sequence, count).
#include <cstdint>
#include <memory>

#include "common/sym_heap.hpp"
#include "switchyard/topology.hpp"
#include "transport/loopback.hpp"

namespace switchyard::cpu {

class LowLatencyLink {
 public:
  // `heap` must be connected and outlive the link. Across nodes, a loopback transport is made here
  // (its delays from the environment: loopback.hpp).
  // `transport`: the Buffer's (BufferOptions::transport), for the loopback transport across nodes.
  LowLatencyLink(const common::SymHeap& heap, const Topology& topology, const TransportOptions& transport);
  ~LowLatencyLink();
  LowLatencyLink(const LowLatencyLink&) = delete;
  LowLatencyLink& operator=(const LowLatencyLink&) = delete;

  // Whether `peer` is in this rank's node: reached by stores.
  bool same_node(int peer) const { return topology_.node_of(peer) == topology_.node_of(heap_.rank); }

  // Copies `bytes` bytes from local `source` to the counterpart in `peer`'s heap of `local_address`
  // (an address in this rank's own heap).
  void write(int peer, const uint8_t* local_address, const void* source, size_t bytes);
  // Makes the counterpart in `peer`'s heap of `local_word` hold `signal`, visible only after this
  // rank's earlier writes to `peer` (release).
  void signal(int peer, const uint64_t* local_word, uint64_t signal);

  // The reader's half of a signal, once consumed: the word is cleared, so that the next add (in call
  // sequence + 2 at the earliest, which its writer issues only after this rank's next call has sent
  // to it) starts from zero. NOTES: every word, also one that came by a store: the word's writer,
  // and so whether it stores or adds, changes with the call's number of experts per rank.
  static void clear_after_use(uint64_t* own_word);

  // Payload bytes that crossed nodes so far.
  uint64_t bytes_across_nodes() const { return transport_ ? transport_->bytes_put() : 0; }

 private:
  size_t offset_of(const void* local_address) const {
    return static_cast<size_t>(static_cast<const uint8_t*>(local_address) - heap_.base);
  }

  const common::SymHeap& heap_;
  Topology topology_;
  std::unique_ptr<transport::LoopbackTransport> transport_;  // null on one node
};

}  // namespace switchyard::cpu
