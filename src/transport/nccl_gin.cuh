#pragma once
// WarpSession<NcclGinDevice>: the device transport on NCCL's GIN, one call per operation.
//   put         ncclGin::put, source and destination in the heap's symmetric window
//   put_signal  ncclGin::put with ncclGin_SignalAdd (NCCL: the signal becomes visible after this put
//               and the earlier puts of the same context to the same peer)
//   signal      ncclGin::signal with ncclGin_SignalAdd
//   flush       ncclGin::flush (sources reusable; like ours, it does not mean "landed")
//   wait        a bounded poll of ncclGin::readSignal (acquire); NCCL's waitSignal cannot time out
//   lsa_pointer ncclGetLsaPointer, for peers of our node (the LSA team)
// Peers are world ranks (ncclTeamWorld). The session id picks the GIN context (NCCL takes it modulo
// ginContextCount), so warps that issue in parallel should use different ids.
// Only compiled with NCCL's device API (SWITCHYARD_WITH_NCCL_GIN); it cannot run without a GIN NIC.
#include "transport/device_transport.cuh"
#include "transport/nccl_gin.hpp"

#if SWITCHYARD_WITH_NCCL_GIN

namespace switchyard::transport {

template <>
class WarpSession<NcclGinDevice> {
 public:
  // The heap is the window itself: GIN names everything by window offset.
  __device__ __forceinline__ WarpSession(const NcclGinDevice& transport, const common::SymHeap& /*heap*/,
                                         uint32_t session_id)
      : transport_(transport), gin_(transport.comm, static_cast<int>(session_id)) {}

  __device__ __forceinline__ void put(int peer, size_t dst_offset, size_t src_offset, size_t bytes) {
    gin_.put(world(), peer, transport_.window, dst_offset, transport_.window, src_offset, bytes,
             ncclGin_None{}, ncclGin_None{}, ncclCoopWarp{});
  }

  __device__ __forceinline__ void put_signal(int peer, size_t dst_offset, size_t src_offset, size_t bytes,
                                             SignalId signal, uint64_t add) {
    gin_.put(world(), peer, transport_.window, dst_offset, transport_.window, src_offset, bytes,
             ncclGin_SignalAdd{gin_signal(signal), add}, ncclGin_None{}, ncclCoopWarp{});
  }

  __device__ __forceinline__ void signal(int peer, SignalId signal, uint64_t add) {
    gin_.signal(world(), peer, ncclGin_SignalAdd{gin_signal(signal), add}, ncclCoopWarp{});
  }

  __device__ __forceinline__ void flush() { gin_.flush(ncclCoopWarp{}); }

  __device__ __forceinline__ uint64_t read_signal(SignalId signal) const {
    return gin_.readSignal(gin_signal(signal));  // NOTES: all 64 bits, acquire (NCCL's defaults)
  }

  __device__ __forceinline__ bool wait_signal(const cuda::KernelContext& context, SignalId signal,
                                              uint64_t at_least, const cuda::WaitSite& site) const {
    return warp_wait_at_least(
        context, [this, signal] { return read_signal(signal); }, at_least, site);
  }

  __device__ __forceinline__ void reset_signal(SignalId signal) {
    if (warp_lane() == 0) gin_.resetSignal(gin_signal(signal));
    __syncwarp();
  }

  // NOTES: resetSignal is a per-thread call (reset_signal above issues it from one lane), so the
  // lanes share the ids.
  __device__ __forceinline__ void reset_signals(SignalId first, uint32_t count) {
    for (uint32_t i = warp_lane(); i < count; i += 32) gin_.resetSignal(gin_signal(first + i));
    __syncwarp();
  }

  __device__ __forceinline__ uint8_t* lsa_pointer(int peer, size_t offset) const {
    const int lsa_peer = ncclTeamRankToLsa(transport_.comm, world(), peer);
    return static_cast<uint8_t*>(ncclGetLsaPointer(transport_.window, offset, lsa_peer));
  }

 private:
  __device__ __forceinline__ ncclTeam world() const { return ncclTeamWorld(transport_.comm); }
  __device__ __forceinline__ ncclGinSignal_t gin_signal(SignalId signal) const {
    return static_cast<ncclGinSignal_t>(transport_.first_signal + signal);
  }

  const NcclGinDevice& transport_;
  ncclGin gin_;
};

static_assert(check_warp_session<NcclGinDevice>(), "nccl_gin implements the device transport");

}  // namespace switchyard::transport

#endif  // SWITCHYARD_WITH_NCCL_GIN
