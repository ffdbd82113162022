#pragma once
// The only way a rank reaches a peer outside its load/store domain (another node): RDMA semantics.
// A rank may put bytes into a peer's symmetric heap, add to a peer's signal word, read its own signal
// words, and flush. It never loads a remote node's memory. Offsets are from the heap base, which is
// valid on every rank because the heap layout is symmetric.
//
// Ordering (what RDMA gives, and all the engines may rely on):
// - put: lands at some time before the issuing rank's next flush() returns. Puts are unordered among
//   themselves, whatever their destination.
// - signal: an atomic add that lands after every put and signal this rank issued earlier to the same
//   peer (release): a reader that sees the add (acquire) sees those puts.
// - A source buffer may be reused as soon as put() returns.
#include <cstddef>
#include <cstdint>

namespace switchyard::transport {

class Transport {
 public:
  virtual ~Transport() = default;

  // Copies `bytes` bytes from local `source` to `offset` in `peer`'s heap.
  virtual void put(int peer, size_t offset, const void* source, size_t bytes) = 0;
  // Adds `value` to the 64-bit word at `signal_offset` in `peer`'s heap, after this rank's earlier
  // operations to `peer` (see above).
  virtual void signal(int peer, size_t signal_offset, uint64_t value) = 0;
  // A put followed by a signal that lands after it.
  void put_signal(int peer, size_t offset, const void* source, size_t bytes, size_t signal_offset,
                  uint64_t value) {
    put(peer, offset, source, bytes);
    signal(peer, signal_offset, value);
  }
  // This rank's own signal word at `signal_offset` (acquire).
  virtual uint64_t read_signal(size_t signal_offset) const = 0;
  // Waits (bounded) until this rank's signal word reaches `at_least`; false on timeout.
  bool wait_signal(size_t signal_offset, uint64_t at_least, double timeout_seconds) const;
  // Waits (bounded) until every operation this rank issued has landed; false on timeout.
  virtual bool flush(double timeout_seconds) = 0;

  // Bytes put so far (payload of puts, not signals): the RDMA traffic, for the bench.
  virtual uint64_t bytes_put() const = 0;
};

}  // namespace switchyard::transport
