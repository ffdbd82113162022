#pragma once
// WarpSession<LoopbackDevice>: RDMA semantics emulated with copies to the mapped peer address
// (SymHeap::map) and signal adds at system scope. It only ever stores to a peer's heap and adds to
// a peer's signal words; it never loads a peer's memory, so an engine that passes its tests over it
// uses nothing RDMA lacks.
//
// With reordering on (LoopbackDevice::reorder), puts are held back in the session, up to
// kMaxPendingPuts, and land in random order: when the list is full, now and then on a later put,
// all of one peer's before a signal to that peer, and all at flush(). A held-back put reads its
// source only when it lands, which is why a source may not be rewritten before flush().
#include "device/ptx.cuh"
#include "device/warp_copy.cuh"
#include "transport/device_transport.cuh"
#include "transport/loopback_device.hpp"

namespace switchyard::transport {

template <>
class WarpSession<LoopbackDevice> {
 public:
  // NOTES: enough for puts to overtake each other and signals to wait for several of them, small
  // enough that the list (identical in every lane) stays cheap in local memory.
  static constexpr int kMaxPendingPuts = 8;

  __device__ __forceinline__ WarpSession(const LoopbackDevice& transport, const common::SymHeap& heap,
                                         uint32_t session_id)
      : transport_(transport), heap_(heap) {
    // A different stream of choices per rank, session and warp, all from one seed; identical in
    // every lane of the warp, so that the lanes agree on each choice without talking.
    const uint64_t warp = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    random_state_ =
        transport.seed ^ (static_cast<uint64_t>(heap.rank) << 48) ^ (uint64_t{session_id} << 24) ^ warp;
  }

  __device__ __forceinline__ void put(int peer, size_t dst_offset, size_t src_offset, size_t bytes) {
    delay();
    const PendingPut put{peer, dst_offset, src_offset, bytes};
    if (!transport_.reorder) {
      land(put);
      return;
    }
    if (num_pending_ == kMaxPendingPuts) land_and_forget(random_below(num_pending_));
    pending_[num_pending_++] = put;
    // Sometimes one lands at once, so that puts overtake each other between signals too.
    if ((next_random() & 3) == 0) land_and_forget(random_below(num_pending_));
  }

  __device__ __forceinline__ void put_signal(int peer, size_t dst_offset, size_t src_offset, size_t bytes,
                                             SignalId signal, uint64_t add) {
    put(peer, dst_offset, src_offset, bytes);
    this->signal(peer, signal, add);
  }

  __device__ __forceinline__ void signal(int peer, SignalId signal, uint64_t add) {
    land_pending_to(peer);  // RDMA's one ordering promise: the add follows our earlier puts to `peer`
    delay();
    __syncwarp();  // every lane's stores of those puts come before lane 0's fence
    if (warp_lane() == 0) {
      cuda::ptx::fence_acq_rel_sys();
      common::red_add_release_sys(signal_word(peer, signal), add);
    }
    __syncwarp();
  }

  __device__ __forceinline__ void flush() {
    while (num_pending_ > 0) land_and_forget(random_below(num_pending_));
    __syncwarp();  // every lane has read its part of the sources before any lane rewrites them
  }

  __device__ __forceinline__ uint64_t read_signal(SignalId signal) const {
    return common::ld_acquire_sys(signal_word(heap_.rank, signal));
  }

  __device__ __forceinline__ bool wait_signal(const cuda::KernelContext& context, SignalId signal,
                                              uint64_t at_least, const cuda::WaitSite& site) const {
    const uint64_t* word = signal_word(heap_.rank, signal);
    return warp_wait_at_least(
        context, [word] { return common::ld_acquire_sys(word); }, at_least, site);
  }

  __device__ __forceinline__ void reset_signal(SignalId signal) {
    if (warp_lane() == 0) common::st_release_sys(signal_word(heap_.rank, signal), 0);
    __syncwarp();
  }

