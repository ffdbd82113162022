#pragma once
// A sampled fresh dispatch's clock words (SWITCHYARD_NORMAL_PHASES; cuda/normal/dispatch_phases.hpp says what
// each one marks and how they are printed): thread 0 of the calling block notes %globaltimer, one clock for
// every rank of a GPU, so the ranks' lines can be set side by side. Off (null), one predicate.
#include <cstdint>

#include "cuda/normal/dispatch_phases.hpp"
#include "device/ptx.cuh"

namespace switchyard::cuda {

__device__ __forceinline__ void stamp_dispatch(uint64_t* stamps, DispatchStamp which) {
  if (stamps != nullptr && threadIdx.x == 0) stamps[which] = ptx::globaltimer_ns();
}

}  // namespace switchyard::cuda
