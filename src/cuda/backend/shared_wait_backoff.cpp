#include "cuda/backend/shared_wait_backoff.hpp"

#include "cuda/backend/environment_tuning.hpp"

namespace switchyard::cuda {

uint32_t shared_wait_backoff_ns_from_environment() {
  return tuning_from_environment("SWITCHYARD_SHARED_WAIT_BACKOFF_NS", 0, kMaxSharedWaitBackoffNs, 1,
                                 "ns a warp waiting on another warp of its block sleeps between polls");
}

}  // namespace switchyard::cuda
