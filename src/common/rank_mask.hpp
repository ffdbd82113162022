#pragma once
// A rank's view of which peers are masked (Buffer::update_mask, DeepEP's enable_shrink): one i32 word
// per rank, nonzero = masked, in memory where the rank's engines run (host memory on the CPU backend,
// device memory on CUDA). The expert-major engines read it in every call, where they decide whom to
// send to and whom to wait for; update_mask and clean_mask write it, and so does a wait that timed out
// under Config::mask_ranks_on_timeout. Relaxed accesses: a word only ever flips a peer in or out, and
// each engine rereads it where it decides; nothing else is ordered by it.
#include <cstdint>

#include "common/host_device.hpp"

namespace switchyard::common {

struct RankMaskView {
  int32_t* words = nullptr;  // [num_ranks]; null: nothing is masked (and nothing can be)
  int num_ranks = 0;

  SY_HD bool masked(int rank) const {
    if (words == nullptr) return false;
#if defined(__CUDA_ARCH__)
    return *reinterpret_cast<const volatile int32_t*>(words + rank) != 0;
#else
    return __atomic_load_n(words + rank, __ATOMIC_RELAXED) != 0;
#endif
  }
  // A wait on `rank` timed out under Config::mask_ranks_on_timeout.
  SY_HD void mask(int rank) const {
#if defined(__CUDA_ARCH__)
    *reinterpret_cast<volatile int32_t*>(words + rank) = 1;
#else
    __atomic_store_n(words + rank, 1, __ATOMIC_RELAXED);
#endif
  }
  // Whether any rank is masked (this rank's own word included).
  SY_HD bool any() const {
    for (int rank = 0; rank < num_ranks; ++rank) {
      if (masked(rank)) return true;
    }
    return false;
  }
};

}  // namespace switchyard::common
