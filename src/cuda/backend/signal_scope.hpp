#pragma once
// The memory scope of the signals between ranks (device/peer_signal.cuh): GPU scope where every rank's
// heap is on this GPU, system scope otherwise. SWITCHYARD_SIGNAL_SCOPE=sys keeps system scope everywhere
// (the measurement's control, and a fallback should a platform disagree); =gpu or unset, the default.
namespace switchyard::cuda {

// Whether this process may use GPU-scope signals where every rank is on its GPU; anything but gpu, sys or
// empty in SWITCHYARD_SIGNAL_SCOPE is refused naming the variable.
bool gpu_scope_signals_allowed_by_environment();

// KernelContext::peers_on_this_gpu: every one of `num_ranks` ranks has its heap on this GPU, and the
// environment allows GPU scope.
inline bool signals_at_gpu_scope(bool allowed, int ranks_on_this_device, int num_ranks) {
  return allowed && ranks_on_this_device == num_ranks;
}

}  // namespace switchyard::cuda
