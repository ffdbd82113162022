#include "cuda/backend/dependent_launch.hpp"

#include "cuda/backend/environment_tuning.hpp"

namespace switchyard::cuda {

bool dependent_launch_from_environment() {
  return choice_from_environment("SWITCHYARD_DEPENDENT_LAUNCH", false, {{"on", true}, {"off", false}},
                                 "whether engine kernels launch as programmatic dependents of the stream's "
                                 "previous kernel");
}

bool dependent_launches() {
  // A throwing initialiser leaves the static unset, so a refused value is refused again at the next use.
  static const bool allowed = dependent_launch_from_environment();
  return allowed;
}

}  // namespace switchyard::cuda