  // Plain stores by every lane, then a warp barrier: the stores are ordered before this warp's later
  // signals (lane 0's system fence there follows the barrier) and before any release that a later
  // barrier of the block precedes.
  __device__ __forceinline__ void reset_signals(SignalId first, uint32_t count) {
    for (uint32_t i = warp_lane(); i < count; i += 32) {
      *reinterpret_cast<volatile uint64_t*>(signal_word(heap_.rank, first + i)) = 0;
    }
    __syncwarp();
  }

  __device__ __forceinline__ uint8_t* lsa_pointer(int peer, size_t offset) const {
    return heap_.peer_base(peer) + offset;
  }

 private:
  struct PendingPut {
    int peer;
    size_t dst_offset;
    size_t src_offset;
    size_t bytes;
  };

  __device__ __forceinline__ uint64_t* signal_word(int rank, SignalId signal) const {
    return reinterpret_cast<uint64_t*>(heap_.peer_base(rank) + transport_.signals_offset +
                                       static_cast<size_t>(signal) * transport_.signal_stride);
  }

  // The put's copy, by the whole warp: our heap to the peer's, stores only on the peer's side.
  __device__ __forceinline__ void land(const PendingPut& put) const {
    const uint8_t* source = heap_.base + put.src_offset;
    uint8_t* destination = heap_.peer_base(put.peer) + put.dst_offset;
    const bool vector_aligned =
        ((reinterpret_cast<uintptr_t>(source) | reinterpret_cast<uintptr_t>(destination) | put.bytes) & 15) ==
        0;
    if (vector_aligned) {
      // NOTES: warp_copy counts bytes in 32 bits; pieces of 1 GiB keep any put size exact.
      constexpr size_t kPiece = size_t{1} << 30;
      for (size_t done = 0; done < put.bytes; done += kPiece) {
        const size_t piece = put.bytes - done < kPiece ? put.bytes - done : kPiece;
        cuda::warp_copy<cuda::CopyLoad::plain, 8>(destination + done, source + done,
                                                  static_cast<uint32_t>(piece));
      }
    } else {
      for (size_t i = warp_lane(); i < put.bytes; i += 32) destination[i] = source[i];
    }
  }

  __device__ __forceinline__ void land_and_forget(int index) {
    land(pending_[index]);
    pending_[index] = pending_[--num_pending_];
  }

  // Lands every held-back put to `peer`, in random order.
  __device__ __forceinline__ void land_pending_to(int peer) {
    for (;;) {
      int count = 0;
      for (int i = 0; i < num_pending_; ++i) count += pending_[i].peer == peer ? 1 : 0;
      if (count == 0) return;
      int pick = random_below(count);
      for (int i = 0; i < num_pending_; ++i) {
        if (pending_[i].peer != peer) continue;
        if (pick-- == 0) {
          land_and_forget(i);
          break;
        }
      }
    }
  }

  // A bounded spin of a random length up to the configured delay (not a wait: nothing to time out).
  __device__ __forceinline__ void delay() {
    if (transport_.max_delay_ns == 0) return;
    const uint64_t delay_ns = next_random() % (uint64_t{transport_.max_delay_ns} + 1);
    if (warp_lane() == 0) {
      const uint64_t start = cuda::ptx::globaltimer_ns();
      while (cuda::ptx::globaltimer_ns() - start < delay_ns) {
      }
    }
    __syncwarp();
  }

  // splitmix64: small state, good enough to shuffle a schedule.
  __device__ __forceinline__ uint64_t next_random() {
    random_state_ += 0x9e3779b97f4a7c15ull;
    uint64_t z = random_state_;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  __device__ __forceinline__ int random_below(int bound) {
    return static_cast<int>(next_random() % static_cast<uint64_t>(bound));
  }

  LoopbackDevice transport_;
  const common::SymHeap& heap_;
  uint64_t random_state_;
  int num_pending_ = 0;
  PendingPut pending_[kMaxPendingPuts];
};

static_assert(check_warp_session<LoopbackDevice>(), "loopback implements the device transport");

}  // namespace switchyard::transport
