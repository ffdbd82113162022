#pragma once
// The device side of a Transport (transport.hpp): how a kernel reaches a peer outside its load/store
// domain (another node). Only RDMA operations exist: put bytes into the peer's symmetric heap, add to
// one of the peer's signal words, wait on one of our own signal words, flush. A kernel never loads a
// remote node's memory.
//
// Static polymorphism: a transport is a plain struct passed to the kernel by value (LoopbackDevice,
// NcclGinDevice), and `WarpSession<Transport>` is its per-warp session, specialised in the
// transport's own header. An engine is a template over the transport type; check_warp_session<T>()
// states what every session provides. Nothing is virtual on the device.
//
// Granularity (as in NCCL GIN and NVSHMEM): a warp. All 32 lanes call every operation with the same
// arguments; the warp copies (loopback) or one lane posts (GIN). A session is owned by one warp; use
// different session ids for warps that issue in parallel (GIN maps them onto its contexts).
//
// Kernels take the transport and cuda::KernelContext as __grid_constant__ parameters. NOTES: a session
// keeps a reference to the heap view in the context; without __grid_constant__ nvcc copies the whole
// parameter (1.1 KiB) into every thread's local memory to give it an address.
//
// Addresses: offsets from the heap base, valid on every rank because the heap layout is symmetric.
// A put's source is an offset in our own heap too, since GIN can only send from a registered window.
//
// Signals: 64-bit counters named by an index (GIN's ncclGinSignal_t), only ever added to by peers.
// Loopback stores signal i at `signals_offset + i * signal_stride` of the heap, so a layout whose
// counters sit at a fixed stride (InternodeHeapLayout's RdmaCounters) can number them in place.
//
// Ordering (what RDMA gives, and all an engine may rely on):
// - put: lands at some time; puts are unordered among themselves, even to the same address.
// - put_signal / signal: the add becomes visible on `peer` only after every put this session issued
//   to `peer` before it has landed (release); a reader whose wait_signal sees the add (acquire) sees
//   those puts. Nothing is promised about puts of other sessions.
// - flush: every put this session issued so far has read its source, which may then be rewritten.
//   NOTES: not earlier: a put may read its source until flush() returns (GIN's rule), and loopback
//   with reordering on really does. flush() does not say that data has landed; only a signal does.
#include <cstdint>
#include <type_traits>

#include "common/atomics.hpp"
#include "common/sym_heap.hpp"
#include "device/bounded_wait.cuh"
#include "device/kernel_context.hpp"
#include "device/ptx.cuh"

namespace switchyard::transport {

using SignalId = uint32_t;

// Specialised by each transport (loopback_device.cuh, nccl_gin.cuh).
template <typename Transport>
class WarpSession;

namespace detail {

template <typename Session, typename = void>
struct HasWarpSessionApi : std::false_type {};

template <typename Session>
struct HasWarpSessionApi<
    Session, std::void_t<decltype(std::declval<Session&>().put(int{}, size_t{}, size_t{}, size_t{})),
                         decltype(std::declval<Session&>().put_signal(int{}, size_t{}, size_t{}, size_t{},
                                                                      SignalId{}, uint64_t{})),
                         decltype(std::declval<Session&>().signal(int{}, SignalId{}, uint64_t{})),
                         decltype(std::declval<Session&>().flush()),
                         decltype(std::declval<Session&>().reset_signal(SignalId{})),
                         decltype(std::declval<const Session&>().wait_signal(
                             std::declval<const cuda::KernelContext&>(), SignalId{}, uint64_t{},
                             std::declval<const cuda::WaitSite&>()))>> : std::true_type {};

}  // namespace detail

// The interface every WarpSession<Transport> implements (all calls warp-collective):
//   WarpSession(const Transport&, const common::SymHeap& heap, uint32_t session_id)
//   void put(int peer, size_t dst_offset, size_t src_offset, size_t bytes)
//   void put_signal(int peer, size_t dst_offset, size_t src_offset, size_t bytes, SignalId, uint64_t add)
//   void signal(int peer, SignalId, uint64_t add)
//   void flush()
//   uint64_t read_signal(SignalId) const            our own signal word (acquire)
//   bool wait_signal(context, SignalId, uint64_t at_least, site) const
//                                                     bounded; false after recording a TimeoutError
//   void reset_signal(SignalId)                       to 0; no peer may add to it concurrently
// Optional (used by the low_latency engine; not part of check_warp_session):
//   void reset_signals(SignalId first, uint32_t count)
//                                                     reset_signal of [first, first + count), the
//                                                     lanes sharing the work: one warp instead of a
//                                                     warp per word
// NOTES: read_signal is a plain acquire read in every transport here (loopback: ld.acquire.sys of our
// own word; GIN: readSignal), so a lane may call it alone, each lane for its own signal, as the
// lane-parallel waits of the low_latency receivers do.
//   uint8_t* lsa_pointer(int peer, size_t offset) const
//                                                     load/store address of a peer in our node
template <typename Transport>
constexpr bool check_warp_session() {
  using Session = WarpSession<Transport>;
  static_assert(std::is_constructible<Session, const Transport&, const common::SymHeap&, uint32_t>::value,
                "WarpSession(const Transport&, const SymHeap&, uint32_t session_id)");
  static_assert(detail::HasWarpSessionApi<Session>::value,
                "WarpSession must provide put, put_signal, signal, flush, reset_signal and wait_signal");
  static_assert(
      std::is_same<decltype(std::declval<const Session&>().read_signal(SignalId{})), uint64_t>::value,
      "uint64_t read_signal(SignalId) const");
  static_assert(
      std::is_same<decltype(std::declval<const Session&>().lsa_pointer(int{}, size_t{})), uint8_t*>::value,
      "uint8_t* lsa_pointer(int peer, size_t offset) const");
  return true;
}

__device__ __forceinline__ int warp_lane() {
  return static_cast<int>(threadIdx.x % 32);
}

// Warp-collective bounded wait until `read()` (an acquire load of a signal) reaches `target`. Lane 0
// polls with the policy of cuda::wait_at_least (clock and abort flag every 64 polls, failure recorded
// for the host's TimeoutError); the result is shared by the whole warp.
template <typename ReadSignal>
__device__ __forceinline__ bool warp_wait_at_least(const cuda::KernelContext& context, const ReadSignal& read,
                                                   uint64_t target, const cuda::WaitSite& site) {
  int reached = 0;
  if (warp_lane() == 0) {
    uint64_t observed = read();
    reached = observed >= target;
    const uint64_t start = reached ? 0 : cuda::ptx::globaltimer_ns();
    for (uint32_t polls = 1; !reached; ++polls) {
      observed = read();
      reached = observed >= target;
      if (reached || (polls & 63) != 0) continue;
      if (cuda::rank_aborted(context)) break;
      const uint64_t waited = cuda::ptx::globaltimer_ns() - start;
      if (waited > context.timeout_ns) {
        cuda::record_wait_failure(context, site, static_cast<int64_t>(target), static_cast<int64_t>(observed),
                                  waited);
        break;
      }
    }
  }
  reached = __shfl_sync(0xffffffffu, reached, 0);
  // NOTES: bar.warp.sync orders lane 0's acquire before the other lanes' reads of the data.
  __syncwarp();
  return reached != 0;
}

}  // namespace switchyard::transport
